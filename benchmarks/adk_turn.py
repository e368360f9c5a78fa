#!/usr/bin/env python
"""What governed memory adds to one turn of a real google-adk ``Runner``.

    python benchmarks/adk_turn.py [--sessions 60] [--turns 5] [--facts 50] [--dsn … --app-dsn …]
                                  [--kagent] [--kagent-main]

Three agents, identical but for memory, each driven through google-adk's ``Runner`` and
``InMemorySessionService`` with a scripted ``BaseLlm`` (replies "ok" at once; the summariser
gets "[]"-free JSON facts, two new ones each time), so the time measured is ADK's plus
memory's, never a model's:

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

* ``governed-kagent`` (with ``--kagent``): the same service in kagent mode, on
  ``KagentControllerStore`` talking HTTP (loopback) to the patched kagent controller compiled
  from ``patches/`` (``tests/support/go_controller.py``; needs Go and kagent's source), which holds the
  database login; its scopes are its own, seeded alike.
* ``governed-kagent-main`` (with ``--kagent-main``): the same service on
  ``KagentControllerStore`` over gRPC (loopback) to kagent MAIN's controller compiled from
  ``patches/kagent-main/`` (``_kagent_main.py``), on a database of its own in the same cluster;
  its scopes are granted by the bridge and seeded through the controller.  Each request's
  runtime grant is minted in the timed turn (the A2A transport mints it in the request's path)
  and revoked after the request's background work.

Sessions rotate the agent order; medians and p95 per turn kind, and the difference to ``none``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
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
for _path in (_HERE.parent, _HERE):  # the package, and _kagent_main beside this script
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.memory import InMemoryMemoryService  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions import InMemorySessionService  # noqa: E402
from google.adk.tools.preload_memory_tool import PreloadMemoryTool  # noqa: E402
from google.genai import types  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402

from kagent_governed_memory import (
    AgentIdentity,
    GovernedMemoryStore,
    KagentControllerStore,
    MemoryScope,
    OriginKind,
    Principal,
    ScopeKey,
)
from kagent_governed_memory.kagent import KagentBridgeStore
from kagent_governed_memory.scope import generate_private_key, sign_scope_assertion
from kagent_governed_memory.store import migrate
from kagent_governed_memory.adk import GovernedMemoryService, configure_governed_memory  # noqa: E402
from kagent_governed_memory.adk.summariser import PROMPT  # noqa: E402
from kagent_governed_memory.embedding import HashingEmbedder  # noqa: E402
from kagent_governed_memory.scope import key_id, memory_request  # noqa: E402

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


_SUMMARIES = itertools.count()


class ScriptedLlm(BaseLlm):
    model: str = "scripted"

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1] if llm_request.contents else None
        text = " ".join(p.text or "" for p in (last.parts or [])) if last else ""
        if _SUMMARY_MARKER in text:
            # distinct facts on every summary: a text already live in the scope is stored
            # once, so repeating them would time a save that inserts nothing
            n = next(_SUMMARIES)
            reply = (f'["Drinks green tea at breakfast ({n})",'
                     f' "Project Lighthouse review on Thursday ({n})"]')
        else:
            reply = "ok"
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=reply)]))


def scope_key(i: int) -> ScopeKey:
    return ScopeKey(principal=Principal(mxid=f"@turn{i}:{LOCAL}", origin=OriginKind.NATIVE_LOCAL),
                    agent=AGENT, scope=MemoryScope.control_room(f"!turn{i}:{LOCAL}"))


def _pct(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[max(0, math.ceil(q * len(s)) - 1)]


async def measure(dsn: str, owner_dsn: str, *, sessions: int, turns: int, facts: int,
                  scopes: int = 20, kagent: tuple[str, str, Any] | None = None,
                  main: Any = None, bridge_key: Any = None) -> dict[str, Any]:
    """``kagent``: (the controller's URL, this agent's ServiceAccount token, the bridge's
    private key the controller trusts) to time ``governed-kagent`` as well; ``main``: a
    ``_kagent_main.MainController`` trusting ``bridge_key``, to time ``governed-kagent-main``."""
    await migrate(owner_dsn, local_server=LOCAL)
    store = await GovernedMemoryStore.open(dsn, local_server=LOCAL, sweep_every=None,
                                           privileged=dsn == owner_dsn)
    bridge = bridge_key or (kagent[2] if kagent else generate_private_key())
    public = {key_id(bridge): bridge.public_key()}
    embedder = HashingEmbedder()
    kinds = (KINDS + (("governed-kagent",) if kagent else ())
             + (("governed-kagent-main",) if main else ()))
    offset = {"governed": 0, "governed-kagent": scopes, "governed-kagent-main": 2 * scopes}
    remote = (KagentControllerStore(kagent[0], agent=AGENT, local_server=LOCAL, token=kagent[1])
              if kagent else None)
    stack = contextlib.AsyncExitStack()
    minter: Any = None
    try:
        if main is not None:
            import _kagent_main

            minter = await stack.enter_async_context(
                _kagent_main.grants(main, AGENT.namespace, AGENT.name))
            main_runtime = KagentControllerStore(main.url, agent=AGENT, local_server=LOCAL)
            stack.push_async_callback(main_runtime.aclose)
            main_bridge = KagentBridgeStore(main.url, local_server=LOCAL, token=main.bridge_token)
            stack.push_async_callback(main_bridge.aclose)
            for i in range(scopes):  # granted by the bridge, seeded through the controller
                n = offset["governed-kagent-main"] + i
                key = scope_key(n)
                await main_bridge.grant(key, purpose="benchmark")
                token = sign_scope_assertion(key, private_key=bridge, issuer=ISSUER,
                                             audience=[LOCAL], context_id=f"seed-{n}",
                                             lifetime=timedelta(seconds=60))
                await _kagent_main.seed(main_runtime, minter, key, token, _facts(n, facts),
                                        embedder, public_keys=public, issuer=ISSUER, agent=AGENT,
                                        context_id=f"seed-{n}")
        for i in range(scopes * (2 if kagent else 1)):
            key = scope_key(i)
            gen = (await store.grant(key, purpose="benchmark")).generation
            texts = _facts(i, facts)
            for at in range(0, len(texts), 50):
                chunk = texts[at:at + 50]
                await store.save(key, gen, facts=chunk, embeddings=await embedder.embed(chunk))
        model = ScriptedLlm()
        sessions_svc = {k: InMemorySessionService() for k in kinds}
        adk_memory = InMemoryMemoryService()
        readers = {k: InMemoryMetricReader()
                   for k in ("governed", "governed-kagent", "governed-kagent-main")}
        service = GovernedMemoryService(store, agent=AGENT, embedder=embedder, summariser=model,
                                        span_content="ignore", meter_provider=MeterProvider(
                                            metric_readers=[readers["governed"]]))
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
        services = {"governed": service}
        if remote is not None:
            services["governed-kagent"] = GovernedMemoryService(
                remote, agent=AGENT, embedder=embedder, summariser=model, span_content="ignore",
                meter_provider=MeterProvider(metric_readers=[readers["governed-kagent"]]))
            agents["governed-kagent"] = configure_governed_memory(
                LlmAgent(name="assistant", model=model, instruction="You help the user."),
                services["governed-kagent"])
            runners["governed-kagent"] = Runner(
                app_name=APP, agent=agents["governed-kagent"],
                session_service=sessions_svc["governed-kagent"])
        if main is not None:
            services["governed-kagent-main"] = GovernedMemoryService(
                main_runtime, agent=AGENT, embedder=embedder, summariser=model,
                span_content="ignore",
                meter_provider=MeterProvider(metric_readers=[readers["governed-kagent-main"]]))
            agents["governed-kagent-main"] = configure_governed_memory(
                LlmAgent(name="assistant", model=model, instruction="You help the user."),
                services["governed-kagent-main"])
            runners["governed-kagent-main"] = Runner(
                app_name=APP, agent=agents["governed-kagent-main"],
                session_service=sessions_svc["governed-kagent-main"])
        times: dict[str, dict[str, list[float]]] = {k: {"first": [], "later": []} for k in kinds}
        autosave: dict[str, list[float]] = {k: [] for k in services}

        async def one_turn(kind: str, session_id: str, key: ScopeKey, n: int, text: str
                           ) -> tuple[float, str | None]:
            token = None
            context = f"ctx-{session_id}"
            if kind in services:  # the bridge's work, before the request reaches the runtime
                token = sign_scope_assertion(key, private_key=bridge, issuer=ISSUER,
                                             audience=[LOCAL], context_id=context,
                                             lifetime=timedelta(seconds=60))
            t0 = time.perf_counter()
            # main: the A2A transport mints the request's grant before it forwards the request
            grant = await minter.mint(token) if kind == "governed-kagent-main" else None
            msg = types.Content(role="user", parts=[types.Part(text=text)])
            if kind in services:
                with memory_request(token, public_keys=public, issuer=ISSUER, agent=AGENT,
                                    context_id=context, grant=grant):
                    async for _ in runners[kind].run_async(user_id="u", session_id=session_id,
                                                           new_message=msg):
                        pass
            else:
                async for _ in runners[kind].run_async(user_id="u", session_id=session_id,
                                                       new_message=msg):
                    pass
            return time.perf_counter() - t0, grant

        for s in range(sessions + 2):  # two warm-up sessions, not recorded
            order = kinds[s % len(kinds):] + kinds[: s % len(kinds)]
            for kind in order:
                # governed-kagent has scopes of its own: budgets are per scope
                key = scope_key(s % scopes + offset.get(kind, 0))
                session = await sessions_svc[kind].create_session(app_name=APP, user_id="u")
                for n in range(turns):
                    dt, grant = await one_turn(kind, session.id, key, n,
                                               MESSAGES[n % len(MESSAGES)])
                    if s >= 2:
                        times[kind]["first" if n == 0 else "later"].append(dt)
                    if kind in services and services[kind]._tasks:
                        t0 = time.perf_counter()
                        await services[kind].drain()
                        if s >= 2:
                            autosave[kind].append(time.perf_counter() - t0)
                    if grant is not None:  # the response closed: the transport revokes
                        await minter.revoke(grant)
                if kind == "adk-in-memory":
                    full = await sessions_svc[kind].get_session(app_name=APP, user_id="u",
                                                                session_id=session.id)
                    assert full is not None
                    await adk_memory.add_session_to_memory(full)
        return {"times": times, "autosave": autosave, "sessions": sessions, "turns": turns,
                "facts": facts, "outcomes": {k: _outcomes(readers[k]) for k in services},
                "grants_minted": minter.minted if minter else 0,
                "grant_mint_median_ms": (statistics.median(minter.mint_seconds) * 1000
                                         if minter and minter.mint_seconds else None)}
    finally:
        await stack.aclose()
        await store.close()
        if remote is not None:
            await remote.aclose()


def _facts(i: int, facts: int) -> list[str]:
    return [f"fact {i}-{n}: the user mentioned topic {n % 17} on day {n}" for n in range(facts)]


def _outcomes(reader: Any) -> dict[str, int]:
    """How the timed service's requests ended (a refused request would be a cheaper turn)."""
    out: dict[str, int] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    a = point.attributes
                    if "kgm.memory.operation" in a and metric.name.endswith("operations"):
                        name = f"{a['kgm.memory.operation']}:{a['kgm.memory.outcome']}"
                        out[name] = out.get(name, 0) + int(point.value)
    return out


