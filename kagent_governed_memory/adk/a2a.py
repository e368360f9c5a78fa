"""Bring-your-own over A2A in one call: google-adk's A2A app with the governed per-request binding.

Needs the ``a2a`` extra (``pip install -e '.[a2a]'``: google-adk's own ``a2a``
extra, the a2a-sdk server).  ``governed_a2a_app(agent, memory, public_keys=..., issuer=...)``
returns google-adk's Starlette A2A application (``google.adk.a2a.utils.agent_to_a2a.to_a2a``)
whose executor wraps every A2A request in ``memory_request(...)``:

* the token is the request's ``x-kagent-memory-scope`` header (``ASSERTION_HEADER``), verified
  with the bridge's ``public_keys`` and ``issuer`` for ``memory.agent`` and the request's A2A
  ``contextId``; a request without one has no memory (``assertion_missing``) and the chat still
  answers; one signed for another context gets ``context_mismatch``, a replayed one
  ``assertion_replayed``;
* the ADK session id is the A2A context id: google-adk's request converter already runs each
  request in the session named by its ``contextId`` (creating it on first use), which is what
  kagent does and what the bridge signs as ``ctx``;
* the header is removed from the request's recorded headers once read, so nothing downstream
  (interceptors, session state, logs) sees the token; a request that carries it more than
  once (in any spelling) has no memory (``assertion_missing``): which one the bridge sent is
  unknowable;
* kagent main's per-request runtime grant (``x-kagent-memory-grant``, ``GRANT_HEADER``) is
  taken and removed the same way and bound with the assertion, for a ``grpc://``
  ``KagentControllerStore`` to present.

Nothing here logs: refusals are logged, content-free, by the memory service.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

try:
    from a2a.server.agent_execution import RequestContext
    from a2a.server.events.event_queue import EventQueue
    from a2a.server.tasks import TaskStore
    from a2a.types import AgentCard
    from google.adk.a2a.executor.a2a_agent_executor import A2aAgentExecutor
    from google.adk.a2a.executor.config import A2aAgentExecutorConfig
    from google.adk.a2a.utils.agent_to_a2a import to_a2a
except ModuleNotFoundError as missing:  # the extra is not installed
    if not (missing.name or "").startswith(("a2a", "google")):
        raise
    raise ModuleNotFoundError(
        "kagent_governed_memory.adk.a2a needs google-adk's A2A support, which is not "
        "installed: pip install -e '.[a2a]' in a clone (docs/install.md)",
        name=missing.name,
    ) from None
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from google.adk.agents import LlmAgent
from google.adk.artifacts.base_artifact_service import BaseArtifactService
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import BaseSessionService
from starlette.applications import Starlette

from ..errors import InvalidInput, ReasonCode
from ..identity import AgentIdentity
from ..scope._request import ASSERTION_HEADER, GRANT_HEADER, memory_request
from .service import GovernedMemoryService
from .tools import configure_governed_memory

__all__ = ["GovernedA2aAgentExecutor", "governed_a2a_app"]


class GovernedA2aAgentExecutor(A2aAgentExecutor):
    """google-adk's ``A2aAgentExecutor`` that binds each request's scope assertion (the
    ``x-kagent-memory-scope`` header) for its A2A context around the agent's run."""

    def __init__(
        self,
        *,
        runner: Runner | Callable[..., Any],
        public_keys: Mapping[str, Ed25519PublicKey],
        issuer: str,
        agent: AgentIdentity,
        config: A2aAgentExecutorConfig | None = None,
    ) -> None:
        if not isinstance(agent, AgentIdentity):
            raise InvalidInput(ReasonCode.INVALID_IDENTITY, field="agent")
        if not isinstance(issuer, str) or not issuer:
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="issuer")
        if not public_keys or not all(isinstance(k, Ed25519PublicKey)
                                      for k in public_keys.values()):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="public_keys")
        super().__init__(runner=runner, config=config)
        self._public_keys = dict(public_keys)
        self._issuer = issuer
        self._agent = agent

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        token = _take_assertion(context)
        grant = _take_assertion(context, GRANT_HEADER)  # kagent main's runtime grant, if any
        with memory_request(token, public_keys=self._public_keys, issuer=self._issuer,
                            agent=self._agent, context_id=context.context_id, grant=grant):
            await super().execute(context, event_queue)


