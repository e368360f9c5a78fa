"""A scripted ``BaseLlm``, a counting embedder and a real ADK ``Runner`` harness.

Nothing here stubs the service under test: the runner, session service, agent, tools and
callbacks are google-adk's and ours; only the model's replies are scripted.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from pydantic import Field, PrivateAttr

from kagent_governed_memory import AgentIdentity, GovernedMemoryStore, ScopeKey
from kagent_governed_memory.adk import GovernedMemoryService, configure_governed_memory
from kagent_governed_memory.adk.summariser import PROMPT
from kagent_governed_memory.scope import sign_scope_assertion
from kagent_governed_memory.embedding import HashingEmbedder
from kagent_governed_memory.scope import generate_private_key, key_id, memory_request

# The bridge's signing key lives only here, in the "bridge"; the runtime side below is given
# PUBLIC_KEYS (test_assertion_ledger asserts the service holds no private key).
BRIDGE_KEY = generate_private_key()
PUBLIC_KEYS = {key_id(BRIDGE_KEY): BRIDGE_KEY.public_key()}
ISSUER = "https://bridge.example.org"
AGENT = AgentIdentity(namespace="kagent", name="my-agent")
_SUMMARY_MARKER = PROMPT.rsplit("\n", 1)[-1]  # "JSON array:"

ToolPlan = Callable[[str], tuple[str, dict[str, Any]] | None]


def context_id(session: str = "s1") -> str:
    """The A2A context id a harness session's requests carry (kagent: the ADK session)."""
    return f"a2a-context-{session}"


def sign(key: ScopeKey, *, session: str = "s1", audience: Any = ("example.org",),
         **kw: Any) -> str:
    """The bridge signs ``key`` for one request of harness session ``session``."""
    kw.setdefault("lifetime", timedelta(seconds=60))
    return sign_scope_assertion(key, private_key=BRIDGE_KEY, issuer=ISSUER,
                                audience=list(audience), context_id=context_id(session), **kw)


class ScriptedLlm(BaseLlm):
    """Chat: ``plan(user_text)`` may ask for one tool call; after the tool answers, the reply
    echoes the tool's JSON so tests can read it.  Summariser: pops ``summaries`` (a string, or
    an Exception to raise)."""

    model: str = "scripted"
    plan: Any = None
    summaries: list[Any] = Field(default_factory=list)
    gate: Any = None  # an asyncio.Event the summariser waits for, when set
    on_chat: Any = None  # async (user_text) -> None, awaited while the agent "answers"
    reply_text: str = "ok"  # the chat reply when no tool is called
    _calls: list[str] = PrivateAttr(default_factory=list)
    _requests: list[LlmRequest] = PrivateAttr(default_factory=list)
    _prompts: list[str] = PrivateAttr(default_factory=list)

    @property
    def calls(self) -> list[str]:
        return self._calls

    @property
    def requests(self) -> list[LlmRequest]:
        return self._requests

    @property
    def prompts(self) -> list[str]:
        return self._prompts

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1] if llm_request.contents else None
        text = " ".join(p.text or "" for p in (last.parts or [])) if last else ""
        if _SUMMARY_MARKER in text:
            self._calls.append("summarise")
            self._prompts.append(text)
            if self.gate is not None:
                await self.gate.wait()
            reply = self.summaries.pop(0) if self.summaries else "[]"
            if isinstance(reply, BaseException):
                raise reply
            yield _text(reply)
            return
        self._calls.append("chat")
        self._requests.append(llm_request)
        if self.on_chat is not None:
            await self.on_chat(text)
        responses = [p.function_response for p in (last.parts or []) if p.function_response] \
            if last else []
        if responses:
            yield _text("tool said " + json.dumps(responses[0].response, sort_keys=True,
                                                  default=_jsonable))
            return
        call = self.plan(text) if self.plan else None
        if call:
            name, args = call
            yield LlmResponse(content=types.Content(role="model", parts=[
                types.Part(function_call=types.FunctionCall(name=name, args=args))]))
            return
        yield _text(self.reply_text)


