"""Governed memory in ``adk web`` / ``adk api_server``, through the development bridge.

An agent folder's ``agent.py`` ends with::

    app = dev_app(root_agent, agent=AgentIdentity(namespace="dev", name="my-agent"))

With ``KGM_DEV_BRIDGE=1`` and ``KGM_DSN`` set to what ``kagent-governed-memory dev-db`` printed,
every request is bound to a freshly minted, recorded dev assertion (context id = the ADK session
id), and ``!memory …`` chat messages are answered by the development bridge without calling the
model.  Otherwise memory stays off and one WARNING says why (logger
``kagent_governed_memory.devbridge``).  See docs/dev-bridge.md.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.plugins.base_plugin import BasePlugin
from google.genai import types

from .._hints import hint_for
from ..dev._bridge import DevBridge, dev_database_at, refusal
from ..embedding import Embedder, HashingEmbedder
from ..errors import GovernanceError, InvalidInput, ReasonCode
from ..identity import AgentIdentity, ScopeKey
from ..kagent import KagentControllerStore
from ..models import ForgetReceipt, MemoryRecord
from ..policy import DEV_POLICY, MemoryPolicy
from ..scope._assertion import ScopeAssertion
from ..scope._request import RequestBinding, _current
from .service import GovernedMemoryService
from .tools import configure_governed_memory

__all__ = ["DSN_ENV", "LOCAL_SERVER_ENV", "DevMemory", "DevMemoryPlugin", "dev_app"]

DSN_ENV = "KGM_DSN"
LOCAL_SERVER_ENV = "KGM_LOCAL_SERVER"
# the dev shortcut for the confirmation step: `!memory on <agent> <purpose> yes`,
# `!memory off <agent> yes`, `!memory forget <agent> all yes`
_CONFIRMED = "yes"
logger = logging.getLogger("kagent_governed_memory.devbridge")


class DevMemory:
    """The development bridge of one ADK agent served by ``adk web`` / ``adk api_server``:
    ``service`` (the governed memory service over the bridge's runtime store) and ``plugin``
    (binds each request, answers ``!memory``).  Opens lazily, in the server's event loop."""

    def __init__(self, agent: AgentIdentity, *, embedder: Embedder | None = None,
                 summariser: BaseLlm | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        if not isinstance(agent, AgentIdentity):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="agent")
        self.agent = agent
        self._env = os.environ if environ is None else environ
        self.local_server = self._env.get(LOCAL_SERVER_ENV) or "example.org"
        embedder = embedder or HashingEmbedder()
        policy = DEV_POLICY
        if embedder.dimension != policy.embedding_dimension:
            raise InvalidInput(ReasonCode.INVALID_EMBEDDING, field="embedder_dimension")
        self.service = GovernedMemoryService(_DevRuntime(self, policy), agent=agent,
                                             embedder=embedder, summariser=summariser)
        self.plugin = DevMemoryPlugin(self)
        self._bridge: DevBridge | None = None
        self._refused: str | None = None  # the refusal's field, once known
        self._lock: asyncio.Lock | None = None
        env_refusal = self._env_refusal()
        if env_refusal is not None:
            self._refuse(env_refusal)

    def _env_refusal(self) -> str | None:
        refused = refusal(environ=self._env)
        if refused is None and self._env.get(DSN_ENV, "").startswith(("kgm+http", "http")):
            refused = "dev_bridge_kagent"
        if refused is None and not self._env.get(DSN_ENV):
            refused = "dev_bridge_dsn"  # unset, not a database dev-db did not create
        return refused

    def _refuse(self, field: str) -> None:
        if self._refused is None:
            self._refused = field
            logger.warning("development bridge refused, memory stays off: %s",
                           InvalidInput(ReasonCode.DEV_BRIDGE_REFUSED, field=field))

    @property
    def refused(self) -> str | None:
        """Why the bridge is off (``dev_bridge_enable``, ``dev_bridge_kagent``,
        ``dev_bridge_dsn``, ``dev_bridge_database``), or ``None``."""
        return self._refused

    async def bridge(self, memory_service: object = None) -> DevBridge | None:
        """The open bridge, or ``None`` when refused (one WARNING says why)."""
        if isinstance(getattr(memory_service, "store", None), KagentControllerStore):
            self._refuse("dev_bridge_kagent")  # the server was given a kgm+http(s) URI
        if self._refused is not None or self._bridge is not None:
            return self._bridge if self._refused is None else None
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._bridge is None and self._refused is None:
                db = dev_database_at(self._env.get(DSN_ENV, ""), self.local_server)
                try:
                    self._bridge = await DevBridge.open(db, agent=self.agent,
                                                        environ=self._env)
                except GovernanceError as exc:
                    field = exc.ids.get("field", "")
                    if exc.reason is ReasonCode.DEV_BRIDGE_REFUSED and field:
                        self._refuse(field)
                    else:  # e.g. the database is not running: said, and tried again next time
                        logger.warning("development bridge could not open, memory off for "
                                       "this request: %s", exc)
        return self._bridge if self._refused is None else None

    async def aclose(self) -> None:
        if self._bridge is not None:
            bridge, self._bridge = self._bridge, None
            await bridge.close()


class _DevRuntime:
    """``RuntimeRepository`` over the bridge's runtime store, once the bridge is open."""

    def __init__(self, dev: DevMemory, policy: MemoryPolicy) -> None:
        self._dev = dev
        self._policy = policy

    @property
    def policy(self) -> MemoryPolicy:
        return self._policy

    @property
    def local_server(self) -> str:
        return self._dev.local_server

    async def _store(self) -> Any:
        bridge = await self._dev.bridge()
        if bridge is None:
            raise InvalidInput(ReasonCode.DEV_BRIDGE_REFUSED,
                               field=self._dev.refused or "dev_bridge_database")
        return bridge.runtime

    async def redeem(self, assertion: ScopeAssertion) -> int | None:
        result: int | None = await (await self._store()).redeem(assertion)
        return result

    async def admit(self, key: ScopeKey, generation: int | None, *, units: int,
                    explicit: bool = False) -> None:
        await (await self._store()).admit(key, generation, units=units, explicit=explicit)

    async def save(self, key: ScopeKey, generation: int | None, *, facts: Sequence[str],
                   embeddings: Sequence[Sequence[float]]) -> list[str]:
        ids: list[str] = await (await self._store()).save(key, generation, facts=facts,
                                                          embeddings=embeddings)
        return ids

    async def search(self, key: ScopeKey, generation: int | None, embedding: Sequence[float], *,
                     limit: int = 5) -> list[MemoryRecord]:
        found: list[MemoryRecord] = await (await self._store()).search(
            key, generation, embedding, limit=limit)
        return found

    async def search_many(self, key: ScopeKey, generation: int | None,
                          embeddings: Sequence[Sequence[float]], *, limit: int = 5
                          ) -> list[list[MemoryRecord]]:
        found: list[list[MemoryRecord]] = await (await self._store()).search_many(
            key, generation, embeddings, limit=limit)
        return found

    async def forget(self, key: ScopeKey, entry_id: str) -> ForgetReceipt:
        receipt: ForgetReceipt = await (await self._store()).forget(key, entry_id)
        return receipt


def _user_text(content: types.Content | None) -> str:
    if content is None or not content.parts:
        return ""
    return "".join(p.text or "" for p in content.parts).strip()


def _reply(text: str) -> types.Content:
    return types.Content(role="model", parts=[types.Part(text=text)])


def _shortcut(text: str) -> tuple[str, bool]:
    """(the command without the dev confirmation shortcut, whether it was given)."""
    words = text.split()
    confirmable = (len(words) == 5 and words[1] == "on") or (
        len(words) == 4 and words[1] == "off") or (
        len(words) == 5 and words[1] == "forget" and words[3] == "all")
    if confirmable and words[-1] == _CONFIRMED:
        return " ".join(words[:-1]), True
    return text, False


class DevMemoryPlugin(BasePlugin):
    """Binds every request to a fresh dev assertion and answers ``!memory`` messages."""

    def __init__(self, dev: DevMemory) -> None:
        super().__init__(name="kgm_dev_bridge")
        self._dev = dev
        self._open: dict[str, AsyncExitStack] = {}
        # the ADK user id the dev user stands for: the first one served.  `adk api_server`
        # takes any user id in its URL; another one must not read, recall or withdraw the dev
        # user's memory (the bridge has one user, one scope).
        self._user: str | None = None

    def _is_dev_user(self, user_id: str) -> bool:
        if self._user is None:
            self._user = user_id
        return user_id == self._user

    async def before_run_callback(self, *, invocation_context: InvocationContext
                                  ) -> types.Content | None:
        bridge = await self._dev.bridge(invocation_context.memory_service)
        text = _user_text(invocation_context.user_content)
        other_user = bridge is not None and not self._is_dev_user(invocation_context.user_id)
        if text.startswith("!memory"):
            if bridge is None:
                return _reply(f"refused: {ReasonCode.DEV_BRIDGE_REFUSED.value} "
                              f"({self._dev.refused or 'not open'}): memory is off; the "
                              "server's log says why")
            if other_user:
                hint = hint_for(ReasonCode.DEV_BRIDGE_REFUSED, "dev_bridge_user")
                return _reply(f"refused: {ReasonCode.DEV_BRIDGE_REFUSED.value} "
                              f"(dev_bridge_user): {hint}")
            command, confirm = _shortcut(text)
            return _reply(await bridge.command(command, confirm=confirm))
        if bridge is None or other_user:
            reason = (ReasonCode.DEV_BRIDGE_REFUSED if self._dev.refused or other_user
                      else ReasonCode.STORE_UNAVAILABLE)
            _current.set(RequestBinding(None, reason))  # memory absent, and why
            return None
        stack = AsyncExitStack()
        try:
            await stack.enter_async_context(bridge.request(invocation_context.session.id))
        except BaseException:
            await stack.aclose()
            raise
        self._open[invocation_context.invocation_id] = stack
        return None

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        stack = self._open.pop(invocation_context.invocation_id, None)
        if stack is not None:
            await stack.aclose()

    async def on_run_error_callback(self, *, invocation_context: InvocationContext,
                                    error: Exception) -> None:
        stack = self._open.pop(invocation_context.invocation_id, None)
        if stack is not None:
            await stack.aclose()

    async def close(self) -> None:
        await self._dev.aclose()


def dev_app(root_agent: LlmAgent, *, agent: AgentIdentity, name: str | None = None,
            embedder: Embedder | None = None, summariser: BaseLlm | None = None,
            plugins: Sequence[BasePlugin] = (),
            environ: Mapping[str, str] | None = None) -> App:
    """The ``App`` for an agent folder (``app = dev_app(root_agent, agent=...)`` in its
    ``agent.py``): governed memory installed into ``root_agent``
    (``configure_governed_memory``) and the development bridge's plugin.  ``name`` is the
    folder's name (default: ``root_agent.name``); ``environ`` replaces ``os.environ`` (tests)."""
    dev = DevMemory(agent, embedder=embedder, summariser=summariser, environ=environ)
    configure_governed_memory(root_agent, dev.service)
    return App(name=name or root_agent.name, root_agent=root_agent,
               plugins=[*plugins, dev.plugin])
