"""Scope keys and embeddings for tests: ``make_key`` (a control-room key with overridable
parts) and ``vec`` (the offline ``HashingEmbedder``'s vector of a text)."""

from __future__ import annotations

from kagent_governed_memory import AgentIdentity, MemoryScope, OriginKind, Principal, ScopeKey
from kagent_governed_memory.embedding import HashingEmbedder


def make_key(
    mxid: str = "@alice:example.org",
    *,
    namespace: str = "kagent",
    agent: str = "my-agent",
    room: str = "!control-a:example.org",
    origin: OriginKind = OriginKind.NATIVE_LOCAL,
) -> ScopeKey:
    return ScopeKey(
        principal=Principal(mxid=mxid, origin=origin),
        agent=AgentIdentity(namespace=namespace, name=agent),
        scope=MemoryScope.control_room(room),
    )


_EMBEDDER = HashingEmbedder()


def vec(text: str) -> list[float]:
    return _EMBEDDER.embed_one(text)