def _jsonable(value: Any) -> Any:
    """google-adk's own tools answer with pydantic models (e.g. LoadMemoryResponse)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    raise TypeError(type(value).__name__)


def _text(text: str) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


class CountingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.items = 0

    async def embed(self, texts):
        self.calls += 1
        self.items += len(texts)
        return await super().embed(texts)


@dataclass
class Harness:
    store: GovernedMemoryStore
    model: ScriptedLlm
    embedder: CountingEmbedder
    service: GovernedMemoryService
    runner: Runner
    reader: InMemoryMetricReader
    agent: LlmAgent
    sessions: dict[str, str] = field(default_factory=dict)

    async def turn(self, text: str, *, key: ScopeKey | None, session: str = "s1",
                   token: str | None = None, audience: tuple[str, ...] = ("example.org",),
                   run_config: Any = None,
                   grant: str | Callable[[str], str] | None = None) -> list[str]:
        """One user turn through the real Runner, bound to a freshly signed assertion for
        ``key`` (or ``token`` as given, or none), and to ``grant`` (the request's runtime grant,
        or a function minting it for the token: a gRPC controller).  Returns the texts the
        agent produced."""
        if session not in self.sessions:
            s = await self.runner.session_service.create_session(
                app_name=AGENT.app_name, user_id="attribution-only")
            self.sessions[session] = s.id
        if token is None and key is not None:
            token = sign(key, session=session, audience=audience)
        out: list[str] = []
        if callable(grant):
            grant = grant(token) if token is not None else None
        with memory_request(token, public_keys=PUBLIC_KEYS, issuer=ISSUER, agent=AGENT,
                            context_id=context_id(session), grant=grant):
            async for event in self.runner.run_async(
                user_id="attribution-only", session_id=self.sessions[session],
                new_message=types.Content(role="user", parts=[types.Part(text=text)]),
                **({"run_config": run_config} if run_config is not None else {}),
            ):
                for part in (event.content.parts if event.content and event.content.parts else []):
                    if part.text:
                        out.append(part.text)
        return out

    @property
    def summariser_prompts(self) -> list[str]:
        return self.model.prompts

    def metrics(self) -> list[tuple[str, dict[str, Any], int]]:
        data = self.reader.get_metrics_data()
        out = []
        for rm in data.resource_metrics if data else []:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for point in metric.data.data_points:
                        out.append((metric.name, dict(point.attributes), point.value))
        return out


def build(store: GovernedMemoryStore, *, plan: ToolPlan | None = None,
          summaries: list[Any] | None = None, agent: AgentIdentity = AGENT,
          admission=None, embedder=None, before_tool=None, session_service=None,
          span_content="refuse") -> Harness:
    model = ScriptedLlm(plan=plan, summaries=summaries or [])
    embedder = embedder or CountingEmbedder()
    reader = InMemoryMetricReader()
    service = GovernedMemoryService(store, agent=agent, embedder=embedder, summariser=model,
                                    admission=admission, span_content=span_content,
                                    meter_provider=MeterProvider(metric_readers=[reader]))
    llm_agent = LlmAgent(name="assistant", model=model, instruction="You help the user.",
                         before_tool_callback=before_tool)
    configure_governed_memory(llm_agent, service)
    runner = Runner(app_name=AGENT.app_name, agent=llm_agent,
                    session_service=session_service or InMemorySessionService(),
                    memory_service=service)
    return Harness(store, model, embedder, service, runner, reader, llm_agent)


def save_plan(text: str) -> tuple[str, dict[str, Any]] | None:
    """'remember: X' → save_memory(X); 'recall: Q' → load_memory(Q)."""
    if text.startswith("remember: "):
        return "save_memory", {"content": text.removeprefix("remember: ")}
    if text.startswith("recall: "):
        return "load_memory", {"query": text.removeprefix("recall: ")}
    return None
