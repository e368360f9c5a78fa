"""Development tooling: a throwaway database (``_database``), the development bridge
(``_bridge``) and the embedded PostgreSQL 18 + pgvector server behind both (``_embedded``, the
``embedded`` extra).  The embedded-server helpers and role names are what tests, benchmarks and
notebooks build their databases with.  Import the names below from here."""

from ._bridge import DEV_ISSUER, ENABLE_ENV, KAGENT_ENV, DevBridge, dev_database_at
from ._database import DevDatabase, EmbeddedUnavailable, dev_database
from ._embedded import (
    APP_ROLE,
    BRIDGE_ROLE,
    CONTROLLER_ROLE,
    DEV_MARKER,
    GRANTS_GROUP,
    GRANTS_ROLE,
    OPERATOR_ROLE,
    OWNER_ROLE,
    RUNTIME_ROLE,
    EmbeddedPostgres,
    mark_dev_database,
    pg_bin_dir,
    pg_ctl_executable,
    prepare_app_database,
    socket_dir_for,
    wrapper_path,
)

__all__ = [
    "APP_ROLE",
    "BRIDGE_ROLE",
    "CONTROLLER_ROLE",
    "DEV_ISSUER",
    "DEV_MARKER",
    "ENABLE_ENV",
    "GRANTS_GROUP",
    "GRANTS_ROLE",
    "KAGENT_ENV",
    "OPERATOR_ROLE",
    "OWNER_ROLE",
    "RUNTIME_ROLE",
    "DevBridge",
    "DevDatabase",
    "EmbeddedPostgres",
    "EmbeddedUnavailable",
    "dev_database",
    "dev_database_at",
    "mark_dev_database",
    "pg_bin_dir",
    "pg_ctl_executable",
    "prepare_app_database",
    "socket_dir_for",
    "wrapper_path",
]
