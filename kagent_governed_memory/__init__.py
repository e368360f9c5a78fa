"""Governed long-term memory for kagent / google-adk agents (ADR 0023).

Nothing is collected before explicit consent; every read and write is fenced by the consent
generation inside the database transaction; expiry is an authorization boundary; one fact can
be erased and the erasure verified; no log, trace, metric or error carries memory content.

Importing this package changes no global logging or tracing configuration.
"""

from typing import TYPE_CHECKING

from .admission import Admission
from .assertion import ScopeAssertion, sign_scope_assertion, verify_scope_assertion
from .control_room import (
    ControlRoomCheck,
    ControlRoomState,
    check_control_room,
    check_control_room_events,
)
from .kagent import KagentBridgeStore, KagentControllerStore
from .controls import MemoryControls, parse_memory_command, recheck_before_send
from .devbridge import DEV_ISSUER, DevBridge
from .devdb import DevDatabase, EmbeddedUnavailable, dev_database
from .embedding import Embedder, HashingEmbedder, OpenAICompatibleEmbedder
from .errors import (
    AdmissionDenied,
    ConsentConflict,
    ConsentRequired,
    EntryCapReached,
    ErasureFailed,
    FactTooLarge,
    GovernanceError,
    InvalidIdentity,
    InvalidInput,
    ProviderError,
    ReasonCode,
    ScopeDenied,
    StaleGeneration,
    StoreUnavailable,
)
from .identity import (
    AgentIdentity,
    MemoryScope,
    OriginKind,
    OriginName,
    Principal,
    ScopeKey,
    ScopeKind,
    ScopeKindName,
)
from .keys import (
    generate_private_key,
    load_private_key,
    load_public_keys,
    private_key_from_env,
    public_key_pem,
    public_keys_from_env,
)
from .ledger import redeem_scope_assertion
from .migrations import SERVICE_ROLE, migrate
from .models import (
    ConsentReceipt,
    ErasureReceipt,
    ForgetReceipt,
    InspectPage,
    MemoryRecord,
    OffboardReport,
    ScopeOutcome,
    ScopeStatus,
    StoreReport,
)
from .otel_logs import ContentFreeLogRecordProcessor
from .policy import DEV_POLICY, PROTOTYPE_POLICY, MemoryPolicy
from .repository import (
    ControlRepository,
    MemoryRepository,
    OperatorRepository,
    RuntimeRepository,
)
from .request import ASSERTION_HEADER, GRANT_HEADER, memory_request
from .store import EMBEDDING_DIMENSION, GovernedMemoryStore
from .telemetry import (
    ContentFreeSpanProcessor,
    check_adk_span_content,
    install_content_free_logging,
)

if TYPE_CHECKING:  # real types for the lazily imported names below
    from .adk import GovernedMemoryService, configure_governed_memory
    from .adk.a2a import governed_a2a_app

# The version's single definition: the build backend reads it from here (pyproject.toml,
# [tool.hatch.version]).
__version__ = "0.1.0"

# google-adk (the ``adk`` extra) is imported on first use of these names, not by
# ``import kagent_governed_memory`` (it is heavy, and the store, CLI and bridge-side code do not
# need it).
_ADK_NAMES = {"GovernedMemoryService", "configure_governed_memory"}
# and these on first use of google-adk's A2A support (the ``a2a`` extra)
_A2A_NAMES = {"governed_a2a_app"}


def __getattr__(name: str) -> object:
    if name in _ADK_NAMES:
        from . import adk

        return getattr(adk, name)
    if name in _A2A_NAMES:
        from .adk import a2a

        return getattr(a2a, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ASSERTION_HEADER",
    "DEV_ISSUER",
    "DEV_POLICY",
    "EMBEDDING_DIMENSION",
    "GRANT_HEADER",
    "PROTOTYPE_POLICY",
    "SERVICE_ROLE",
    "Admission",
    "AdmissionDenied",
    "AgentIdentity",
    "ConsentConflict",
    "ConsentReceipt",
    "ConsentRequired",
    "ContentFreeLogRecordProcessor",
    "ContentFreeSpanProcessor",
    "ControlRepository",
    "ControlRoomCheck",
    "ControlRoomState",
    "DevBridge",
    "DevDatabase",
    "EmbeddedUnavailable",
    "Embedder",
    "EntryCapReached",
    "ErasureFailed",
    "ErasureReceipt",
    "FactTooLarge",
    "ForgetReceipt",
    "GovernanceError",
    "GovernedMemoryService",
    "GovernedMemoryStore",
    "HashingEmbedder",
    "InspectPage",
    "InvalidIdentity",
    "InvalidInput",
    "KagentBridgeStore",
    "KagentControllerStore",
    "MemoryControls",
    "MemoryPolicy",
    "MemoryRecord",
    "MemoryRepository",
    "MemoryScope",
    "OffboardReport",
    "OpenAICompatibleEmbedder",
    "OperatorRepository",
    "OriginKind",
    "OriginName",
    "Principal",
    "ProviderError",
    "ReasonCode",
    "RuntimeRepository",
    "ScopeAssertion",
    "ScopeDenied",
    "ScopeKey",
    "ScopeKind",
    "ScopeKindName",
    "ScopeOutcome",
    "ScopeStatus",
    "StaleGeneration",
    "StoreReport",
    "StoreUnavailable",
    "check_adk_span_content",
    "check_control_room",
    "check_control_room_events",
    "configure_governed_memory",
    "dev_database",
    "generate_private_key",
    "governed_a2a_app",
    "install_content_free_logging",
    "load_private_key",
    "load_public_keys",
    "memory_request",
    "migrate",
    "parse_memory_command",
    "private_key_from_env",
    "public_key_pem",
    "public_keys_from_env",
    "recheck_before_send",
    "redeem_scope_assertion",
    "sign_scope_assertion",
    "verify_scope_assertion",
]
