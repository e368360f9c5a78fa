import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MemoryPrincipal(_message.Message):
    __slots__ = ("issuer", "subject")
    ISSUER_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    issuer: str
    subject: str
    def __init__(self, issuer: _Optional[str] = ..., subject: _Optional[str] = ...) -> None: ...

class MemoryScope(_message.Message):
    __slots__ = ("principal", "agent_namespace", "agent_name", "kind", "context_id")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    principal: MemoryPrincipal
    agent_namespace: str
    agent_name: str
    kind: str
    context_id: str
    def __init__(self, principal: _Optional[_Union[MemoryPrincipal, _Mapping]] = ..., agent_namespace: _Optional[str] = ..., agent_name: _Optional[str] = ..., kind: _Optional[str] = ..., context_id: _Optional[str] = ...) -> None: ...

class GovernedMemoryEntry(_message.Message):
    __slots__ = ("id", "content", "created_at", "expires_at", "score")
    ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    id: str
    content: str
    created_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    score: float
    def __init__(self, id: _Optional[str] = ..., content: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., score: _Optional[float] = ...) -> None: ...

class GovernedMemoryItem(_message.Message):
    __slots__ = ("content", "vector")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    content: str
    vector: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, content: _Optional[str] = ..., vector: _Optional[_Iterable[float]] = ...) -> None: ...

class GovernedMemoryVector(_message.Message):
    __slots__ = ("vector",)
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    vector: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, vector: _Optional[_Iterable[float]] = ...) -> None: ...

class GovernedMemoryResults(_message.Message):
    __slots__ = ("memories",)
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[GovernedMemoryEntry]
    def __init__(self, memories: _Optional[_Iterable[_Union[GovernedMemoryEntry, _Mapping]]] = ...) -> None: ...

class GovernedMemoryErasure(_message.Message):
    __slots__ = ("scope_id", "deleted", "verified", "generation")
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    VERIFIED_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    scope_id: str
    deleted: int
    verified: bool
    generation: int
    def __init__(self, scope_id: _Optional[str] = ..., deleted: _Optional[int] = ..., verified: _Optional[bool] = ..., generation: _Optional[int] = ...) -> None: ...

class GovernedMemoryServiceGrantConsentRequest(_message.Message):
    __slots__ = ("scope", "purpose")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    scope: MemoryScope
    purpose: str
    def __init__(self, scope: _Optional[_Union[MemoryScope, _Mapping]] = ..., purpose: _Optional[str] = ...) -> None: ...

class GovernedMemoryServiceGrantConsentResponse(_message.Message):
    __slots__ = ("scope_id", "generation", "purpose", "policy_version", "granted_at", "expires_at")
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    GRANTED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    scope_id: str
    generation: int
    purpose: str
    policy_version: str
    granted_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, scope_id: _Optional[str] = ..., generation: _Optional[int] = ..., purpose: _Optional[str] = ..., policy_version: _Optional[str] = ..., granted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GovernedMemoryServiceGenerationRequest(_message.Message):
    __slots__ = ("scope",)
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    scope: MemoryScope
    def __init__(self, scope: _Optional[_Union[MemoryScope, _Mapping]] = ...) -> None: ...

class GovernedMemoryServiceGenerationResponse(_message.Message):
    __slots__ = ("generation",)
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    generation: int
    def __init__(self, generation: _Optional[int] = ...) -> None: ...

class GovernedMemoryServiceRedeemRequest(_message.Message):
    __slots__ = ("scope", "scope_assertion", "admit_units")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ASSERTION_FIELD_NUMBER: _ClassVar[int]
    ADMIT_UNITS_FIELD_NUMBER: _ClassVar[int]
    scope: MemoryScope
    scope_assertion: str
    admit_units: int
    def __init__(self, scope: _Optional[_Union[MemoryScope, _Mapping]] = ..., scope_assertion: _Optional[str] = ..., admit_units: _Optional[int] = ...) -> None: ...

class GovernedMemoryServiceRedeemResponse(_message.Message):
    __slots__ = ("generation", "admitted")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_FIELD_NUMBER: _ClassVar[int]
    generation: int
    admitted: bool
    def __init__(self, generation: _Optional[int] = ..., admitted: _Optional[bool] = ...) -> None: ...

