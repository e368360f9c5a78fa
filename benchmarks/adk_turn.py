#!/usr/bin/env python
"""What governed memory adds to one turn of a real google-adk ``Runner``.

    python benchmarks/adk_turn.py [--sessions 60] [--turns 5] [--facts 50] [--dsn … --app-dsn …]

Three agents, identical but for memory, each driven through google-adk's ``Runner`` and
``InMemorySessionService`` with a scripted ``BaseLlm`` (replies "ok" at once; the summariser
gets "[]"-free JSON facts), so the time measured is ADK's plus memory's, never a model's:

* ``none``: no memory service, no memory tool;
* ``adk-in-memory``: ADK's ``InMemoryMemoryService`` with ADK's ``PreloadMemoryTool`` (searches
  memory on every turn); after each session, ``add_session_to_memory`` (untimed);
* ``governed``: ``GovernedMemoryService`` installed by ``configure_governed_memory`` over the
  governed store (the application login, embedded PostgreSQL 18 + pgvector), a
  ``HashingEmbedder`` (in-process, no network), a scope with ``--facts`` stored facts; each turn
  bound by ``memory_request`` to an assertion the "bridge" signed before the turn (verified in
  the turn, as the runtime does).  Its first turn in a session prefetches (redeem + admit +
  one ``memory_search_many`` for up to 8 sub-queries); later turns redeem the assertion; every
  5th user turn schedules a background auto-save (summarise + admit + save), awaited after the
  turn, untimed, and reported on its own row.

Sessions rotate the agent order; medians and p95 per turn kind, and the difference to ``none``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import time
from collections.abc import AsyncGenerator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
if str(_HERE.parent) not in sys.path:
    sys.path.insert(0, str(_HERE.parent))

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.memory import InMemoryMemoryService  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions import InMemorySessionService  # noqa: E402
from google.adk.tools.preload_memory_tool import PreloadMemoryTool  # noqa: E402
from google.genai import types  # noqa: E402

from kagent_governed_memory import (  # noqa: E402
    AgentIdentity,
    GovernedMemoryStore,
    MemoryScope,
    OriginKind,
    Principal,
    ScopeKey,
    generate_private_key,
    migrate,
    sign_scope_assertion,
)
from kagent_governed_memory.adk import GovernedMemoryService, configure_governed_memory  # noqa: E402
from kagent_governed_memory.adk.summariser import PROMPT  # noqa: E402
from kagent_governed_memory.embedding import HashingEmbedder  # noqa: E402
from kagent_governed_memory.keys import key_id  # noqa: E402
from kagent_governed_memory.request import memory_request  # noqa: E402

LOCAL = "example.org"
ISSUER = "https://bridge.example.org"
AGENT = AgentIdentity(namespace="kagent", name="bench-agent")
APP = AGENT.app_name
_SUMMARY_MARKER = PROMPT.rsplit("\n", 1)[-1]
KINDS = ("none", "adk-in-memory", "governed")
MESSAGES = [
    "Good morning. I would like some help planning my week. I usually drink green tea at "
    "breakfast. My project Lighthouse has a review on Thursday. I prefer short answers. "
    "Remind me what I said about coffee. Also what about the team offsite? I cycle to work.",
    "What should I prepare for the review?",
    "Can you list my open questions?",
    "Thanks, and what about lunch options near the office?",
    "Please summarise today's plan in two lines.",
]


class ScriptedLlm(BaseLlm):
    model: str = "scripted"

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1] if llm_request.contents else None
        text = " ".join(p.text or "" for p in (last.parts or [])) if last else ""
        reply = ('["Drinks green tea at breakfast", "Project Lighthouse review on Thursday"]'
                 if _SUMMARY_MARKER in text else "ok")
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=reply)]))


def scope_key(i: int) -> ScopeKey:
    return ScopeKey(principal=Principal(mxid=f"@turn{i}:{LOCAL}", origin=OriginKind.NATIVE_LOCAL),
                    agent=AGENT, scope=MemoryScope.control_room(f"!turn{i}:{LOCAL}"))


def _pct(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[max(0, math.ceil(q * len(s)) - 1)]


async def measure(dsn: str, owner_dsn: str, *, sessions: int, turns: int, facts: int,
                  scopes: int = 20) -> dict[str, Any]:
    await migrate(owner_dsn, local_server=LOCAL)
    store = await GovernedMemoryStore.open(dsn, local_server=LOCAL, sweep_every=None,
                                           privileged=dsn == owner_dsn)
    bridge = generate_private_key()
    public = {key_id(bridge): bridge.public_key()}
    embedder = HashingEmbedder()
    try:
        for i in range(scopes):
            key = scope_key(i)
            gen = (await store.grant(key, purpose="benchmark")).generation
            texts = [f"fact {i}-{n}: the user mentioned topic {n % 17} on day {n}"
                     for n in range(facts)]
            for at in range(0, len(texts), 50):
                chunk = texts[at:at + 50]
                await store.save(key, gen, facts=chunk, embeddings=await embedder.embed(chunk))
        model = ScriptedLlm()
        sessions_svc = {k: InMemorySessionService() for k in KINDS}
        adk_memory = InMemoryMemoryService()
        service = GovernedMemoryService(store, agent=AGENT, embedder=embedder, summariser=model,
                                        span_content="ignore")
        agents = {
            "none": LlmAgent(name="assistant", model=model, instruction="You help the user."),
            "adk-in-memory": LlmAgent(name="assistant", model=model,
                                      instruction="You help the user.",
                                      tools=[PreloadMemoryTool()]),
            "governed": configure_governed_memory(
                LlmAgent(name="assistant", model=model, instruction="You help the user."),
                service),
        }
        runners = {
            "none": Runner(app_name=APP, agent=agents["none"],
                           session_service=sessions_svc["none"]),
            "adk-in-memory": Runner(app_name=APP, agent=agents["adk-in-memory"],
                                    session_service=sessions_svc["adk-in-memory"],
                                    memory_service=adk_memory),
            "governed": Runner(app_name=APP, agent=agents["governed"],
                               session_service=sessions_svc["governed"]),
        }
        times: dict[str, dict[str, list[float]]] = {k: {"first": [], "later": []} for k in KINDS}
        autosave: list[float] = []

        async def one_turn(kind: str, session_id: str, key: ScopeKey, n: int, text: str) -> float:
            token = None
            context = f"ctx-{session_id}"
            if kind == "governed":  # the bridge's work, before the request reaches the runtime
                token = sign_scope_assertion(key, private_key=bridge, issuer=ISSUER,
                                             audience=[LOCAL], context_id=context,
                                             lifetime=timedelta(seconds=60))
            t0 = time.perf_counter()
            msg = types.Content(role="user", parts=[types.Part(text=text)])
            if kind == "governed":
                with memory_request(token, public_keys=public, issuer=ISSUER, agent=AGENT,
                                    context_id=context):
                    async for _ in runners[kind].run_async(user_id="u", session_id=session_id,
                                                           new_message=msg):
                        pass
            else:
                async for _ in runners[kind].run_async(user_id="u", session_id=session_id,
                                                       new_message=msg):
                    pass
            return time.perf_counter() - t0

        for s in range(sessions + 2):  # two warm-up sessions, not recorded
            order = KINDS[s % 3:] + KINDS[: s % 3]
            key = scope_key(s % scopes)
            for kind in order:
                session = await sessions_svc[kind].create_session(app_name=APP, user_id="u")
                for n in range(turns):
                    dt = await one_turn(kind, session.id, key, n, MESSAGES[n % len(MESSAGES)])
                    if s >= 2:
                        times[kind]["first" if n == 0 else "later"].append(dt)
                    if kind == "governed" and service._tasks:
                        t0 = time.perf_counter()
                        await service.drain()
                        if s >= 2:
                            autosave.append(time.perf_counter() - t0)
                if kind == "adk-in-memory":
                    full = await sessions_svc[kind].get_session(app_name=APP, user_id="u",
                                                                session_id=session.id)
                    assert full is not None
                    await adk_memory.add_session_to_memory(full)
        return {"times": times, "autosave": autosave, "sessions": sessions, "turns": turns,
                "facts": facts}
    finally:
        await store.close()


def render(result: dict[str, Any]) -> str:
    t = result["times"]
    base = {k: statistics.median(v) for k, v in t["none"].items()}
    lines = ["| agent | first turn of a session: median (p95) | added vs none | "
             "later turns: median (p95) | added vs none |", "|---|---|---:|---|---:|"]
    for kind in KINDS:
        cells = [kind]
        for which in ("first", "later"):
            xs = t[kind][which]
            med = statistics.median(xs)
            cells += [f"{med * 1e3:.2f} ms ({_pct(xs, 0.95) * 1e3:.2f} ms)",
                      "—" if kind == "none" else f"+{(med - base[which]) * 1e3:.2f} ms"]
        lines.append("| " + " | ".join(cells) + " |")
    if result["autosave"]:
        a = result["autosave"]
        lines.append(f"| governed auto-save (background, after every "
                     f"{result['turns']}th user turn; untimed in the turn) | "
                     f"{statistics.median(a) * 1e3:.2f} ms ({_pct(a, 0.95) * 1e3:.2f} ms) | — | — | — |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/adk_turn.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--facts", type=int, default=50)
    parser.add_argument("--dsn")
    parser.add_argument("--app-dsn")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.dsn:
        result = asyncio.run(measure(args.app_dsn or args.dsn, args.dsn, sessions=args.sessions,
                                     turns=args.turns, facts=args.facts))
    else:
        from kagent_governed_memory._embedded import EmbeddedPostgres

        with EmbeddedPostgres() as pg:
            result = asyncio.run(measure(pg.dsn, pg.owner_dsn, sessions=args.sessions,
                                         turns=args.turns, facts=args.facts))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{args.sessions} sessions × {args.turns} turns per agent, scripted model, "
              f"HashingEmbedder, {args.facts} facts in the scope\n")
        print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
