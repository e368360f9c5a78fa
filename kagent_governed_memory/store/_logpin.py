"""Server-log settings pinned on every connection the library opens.

A login may set these PostgreSQL parameters for itself (``user`` context) — and so, with
``ALTER ROLE <itself> SET``, for every later session of the login; the database owner may set
them for the whole database with ``ALTER DATABASE … SET``.  Each of them makes the server log
carry what a statement carried: the bound parameters of a failing statement (every refused
save's facts and vectors), plan trees (a fact folded into a ``Const``), parse trees, a
``SELECT … INTO STRICT``'s parameters, or a module loaded from ``$libdir/plugins``.  Sent as
``-c name=value`` in the libpq ``options`` startup parameter, a value has the ``client``
source, which beats every role and database default.  ``GovernedMemoryStore.open()`` checks
them (``log_settings_unsafe``); a session can still ``SET`` them for itself later — the pin
protects against defaults and against a connection path that drops ``options`` (a pooler),
not against a holder of the login running its own SQL.  See docs/database-roles.md.

The superuser-only ``log_*`` settings (``log_statement``, ``log_min_duration_statement``, …)
cannot be set by these logins and cannot be sent by them (the connection would fail): they are
the operator's (docs/database-roles.md lists their safe values).
"""

from __future__ import annotations

import os

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

__all__ = ["PINNED_LOG_SETTINGS", "PIN_OPTIONS", "SETTINGS_COLUMNS", "pinned_dsn"]

# (name, safe value): compared as current_setting() text.
PINNED_LOG_SETTINGS: tuple[tuple[str, str], ...] = (
    ("log_parameter_max_length_on_error", "0"),
    ("debug_print_parse", "off"),
    ("debug_print_rewritten", "off"),
    ("debug_print_plan", "off"),
    ("plpgsql.print_strict_params", "off"),
    ("local_preload_libraries", ""),
)
PIN_OPTIONS = " ".join(f"-c {name}={value}" for name, value in PINNED_LOG_SETTINGS)

# One boolean per setting, in PINNED_LOG_SETTINGS order (appended to the role check's row); a
# setting the server does not know (plpgsql's before it is loaded, unpinned) cannot leak.
SETTINGS_COLUMNS = ",\n       ".join(
    f"coalesce(current_setting('{name}', true), '{value}') = '{value}'"
    for name, value in PINNED_LOG_SETTINGS
)


def pinned_dsn(dsn: str) -> str:
    """``dsn`` with the pinned settings appended to its ``options`` (the user's own options,
    or ``PGOPTIONS`` when the DSN has none, are kept and come first: a later ``-c`` wins).
    A DSN libpq cannot parse is returned as it is: connecting reports it as before."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return dsn
    own = params.get("options")
    if own is None:
        own = os.environ.get("PGOPTIONS")
    own = str(own).strip() if own is not None else ""
    return make_conninfo(dsn, options=f"{own} {PIN_OPTIONS}" if own else PIN_OPTIONS)
