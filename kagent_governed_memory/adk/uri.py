"""google-adk's memory-service URIs: ``adk web --memory_service_uri=kgm+postgresql://…``.

google-adk builds its services from URIs before its server's event loop runs
(``get_fast_api_app``), through a registry agents can extend (``services.yaml`` or
``services.py`` beside the agent).  This module gives it a governed memory service:

* ``services.yaml``::

      services:
        - scheme: kgm+postgresql
          type: memory
          class: kagent_governed_memory.adk.uri.UriGovernedMemoryService

* or ``services.py``: ``from kagent_governed_memory.adk.uri import register; register()``.

Kagent mode (no database credentials in the pod) is the same with the controller's governed
memory URL and the scheme ``kgm+http`` (or ``kgm+https``)::

    kgm+http://kagent-controller.kagent:8085?local_server=example.org&agent=kagent/my-agent
        &embedding_url=http://agentgateway/v1&embedding_model=bge-m3&dimension=1024

It builds the service on ``KagentControllerStore`` (the pod's kagent ServiceAccount token from
``/var/run/secrets/tokens/kagent-token``, or ``token_file=``); register the schemes the same way
(``services.yaml``: ``scheme: kgm+http``; ``register()`` registers them all).  On kagent main,
``kgm+grpc://`` (or ``kgm+grpcs://``) reaches its gRPC ``GovernedMemoryService`` (the
``kagent-main`` extra) with each request's runtime grant instead of a token.

The URI is the application login's PostgreSQL URI with the scheme ``kgm+postgresql`` and these
query parameters (every other parameter is passed to libpq, e.g. ``sslmode``)::

    kgm+postgresql://app:…@db:5432/memory?local_server=example.org&agent=kagent/my-agent
        &embedding_url=http://agentgateway/v1&embedding_model=bge-m3&dimension=1024

``local_server`` and ``agent`` (``namespace/name``) are required; the embedder is an
OpenAI-compatible endpoint (``embedding_url``, ``embedding_model``, ``dimension``, default 768,
which becomes the policy's ``embedding_dimension``), or ``embedder=hashing`` (offline, for
trying things out).  ``span_content`` is ``refuse`` (default), ``warn`` or ``ignore`` as for
``GovernedMemoryService``.  No secret is read from the URI except the database password libpq
takes from it; an API key for the embedding endpoint comes from ``KGM_EMBEDDING_API_KEY``.

The store opens its pool on first use, inside the server's loop.  Memory still needs a scope
assertion bound per request (``memory_request``): ``adk web`` and ``adk api_server`` bind none,
so there every request is refused with ``no_binding`` (logged once at WARNING, with the fix)
until your A2A executor binds the bridge's assertion — the wiring can be tried, memory cannot be
collected without consent.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit

import psycopg

from ..embedding import Embedder, HashingEmbedder, OpenAICompatibleEmbedder
from ..errors import InvalidInput, ReasonCode
from ..identity import AgentIdentity
from ..kagent import KagentControllerStore
from ..policy import PROTOTYPE_POLICY, MemoryPolicy
from ..store._store import GovernedMemoryStore
from ..telemetry._spans import SpanContentMode
from .service import GovernedMemoryService

__all__ = ["KAGENT_SCHEMES", "SCHEME", "UriGovernedMemoryService", "memory_service_from_uri",
           "register"]

SCHEME = "kgm+postgresql"  # direct mode: the application's database login
KAGENT_SCHEMES = ("kgm+http", "kgm+https")  # kagent mode: the controller's governed API
# kagent mode on kagent main: its gRPC GovernedMemoryService (the kagent-main extra; the runtime
# presents each request's grant, so no token_file)
GRPC_SCHEMES = ("kgm+grpc", "kgm+grpcs")
_OURS = {"local_server", "agent", "embedder", "embedding_url", "embedding_model", "dimension",
         "span_content", "token_file"}
_T = TypeVar("_T")


class _LazyStore(GovernedMemoryStore):
    """A ``GovernedMemoryStore`` that opens (and checks its login) on first use, in the loop
    that uses it: google-adk constructs services before its event loop exists."""

    def __init__(self, dsn: str, *, local_server: str, policy: MemoryPolicy) -> None:
        super().__init__(None, local_server=local_server, policy=policy)
        self._dsn = dsn
        self._opening: asyncio.Lock | None = None

    async def _with_conn(
        self, op: str, work: Callable[[psycopg.AsyncConnection[Any]], Awaitable[_T]]
    ) -> _T:
        if self._pool is None:
            if self._opening is None:
                self._opening = asyncio.Lock()
            async with self._opening:
                if self._pool is None:
                    opened = await GovernedMemoryStore.open(
                        self._dsn, local_server=self._local_server, policy=self.policy)
                    self._pool, self._sweeper = opened._pool, opened._sweeper
        return await super()._with_conn(op, work)


def _parse(uri: str) -> tuple[str, dict[str, str]]:
    """(the DSN, or the controller's ``http(s)://`` URL in kagent mode; our options)."""
    if not isinstance(uri, str):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="memory_service_uri")
    parts = urlsplit(uri)
    if parts.scheme != SCHEME and parts.scheme not in (*KAGENT_SCHEMES, *GRPC_SCHEMES):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="memory_service_uri")
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in pairs if k in _OURS}
    libpq = [(k, v) for k, v in pairs if k not in _OURS]
    if parts.scheme in (*KAGENT_SCHEMES, *GRPC_SCHEMES):
        if libpq or not parts.netloc or "@" in parts.netloc:  # nothing else, no credentials
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="memory_service_uri")
        return f"{parts.scheme.removeprefix('kgm+')}://{parts.netloc}{parts.path}", ours
    query = urlencode(libpq)
    # not urlunsplit: it drops an empty authority ("postgresql:///db?host=/socket/dir")
    dsn = f"postgresql://{parts.netloc}{parts.path}" + (f"?{query}" if query else "")
    return dsn, ours


