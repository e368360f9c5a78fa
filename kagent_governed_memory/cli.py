"""``kagent-governed-memory``: operator commands and the demo.  Output is content-free except
the demo subject's own inspect page."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from . import __version__
from ._cli_keys import add_key_commands
from ._embedded import EmbeddedPostgres, EmbeddedUnavailable
from .embedding import HashingEmbedder
from .errors import ConsentRequired, GovernanceError
from .identity import AgentIdentity, MemoryScope, OriginKind, Principal, ScopeKey
from .migrations import LATEST_VERSION, migrate
from .store import GovernedMemoryStore

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
# Setup mistakes, not outages: exit 2 like a usage error.
_CONFIGURATION = {"permission_denied", "privileged_role", "service_role_missing",
                  "local_server_mismatch"}


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        code: int = asyncio.run(args.handler(args))
        return code
    except EmbeddedUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except GovernanceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if exc.reason.value in ("store_unavailable", "schema_outdated"):
            return EXIT_UNAVAILABLE
        if exc.reason.value.startswith("invalid_") or exc.reason.value in _CONFIGURATION:
            return EXIT_USAGE
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kagent-governed-memory", description=__doc__)
    p.add_argument("--version", action="version", version=__version__)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dsn", default=os.environ.get("KGM_DSN"),
                        help="PostgreSQL DSN (default: $KGM_DSN)")
    common.add_argument("--local-server", default=os.environ.get("KGM_LOCAL_SERVER", "example.org"),
                        help="the local Matrix homeserver name (default: $KGM_LOCAL_SERVER)")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    sub = p.add_subparsers(dest="command")

    demo = sub.add_parser("demo", parents=[common],
                          help="walk one scope through consent, save, search, forget, withdraw")
    demo.set_defaults(handler=_demo)
    sub.add_parser("migrate", parents=[common],
                   help="apply the SQL migrations; --dsn is the OWNER role (the trust root), "
                   "never the application's login").set_defaults(handler=_migrate)
    sub.add_parser("sweep", parents=[common],
                   help="physically delete expired rows (CronJob); non-zero exit on failure"
                   ).set_defaults(handler=_with_store(_sweep))
    status = sub.add_parser(
        "status", parents=[common],
        help="content-free status of one scope (with --principal …), or of the whole store")
    _key_args(status, required=False)
    status.set_defaults(handler=_with_store(_status))
    sub.add_parser("verify", parents=[common],
                   help="check the store's invariants; non-zero exit on any violation"
                   ).set_defaults(handler=_with_store(_verify))
    operator = argparse.ArgumentParser(add_help=False, parents=[common])
    operator.add_argument("--principal", required=True, help="complete MXID")
    operator.add_argument("--origin", default=OriginKind.NATIVE_LOCAL.value,
                          choices=[o.value for o in OriginKind])
    sub.add_parser("offboard", parents=[operator],
                   help="block, disable, clear and verify every scope of one principal; "
                   "--dsn is an OPERATOR login (kagent_memory_operator) or the owner"
                   ).set_defaults(
        handler=_with_store(_offboard, privileged=True))
    sub.add_parser("unblock", parents=[operator],
                   help="lift an offboarding block so the principal may consent again; "
                   "--dsn is an OPERATOR login (kagent_memory_operator) or the owner"
                   ).set_defaults(
        handler=_with_store(_unblock, privileged=True))
    add_key_commands(sub)
    return p


def _key_args(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    p.add_argument("--principal", required=required, help="complete MXID")
    p.add_argument("--origin", default=OriginKind.NATIVE_LOCAL.value,
                   choices=[o.value for o in OriginKind])
    p.add_argument("--namespace", required=required)
    p.add_argument("--agent", required=required)
    p.add_argument("--room", required=required, help="control room ID")


def _check_dsn(args: argparse.Namespace) -> int | None:
    if not args.dsn:
        print("error: no database: pass --dsn or set KGM_DSN", file=sys.stderr)
        return EXIT_USAGE
    if not _valid_dsn(args.dsn):
        print("error: the DSN is not a valid PostgreSQL connection string", file=sys.stderr)
        return EXIT_USAGE
    return None


def _with_store(
    fn: Callable[[GovernedMemoryStore, argparse.Namespace], Awaitable[int]],
    *,
    privileged: bool = False,
) -> Callable[[argparse.Namespace], Awaitable[int]]:
    async def run(args: argparse.Namespace) -> int:
        if (bad := _check_dsn(args)) is not None:
            return bad
        async with await GovernedMemoryStore.open(args.dsn, local_server=args.local_server,
                                                  sweep_every=None, privileged=privileged) as s:
            return await fn(s, args)

    return run


def _emit(args: argparse.Namespace, payload: dict[str, Any], human: str) -> None:
    print(json.dumps(payload, default=str, sort_keys=True) if args.json else human)


async def _migrate(args: argparse.Namespace) -> int:
    if (bad := _check_dsn(args)) is not None:
        return bad
    applied = await migrate(args.dsn, local_server=args.local_server)
    version = LATEST_VERSION
    _emit(args, {"applied": applied, "version": version},
          f"migrations applied: {len(applied)}; schema version {version}")
    return EXIT_OK


async def _unblock(store: GovernedMemoryStore, args: argparse.Namespace) -> int:
    principal = Principal(mxid=args.principal, origin=args.origin)
    lifted = await store.unblock(principal)
    _emit(args, {"principal_id": principal.opaque_id, "lifted": lifted},
          f"principal {principal.opaque_id}: " + ("block lifted" if lifted else "was not blocked"))
    return EXIT_OK


async def _sweep(store: GovernedMemoryStore, args: argparse.Namespace) -> int:
    removed = await store.sweep()
    _emit(args, {"deleted": removed}, f"expired entries deleted: {removed}")
    return EXIT_OK


async def _status(store: GovernedMemoryStore, args: argparse.Namespace) -> int:
    given = [args.principal, args.namespace, args.agent, args.room]
    if not any(given):
        report = await store.report()
        body = report.model_dump()
        _emit(args, body, "\n".join(f"{k}: {v}" for k, v in body.items()))
        return EXIT_OK
    if not all(given):
        print("error: a scope needs --principal, --namespace, --agent and --room", file=sys.stderr)
        return EXIT_USAGE
    key = ScopeKey(
        principal=Principal(mxid=args.principal, origin=args.origin),
        agent=AgentIdentity(namespace=args.namespace, name=args.agent),
        scope=MemoryScope.control_room(args.room),
    )
    st = await store.status(key)
    _emit(args, st.model_dump(mode="json"),
          "\n".join(f"{k}: {v}" for k, v in st.model_dump(mode="json").items()))
    return EXIT_OK


async def _verify(store: GovernedMemoryStore, args: argparse.Namespace) -> int:
    report = await store.report()
    violations = report.violations
    lines = [f"scopes: {report.scopes}, live entries: {report.entries_live}"]
    lines += [f"VIOLATION {name}: {count}" for name, count in violations.items()]
    lines.append("store invariants hold" if not violations else "store invariants violated")
    _emit(args, {"ok": not violations, "violations": violations, **report.model_dump()},
          "\n".join(lines))
    return EXIT_OK if not violations else EXIT_FAILED


async def _offboard(store: GovernedMemoryStore, args: argparse.Namespace) -> int:
    print("offboarding: disabling every scope of the principal, then clearing each ...",
          file=sys.stderr)
    report = await store.offboard(Principal(mxid=args.principal, origin=args.origin))
    lines = [f"principal {report.principal_id}: {len(report.scopes)} scope(s)"]
    lines += [f"  {s.scope_id}: {s.outcome} (deleted {s.deleted})" for s in report.scopes]
    _emit(args, report.model_dump(mode="json") | {"ok": report.ok}, "\n".join(lines))
    return EXIT_OK if report.ok else EXIT_FAILED


async def _demo(args: argparse.Namespace) -> int:
    if args.dsn:  # an application login on an already migrated database
        return await _demo_run(args.dsn, args.local_server)
    print("starting an embedded PostgreSQL 18 + pgvector (no --dsn given) ...")
    server = await asyncio.to_thread(EmbeddedPostgres().start)
    try:
        applied = await migrate(server.owner_dsn, local_server=args.local_server)
        print(f"  migrated as the owner role: {len(applied)} migration(s); the demo now "
              "connects as an application login (a member of kagent_memory_service)")
        return await _demo_run(server.dsn, args.local_server)
    finally:
        await asyncio.to_thread(server.stop)


async def _raw_sql_refused(dsn: str) -> str:
    """What a model-chosen tool holding the application's login gets from raw SQL."""
    import psycopg

    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute("SELECT count(*) FROM memory_entry")
    except psycopg.Error as exc:
        return f"refused (SQLSTATE {exc.sqlstate})"
    return "ALLOWED (this must not happen)"


