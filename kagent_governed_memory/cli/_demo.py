"""``kagent-governed-memory demo`` and ``dev-db``: the embedded PostgreSQL 18 + pgvector for a
first look and for local development (see ``dev._database``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import signal
import sys
from typing import Any

from ..dev._database import dev_database
from ..embedding import HashingEmbedder
from ..errors import ConsentRequired
from ..identity import AgentIdentity, MemoryScope, OriginKind, Principal, ScopeKey
from ..store._logpin import pinned_dsn
from ..store._store import GovernedMemoryStore
from ._text import EXIT_FAILED, EXIT_OK, timestamp

__all__ = ["run_demo", "run_dev_db"]


async def run_dev_db(args: argparse.Namespace) -> int:
    """Start, migrate, print the DSNs, wait for Ctrl-C or SIGTERM, stop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with dev_database(local_server=args.local_server, data_dir=args.data_dir) as db:
            if args.json:
                print(json.dumps({"ok": True, "dsn": db.dsn, "owner_dsn": db.owner_dsn,
                                  "operator_dsn": db.operator_dsn, "admin_dsn": db.admin_dsn,
                                  "local_server": db.local_server,
                                  "data_dir": str(db.data_dir) if db.data_dir else None,
                                  "applied": list(db.applied)}, sort_keys=True), flush=True)
            else:
                kept = f"kept in {db.data_dir}" if db.data_dir else "deleted when stopped"
                print(f"# PostgreSQL 18 + pgvector, migrated for {db.local_server} ({kept}).\n"
                      "# The application login (EXECUTE on the governed functions only):\n"
                      f"export KGM_DSN={shlex.quote(db.dsn)}\n"
                      f"export KGM_LOCAL_SERVER={shlex.quote(db.local_server)}\n"
                      f"# operator (offboard, unblock): {db.operator_dsn}\n"
                      f"# owner (migrate):              {db.owner_dsn}\n"
                      f"# superuser (inspection only):  {db.admin_dsn}\n"
                      "# running; Ctrl-C stops it", flush=True)
            await stop.wait()
            print("# stopping", file=sys.stderr, flush=True)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return EXIT_OK


async def run_demo(args: argparse.Namespace) -> int:
    if getattr(args, "matrix", False):
        return await _matrix_demo(args)
    steps = _Steps(args.json)
    if args.dsn:  # an application login on an already migrated database: said, not silent
        steps.note("using the database of --dsn: one demo scope is granted, filled and "
                   "withdrawn there (nothing is migrated)")
        code = await _demo_run(args.dsn, args.local_server, steps)
    else:
        steps.note("starting an embedded PostgreSQL 18 + pgvector (no --dsn given; $KGM_DSN "
                   "is never used by the demo) ...")
        async with dev_database(local_server=args.local_server) as db:
            steps.note(f"migrated as the owner role: {len(db.applied)} migration(s); the demo "
                       "now connects as an application login (a member of "
                       "kagent_memory_service)")
            code = await _demo_run(db.dsn, args.local_server, steps)
    steps.finish(code)
    return code


async def _matrix_demo(args: argparse.Namespace) -> int:
    if args.dsn or args.json:
        print("demo --matrix runs on its own throwaway homeserver and database and prints a "
              "transcript: drop --dsn and --json", file=sys.stderr)
        return EXIT_FAILED
    try:
        from ..matrix.demo import run_matrix_demo
        from ..matrix.homeserver import synapse_available
    except ModuleNotFoundError:
        print("demo --matrix needs the matrix-demo extra: pip install -e "
              "'.[matrix-demo]' in a clone (docs/install.md)", file=sys.stderr)
        return EXIT_FAILED
    missing = synapse_available()
    if missing is not None:
        print(f"demo --matrix cannot start a homeserver: {missing}; pip install -e "
              "'.[matrix-demo]' in a clone (docs/install.md)", file=sys.stderr)
        return EXIT_FAILED
    return await run_matrix_demo(args)