def _embedder(options: dict[str, str]) -> Embedder:
    try:
        dimension = int(options.get("dimension", "768"))
    except ValueError:
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="dimension") from None
    if not 1 <= dimension <= 16_000:
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="dimension")
    if options.get("embedder") == "hashing":
        return HashingEmbedder(dimension)
    url, model = options.get("embedding_url"), options.get("embedding_model")
    if not url or not model:
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="embedding_url")
    return OpenAICompatibleEmbedder(url, model, dimension=dimension,
                                    api_key=os.environ.get("KGM_EMBEDDING_API_KEY") or None)


def _agent(value: str | None) -> AgentIdentity:
    namespace, _, name = (value or "").partition("/")
    if not namespace or not name:
        raise InvalidInput(ReasonCode.INVALID_IDENTITY, field="uri_agent")
    return AgentIdentity(namespace=namespace, name=name)


_SPAN_CONTENT: dict[str, SpanContentMode] = {"refuse": "refuse", "warn": "warn",
                                              "ignore": "ignore"}


def _span_content(value: str) -> SpanContentMode:
    if value not in _SPAN_CONTENT:
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="span_content")
    return _SPAN_CONTENT[value]


class UriGovernedMemoryService(GovernedMemoryService):
    """``GovernedMemoryService`` built from a ``kgm+postgresql://`` URI (the module docstring
    says which); what google-adk's ``services.yaml`` instantiates as ``Class(uri=...)``."""

    def __init__(self, uri: str, **_adk_kwargs: Any) -> None:
        dsn, options = _parse(uri)
        embedder = _embedder(options)
        local_server = options.get("local_server")
        if not local_server:
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="uri_local_server")
        policy = MemoryPolicy(**{**PROTOTYPE_POLICY.model_dump(),
                                 "embedding_dimension": embedder.dimension})
        agent = _agent(options.get("agent"))
        store: GovernedMemoryStore | KagentControllerStore
        if dsn.startswith(("http://", "https://", "grpc://", "grpcs://")):
            store = KagentControllerStore(dsn, agent=agent, local_server=local_server,
                                          policy=policy, token_file=options.get("token_file"))
        else:
            store = _LazyStore(dsn, local_server=local_server, policy=policy)
        super().__init__(store, agent=agent, embedder=embedder,
                         span_content=_span_content(options.get("span_content", "refuse")))


def memory_service_from_uri(uri: str, **kwargs: Any) -> UriGovernedMemoryService:
    """google-adk's ``ServiceFactory`` for ``kgm+postgresql://`` and ``kgm+http(s)://`` URIs."""
    return UriGovernedMemoryService(uri, **kwargs)


def register(registry: Any = None) -> None:
    """Register the ``kgm+postgresql`` and ``kgm+http(s)`` schemes in google-adk's service
    registry (the global one by default), so ``--memory_service_uri=kgm+…://…`` builds this
    service."""
    if registry is None:
        from google.adk.cli.service_registry import get_service_registry

        registry = get_service_registry()
    for scheme in (SCHEME, *KAGENT_SCHEMES, *GRPC_SCHEMES):
        registry.register_memory_service(scheme, memory_service_from_uri)