async def _demo_run(dsn: str, local_server: str) -> int:
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
        step = _Steps()
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
        step("grant", f"generation {receipt.generation}, consent until {receipt.expires_at:%Y-%m-%d}")
        gen = await store.generation(key)
        ids = await store.save(key, gen, facts=facts, embeddings=vectors)
        step("save", f"{len(ids)} fact(s) stored, each expiring in {store.policy.max_ttl.days} days")
        hits = await store.search(key, gen, embedder.embed_one("what does alice drink, tea?"), limit=1)
        step("search", f"top hit is entry {hits[0].id if hits else None}")
        page = await store.inspect(key, page_size=10)
        step("inspect (the subject's own view)", f"{len(page.entries)} entries")
        for entry in page.entries:
            print(f"      {entry.id}  {entry.text!s}  (expires {entry.expires_at:%Y-%m-%d})")
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
        step("status", f"enabled={st.enabled} entries={st.entry_count} "
                       f"last verified erasure={st.last_verified_erasure_at:%H:%M:%S}")
    print("demo complete: nothing collected before consent, erasure verified.")
    return EXIT_OK


def _valid_dsn(dsn: str) -> bool:
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - the parser's message may echo the DSN (a password)
        return False
    return True


class _Steps:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, name: str, outcome: str) -> None:
        self.n += 1
        print(f"{self.n:>2}. {name}: {outcome}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