def render(result: dict[str, Any]) -> str:
    t = result["times"]
    base = {k: statistics.median(v) for k, v in t["none"].items()}
    lines = ["| agent | first turn of a session: median (p95) | added vs none | "
             "later turns: median (p95) | added vs none |", "|---|---|---:|---|---:|"]
    for kind in t:
        cells = [kind]
        for which in ("first", "later"):
            xs = t[kind][which]
            med = statistics.median(xs)
            cells += [f"{med * 1e3:.2f} ms ({_pct(xs, 0.95) * 1e3:.2f} ms)",
                      "—" if kind == "none" else f"+{(med - base[which]) * 1e3:.2f} ms"]
        lines.append("| " + " | ".join(cells) + " |")
    for kind, a in result["autosave"].items():
        if a:
            lines.append(f"| {kind} auto-save (background, after every "
                         f"{result['turns']}th user turn; untimed in the turn) | "
                         f"{statistics.median(a) * 1e3:.2f} ms ({_pct(a, 0.95) * 1e3:.2f} ms)"
                         " | — | — | — |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/adk_turn.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--facts", type=int, default=50)
    parser.add_argument("--dsn")
    parser.add_argument("--app-dsn")
    parser.add_argument("--controller-dsn",
                        help="with --dsn --kagent: the controller's serving login (default: the app's)")
    parser.add_argument("--kagent", action="store_true",
                        help="also time governed-kagent through the compiled controller")
    parser.add_argument("--kagent-main", action="store_true",
                        help="also time governed-kagent-main through kagent main's compiled "
                             "controller over gRPC (embedded PostgreSQL only)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.dsn and args.kagent_main:
        parser.error("--kagent-main runs on the embedded PostgreSQL only (no --dsn)")
    if args.dsn:
        owner, app = args.dsn, args.app_dsn or args.dsn
        result = _run(app, owner, args, args.controller_dsn or app)
    else:
        from kagent_governed_memory.dev import EmbeddedPostgres

        with EmbeddedPostgres() as pg:
            # the controller's serving login (runtime + bridge + operator) where there is one
            result = _run(pg.dsn, pg.owner_dsn, args, getattr(pg, "controller_dsn", "") or pg.dsn,
                          admin=pg.admin_dsn)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{args.sessions} sessions × {args.turns} turns per agent, scripted model, "
              f"HashingEmbedder, {args.facts} facts in the scope\n")
        print(render(result))
        if result["grants_minted"]:
            print(f"\ngoverned-kagent-main: {result['grants_minted']} runtime grants minted "
                  "(one per request, in the timed turn; revoked after it); one mint: median "
                  f"{result['grant_mint_median_ms']:.2f} ms")
        for kind, counted in result["outcomes"].items():
            if counted:
                print(f"\n{kind} outcomes (operation:outcome count): "
                      + ", ".join(f"{k} {v}" for k, v in sorted(counted.items())))
    return 0