class GovernedMemoryServiceAdmitRequest(_message.Message):
    __slots__ = ("scope", "scope_assertion", "generation", "units", "explicit")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ASSERTION_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    UNITS_FIELD_NUMBER: _ClassVar[int]
    EXPLICIT_FIELD_NUMBER: _ClassVar[int]
    scope: MemoryScope
    scope_assertion: str
    generation: int
    units: int
    explicit: bool
    def __init__(self, scope: _Optional[_Union[MemoryScope, _Mapping]] = ..., scope_assertion: _Optional[str] = ..., generation: _Optional[int] = ..., units: _Optional[int] = ..., explicit: _Optional[bool] = ...) -> None: ...

class GovernedMemoryServiceAdmitResponse(_message.Message):
    __slots__ = ("admitted",)
    ADMITTED_FIELD_NUMBER: _ClassVar[int]
    admitted: bool
    def __init__(self, admitted: _Optional[bool] = ...) -> None: ...

class GovernedMemoryServiceSaveRequest(_message.Message):
    __slots__ = ("scope", "scope_assertion", "generation", "items")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ASSERTION_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    scope: MemoryScope
    scope_assertion: str
    generation: int
    items: _containers.RepeatedCompositeFieldContainer[GovernedMemoryItem]
    def __init__(self, scope: _Optional[_Union[MemoryScope, _Mapping]] = ..., scope_assertion: _Optional[str] = ..., generation: _Optional[int] = ..., items: _Optional[_Iterable[_Union[GovernedMemoryItem, _Mapping]]] = ...) -> None: ...

class GovernedMemoryServiceSaveResponse(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ids: _Optional[_Iterable[str]] = ...) -> None: ...

class GovernedMemoryServiceSearchRequest(_message.Message):
    __slots__ = ("scope", "scope_assertion", "generation", "vector", "vectors", "limit")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ASSERTION_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    scope: MemoryScope
    scope_assertion: str
    generation: int
    vector: _containers.RepeatedScalarFieldContainer[float]
    vectors: _containers.RepeatedCompositeFieldContainer[GovernedMemoryVector]
    limit: int
    def __init__(self, scope: _Optional[_Union[MemoryScope, _Mapping]] = ..., scope_assertion: _Optional[str] = ..., generation: _Optional[int] = ..., vector: _Optional[_Iterable[float]] = ..., vectors: _Optional[_Iterable[_Union[GovernedMemoryVector, _Mapping]]] = ..., limit: _Optional[int] = ...) -> None: ...

class GovernedMemoryServiceSearchResponse(_message.Message):
    __slots__ = ("memories", "results")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[GovernedMemoryEntry]
    results: _containers.RepeatedCompositeFieldContainer[GovernedMemoryResults]
    def __init__(self, memories: _Optional[_Iterable[_Union[GovernedMemoryEntry, _Mapping]]] = ..., results: _Optional[_Iterable[_Union[GovernedMemoryResults, _Mapping]]] = ...) -> None: ...

class GovernedMemoryServiceInspectRequest(_message.Message):
    __slots__ = ("scope", "cursor", "page_size")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    scope: MemoryScope
    cursor: str
    page_size: int
    def __init__(self, scope: _Optional[_Union[MemoryScope, _Mapping]] = ..., cursor: _Optional[str] = ..., page_size: _Optional[int] = ...) -> None: ...

class GovernedMemoryServiceInspectResponse(_message.Message):
    __slots__ = ("entries", "next_cursor")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[GovernedMemoryEntry]
    next_cursor: str
    def __init__(self, entries: _Optional[_Iterable[_Union[GovernedMemoryEntry, _Mapping]]] = ..., next_cursor: _Optional[str] = ...) -> None: ...