def _take_assertion(context: RequestContext, header: str = ASSERTION_HEADER) -> str | None:
    """The request's assertion header (or ``header``: the runtime grant; HTTP header names are
    case-insensitive), removed from the headers the rest of the request sees.  Given twice (two
    spellings), neither binds: which one was meant is unknowable."""
    call = getattr(context, "call_context", None)
    state = getattr(call, "state", None)
    headers = state.get("headers") if isinstance(state, dict) else None
    if not isinstance(headers, Mapping):
        return None
    found: list[object] = []
    kept: dict[Any, Any] = {}
    for name, value in headers.items():
        if str(name).lower() == header:
            found.append(value)
        else:
            kept[name] = value
    assert isinstance(state, dict)
    state["headers"] = kept
    return found[0] if len(found) == 1 and isinstance(found[0], str) else None


class _OneAssertionHeader:
    """ASGI middleware: a request carrying the assertion header more than once loses all of
    them (no memory, ``assertion_missing``).  The A2A server keeps only the first value of a
    repeated header, so a client's header in front of the one a proxy appends would otherwise
    choose the token the request is bound with."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            name = ASSERTION_HEADER.encode()
            headers = scope.get("headers") or []
            if sum(1 for k, _ in headers if bytes(k).lower() == name) > 1:
                scope = {**scope, "headers": [(k, v) for k, v in headers
                                              if bytes(k).lower() != name]}
        await self.app(scope, receive, send)


def governed_a2a_app(
    agent: LlmAgent,
    memory: GovernedMemoryService,
    *,
    public_keys: Mapping[str, Ed25519PublicKey],
    issuer: str,
    session_service: BaseSessionService | None = None,
    artifact_service: BaseArtifactService | None = None,
    host: str = "localhost",
    port: int = 8000,
    protocol: str = "http",
    rpc_path: str = "",
    agent_card: AgentCard | str | None = None,
    task_store: TaskStore | None = None,
    lifespan: Callable[[Starlette], AbstractAsyncContextManager[None]] | None = None,
) -> Starlette:
    """google-adk's A2A Starlette app for ``agent`` with governed memory: installs ``memory``
    into the agent (``configure_governed_memory``), runs it in a ``Runner`` whose memory service
    is ``memory`` (app name ``memory.agent.app_name``; sessions in ``session_service``, default
    in-memory, keyed by the A2A context id), and binds each request's ``x-kagent-memory-scope``
    assertion, verified with the bridge's ``public_keys`` and ``issuer``.  ``host``, ``port``,
    ``protocol``, ``rpc_path``, ``agent_card``, ``task_store`` and ``lifespan`` are
    ``to_a2a``'s.  Serve it with ``uvicorn``."""
    if not isinstance(memory, GovernedMemoryService):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="memory")
    configure_governed_memory(agent, memory)
    runner = Runner(app_name=memory.agent.app_name, agent=agent,
                    session_service=session_service or InMemorySessionService(),
                    artifact_service=artifact_service, memory_service=memory)
    executor = GovernedA2aAgentExecutor(runner=runner, public_keys=public_keys, issuer=issuer,
                                        agent=memory.agent)
    app = to_a2a(agent, host=host, port=port, protocol=protocol, rpc_path=rpc_path,
                 agent_card=agent_card, task_store=task_store, runner=runner,
                 lifespan=lifespan, agent_executor_factory=lambda _runner: executor)
    app.add_middleware(_OneAssertionHeader)
    return app