def _run(app: str, owner: str, args: argparse.Namespace, controller: str,
         admin: str | None = None) -> dict[str, Any]:
    kw = {"sessions": args.sessions, "turns": args.turns, "facts": args.facts}
    if not (args.kagent or args.kagent_main):
        return asyncio.run(measure(app, owner, **kw))
    sys.path.insert(0, str(_HERE.parent / "tests"))
    from support import go_controller
    from kagent_governed_memory.scope import public_key_pem

    asyncio.run(migrate(owner, local_server=LOCAL))  # the controller starts on a current schema
    bridge = generate_private_key()
    keys = {"KAGENT_MEMORY_SCOPE_PUBLIC_KEYS": public_key_pem(bridge).decode(),
            "KAGENT_MEMORY_SCOPE_ISSUER": ISSUER}
    with contextlib.ExitStack() as running:
        kagent = main = None
        if args.kagent:
            process = running.enter_context(go_controller.controller(
                controller, local_server=LOCAL,
                env={**keys, "KGM_TESTSERVER_AGENTS": f"{AGENT.namespace}/{AGENT.name}"}))
            token = go_controller.service_account_token(AGENT.namespace, AGENT.name)
            kagent = (process.url, token, bridge)
        if args.kagent_main:
            import _kagent_main

            assert admin is not None
            main = running.enter_context(_kagent_main.controller(admin, local_server=LOCAL,
                                                                 env=keys))
        return asyncio.run(measure(app, owner, kagent=kagent, main=main, bridge_key=bridge, **kw))


if __name__ == "__main__":
    sys.exit(main())
