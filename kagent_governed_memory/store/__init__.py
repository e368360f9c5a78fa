"""The PostgreSQL store: ``GovernedMemoryStore`` (direct mode) and what operates it.

``GovernedMemoryStore`` is one class assembled from its parts on a shared base (``_base``): the
runtime operations (``_runtime``), erasure (``_erasure``) and the policy registry
(``_policies``); statements, validation, cursors, the sweeper, admission and the packaged
migrations are modules of this package.  Import the names below from here.
"""

from ..models import OffboardReport, ScopeOutcome, StoreReport
from ._admission import Admission
from ._cursor import _CURSOR, _cursor_tag, _decode_cursor, _encode_cursor  # noqa: F401
from ._logpin import PIN_OPTIONS, PINNED_LOG_SETTINGS, pinned_dsn
from ._migrations import (
    LATEST_VERSION,
    OPERATOR_ROLE,
    SERVICE_ROLE,
    apply_migrations,
    migrate,
    schema_version,
)
from ._sql import Migration, migrations, query
from ._store import (
    EMBEDDING_DIMENSION,
    MAX_PAGE_SIZE,
    MAX_SEARCH_LIMIT,
    MAX_SEARCH_QUERIES,
    GovernedMemoryStore,
)
from ._sweeper import Sweeper

__all__ = [
    "EMBEDDING_DIMENSION",
    "LATEST_VERSION",
    "MAX_PAGE_SIZE",
    "MAX_SEARCH_LIMIT",
    "MAX_SEARCH_QUERIES",
    "OPERATOR_ROLE",
    "PINNED_LOG_SETTINGS",
    "PIN_OPTIONS",
    "SERVICE_ROLE",
    "Admission",
    "GovernedMemoryStore",
    "Migration",
    "OffboardReport",
    "ScopeOutcome",
    "StoreReport",
    "Sweeper",
    "apply_migrations",
    "migrate",
    "migrations",
    "pinned_dsn",
    "query",
    "schema_version",
]