class GovernedMemoryServiceForgetRequest(_message.Message):
    __slots__ = ("scope", "entry_id", "scope_assertion", "generation")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ASSERTION_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    scope: MemoryScope
    entry_id: str
    scope_assertion: str
    generation: int
    def __init__(self, scope: _Optional[_Union[MemoryScope, _Mapping]] = ..., entry_id: _Optional[str] = ..., scope_assertion: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class GovernedMemoryServiceForgetResponse(_message.Message):
    __slots__ = ("erasure",)
    ERASURE_FIELD_NUMBER: _ClassVar[int]
    erasure: GovernedMemoryErasure
    def __init__(self, erasure: _Optional[_Union[GovernedMemoryErasure, _Mapping]] = ...) -> None: ...

class GovernedMemoryServiceForgetAllRequest(_message.Message):
    __slots__ = ("scope",)
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    scope: MemoryScope
    def __init__(self, scope: _Optional[_Union[MemoryScope, _Mapping]] = ...) -> None: ...

class GovernedMemoryServiceForgetAllResponse(_message.Message):
    __slots__ = ("erasure",)
    ERASURE_FIELD_NUMBER: _ClassVar[int]
    erasure: GovernedMemoryErasure
    def __init__(self, erasure: _Optional[_Union[GovernedMemoryErasure, _Mapping]] = ...) -> None: ...

class GovernedMemoryServiceWithdrawRequest(_message.Message):
    __slots__ = ("scope",)
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    scope: MemoryScope
    def __init__(self, scope: _Optional[_Union[MemoryScope, _Mapping]] = ...) -> None: ...

class GovernedMemoryServiceWithdrawResponse(_message.Message):
    __slots__ = ("erasure",)
    ERASURE_FIELD_NUMBER: _ClassVar[int]
    erasure: GovernedMemoryErasure
    def __init__(self, erasure: _Optional[_Union[GovernedMemoryErasure, _Mapping]] = ...) -> None: ...

class GovernedMemoryServiceStatusRequest(_message.Message):
    __slots__ = ("scope",)
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    scope: MemoryScope
    def __init__(self, scope: _Optional[_Union[MemoryScope, _Mapping]] = ...) -> None: ...

class GovernedMemoryServiceStatusResponse(_message.Message):
    __slots__ = ("scope_id", "enabled", "purpose", "policy_version", "generation", "consent_expires_at", "max_ttl", "entry_cap", "entry_count", "last_verified_erasure_at", "failure_reason")
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    CONSENT_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    MAX_TTL_FIELD_NUMBER: _ClassVar[int]
    ENTRY_CAP_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_VERIFIED_ERASURE_AT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    scope_id: str
    enabled: bool
    purpose: str
    policy_version: str
    generation: int
    consent_expires_at: _timestamp_pb2.Timestamp
    max_ttl: _duration_pb2.Duration
    entry_cap: int
    entry_count: int
    last_verified_erasure_at: _timestamp_pb2.Timestamp
    failure_reason: str
    def __init__(self, scope_id: _Optional[str] = ..., enabled: _Optional[bool] = ..., purpose: _Optional[str] = ..., policy_version: _Optional[str] = ..., generation: _Optional[int] = ..., consent_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., entry_cap: _Optional[int] = ..., entry_count: _Optional[int] = ..., last_verified_erasure_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., failure_reason: _Optional[str] = ...) -> None: ...

class GovernedMemoryServiceOffboardRequest(_message.Message):
    __slots__ = ("principal",)
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    principal: MemoryPrincipal
    def __init__(self, principal: _Optional[_Union[MemoryPrincipal, _Mapping]] = ...) -> None: ...

class GovernedMemoryScopeOutcome(_message.Message):
    __slots__ = ("scope_id", "outcome", "deleted")
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    scope_id: str
    outcome: str
    deleted: int
    def __init__(self, scope_id: _Optional[str] = ..., outcome: _Optional[str] = ..., deleted: _Optional[int] = ...) -> None: ...

class GovernedMemoryServiceOffboardResponse(_message.Message):
    __slots__ = ("scopes",)
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    scopes: _containers.RepeatedCompositeFieldContainer[GovernedMemoryScopeOutcome]
    def __init__(self, scopes: _Optional[_Iterable[_Union[GovernedMemoryScopeOutcome, _Mapping]]] = ...) -> None: ...