async def _raw_sql_refused(dsn: str) -> str:
    """What a model-chosen tool holding the application's login gets from raw SQL."""
    import psycopg

    try:
        async with await psycopg.AsyncConnection.connect(pinned_dsn(dsn), autocommit=True) as conn:
            await conn.execute("SELECT count(*) FROM memory_entry")
    except psycopg.Error as exc:
        return f"refused (SQLSTATE {exc.sqlstate})"
    return "ALLOWED (this must not happen)"


async def _demo_run(dsn: str, local_server: str, step: _Steps) -> int:
    embedder = HashingEmbedder()
    key = ScopeKey(
        principal=Principal(mxid=f"@alice:{local_server}", origin=OriginKind.NATIVE_LOCAL),
        agent=AgentIdentity(namespace="kagent", name="demo-agent"),
        scope=MemoryScope.control_room(f"!control-room:{local_server}"),
    )
    facts = ["Alice prefers tea over coffee", "Alice's project is called Lighthouse",
             "Alice works from Lisbon on Fridays"]
    vectors = await embedder.embed(facts)
    async with await GovernedMemoryStore.open(dsn, local_server=local_server,
                                              sweep_every=None) as store:
        await store.migrate()  # applies nothing as the application; says so if outdated
        step("schema", f"version {await store.schema_version()}")
        raw = await _raw_sql_refused(dsn)
        step("raw SQL on memory_entry as the application login", raw)
        if not raw.startswith("refused"):
            return EXIT_FAILED
        step("scope", f"{key.opaque_id} (principal, agent, control room)")
        try:
            await store.save(key, await store.generation(key), facts=facts, embeddings=vectors)
            step("save before consent", "STORED (this must not happen)")
            return EXIT_FAILED
        except ConsentRequired as exc:
            step("save before consent", f"refused: {exc.reason.value}")
        receipt = await store.grant(key, purpose="personal_preferences")
        step("grant", f"generation {receipt.generation}, consent until "
                      f"{timestamp(receipt.expires_at)}")
        gen = await store.generation(key)
        ids = await store.save(key, gen, facts=facts, embeddings=vectors)
        step("save", f"{len(ids)} fact(s) stored, each expiring in {store.policy.max_ttl.days} days")
        hits = await store.search(key, gen, embedder.embed_one("what does alice drink, tea?"), limit=1)
        step("search", f"top hit is entry {hits[0].id if hits else None}")
        page = await store.inspect(key, page_size=10)
        step("inspect (the subject's own view)", f"{len(page.entries)} entries")
        for entry in page.entries:  # the demo subject's own facts, text output only
            step.detail(f"{entry.id}  {entry.text!s}  (expires {timestamp(entry.expires_at)})")
        forgot = await store.forget(key, ids[0])
        step("forget one", f"deleted {forgot.deleted}, verified {forgot.verified}")
        erased = await store.withdraw(key)
        step("withdraw", f"disabled, deleted {erased.deleted}, verified {erased.verified}")
        try:
            await store.save(key, gen, facts=facts[:1], embeddings=vectors[:1])
            step("late save with the old generation", "STORED (this must not happen)")
            return EXIT_FAILED
        except ConsentRequired as exc:
            step("late save with the old generation", f"refused: {exc.reason.value}")
        st = await store.status(key)
        erased_at = timestamp(st.last_verified_erasure_at) if st.last_verified_erasure_at else "-"
        step("status", f"enabled={st.enabled} entries={st.entry_count} "
                       f"last verified erasure={erased_at}")
    return EXIT_OK


class _Steps:
    """Numbered steps on stdout, or (``--json``) one JSON object at the end."""

    def __init__(self, as_json: bool) -> None:
        self.json = as_json
        self.steps: list[dict[str, Any]] = []

    def note(self, text: str) -> None:
        print(text, file=sys.stderr if self.json else sys.stdout)

    def __call__(self, name: str, outcome: str) -> None:
        self.steps.append({"step": name, "outcome": outcome})
        if not self.json:
            print(f"{len(self.steps):>2}. {name}: {outcome}")

    def detail(self, text: str) -> None:
        if not self.json:
            print(f"      {text}")

    def finish(self, code: int) -> None:
        if self.json:
            print(json.dumps({"ok": code == EXIT_OK, "steps": self.steps}, sort_keys=True))
        elif code == EXIT_OK:
            print("demo complete: nothing collected before consent, erasure verified.")

