#!/usr/bin/env python
"""What single-use scope assertions cost per request: verifying the bridge's EdDSA JWT in the
runtime (CPU), and capturing the request's generation with the ledger (`memory_redeem_assertion`:
the `jti` insert, a bounded trim and the fence check, one round trip) against the same capture
without it (`memory_generation`), through the store's pool as the application role, alternated
call by call in one embedded PostgreSQL.  Prints a Markdown table of medians.

    python benchmarks/assertion_cost.py [--iters 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from datetime import timedelta

from kagent_governed_memory import (
    AgentIdentity,
    GovernedMemoryStore,
    MemoryScope,
    Principal,
    ScopeKey,
)
from kagent_governed_memory.scope import (
    generate_private_key,
    sign_scope_assertion,
    verify_scope_assertion,
)
from kagent_governed_memory.store import migrate
from kagent_governed_memory.dev import EmbeddedPostgres
from kagent_governed_memory.scope import key_id

ISSUER = "https://bridge.example.org"
AGENT = AgentIdentity(namespace="kagent", name="my-agent")


def key(i: int) -> ScopeKey:
    return ScopeKey(principal=Principal(mxid=f"@u{i}:example.org", origin="native_local"),
                    agent=AGENT, scope=MemoryScope.control_room(f"!r{i}:example.org"))


async def run(iters: int, scopes: int) -> dict[str, list[float]]:
    bridge = generate_private_key()
    public = {key_id(bridge): bridge.public_key()}
    out: dict[str, list[float]] = {"sign (bridge)": [], "verify (runtime)": [],
                                   "generation (no ledger)": [], "redeem (ledger)": []}
    with EmbeddedPostgres() as pg:
        await migrate(pg.owner_dsn, local_server="example.org")
        async with await GovernedMemoryStore.open(pg.dsn, local_server="example.org",
                                                  sweep_every=None) as store:
            for i in range(scopes):
                await store.grant(key(i), purpose="personal_preferences")
            for n in range(iters):
                k = key(n % scopes)
                t0 = time.perf_counter()
                token = sign_scope_assertion(k, private_key=bridge, issuer=ISSUER,
                                             audience=["example.org"], context_id=f"c{n}",
                                             lifetime=timedelta(seconds=30))
                t1 = time.perf_counter()
                a = verify_scope_assertion(token, public_keys=public, issuer=ISSUER, agent=AGENT,
                                           context_id=f"c{n}")
                t2 = time.perf_counter()
                out["sign (bridge)"].append(t1 - t0)
                out["verify (runtime)"].append(t2 - t1)
                for name in (("generation (no ledger)", "redeem (ledger)") if n % 2
                             else ("redeem (ledger)", "generation (no ledger)")):
                    t0 = time.perf_counter()
                    if name.startswith("redeem"):
                        gen = await store.redeem(a)
                    else:
                        gen = await store.generation(k, classification=a.classification,
                                                     output_audience=a.audience)
                    out[name].append(time.perf_counter() - t0)
                    assert gen == 1
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--scopes", type=int, default=200)
    args = parser.parse_args()
    result = asyncio.run(run(args.iters, args.scopes))
    print(f"| step ({args.iters} requests, {args.scopes} consented scopes) | median | p95 |")
    print("|---|---:|---:|")
    for name, xs in result.items():
        xs = sorted(xs)
        p95 = xs[int(len(xs) * 0.95)]
        print(f"| {name} | {statistics.median(xs) * 1e6:.0f} µs | {p95 * 1e6:.0f} µs |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
