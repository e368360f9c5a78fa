"""``kagent-governed-memory``: operator commands, a development database and the demo.
Output is content-free except the demo subject's own inspect page."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn

from .. import __version__
from ..dev._embedded import EmbeddedUnavailable
from ..errors import GovernanceError, ReasonCode, from_database_error
from ..identity import AgentIdentity, MemoryScope, OriginKind, Principal, ScopeKey
from ..repository import ControlRepository, OperatorRepository
from ..store._logpin import pinned_dsn
from ..configuration import configure, packaged_configuration
from ..store._migrations import LATEST_VERSION, migrate
from ..store._store import GovernedMemoryStore
from ._demo import run_demo, run_dev_db
from ._keys import add_key_commands
from ._registry import add_registry_commands
from ._text import (
    DESCRIPTION,
    EXIT_CODES_HELP,
    EXIT_CODES_POINTER,
    EXIT_CONFIGURATION,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CliError,
    emit,
    fail,
    human_value,
)

__all__ = ["EXIT_CONFIGURATION", "EXIT_FAILED", "EXIT_OK", "EXIT_UNAVAILABLE", "EXIT_USAGE",
           "main"]

DEFAULT_LOCAL_SERVER = "example.org"
# The database refused the login, or the login/setup is wrong for the command: not an outage.
_CONFIGURATION = frozenset({
    ReasonCode.LOGIN_REFUSED, ReasonCode.PERMISSION_DENIED, ReasonCode.PRIVILEGED_ROLE,
    ReasonCode.SERVICE_ROLE_MISSING, ReasonCode.OPERATOR_ROLE_MISSING,
    ReasonCode.SIGNAL_PRIVILEGE_MISSING,
    ReasonCode.LOCAL_SERVER_MISMATCH, ReasonCode.LOG_SETTINGS_UNSAFE, ReasonCode.UNAUTHENTICATED,
    ReasonCode.FORBIDDEN, ReasonCode.CONTROLLER_ERROR, ReasonCode.ROLE_NOT_PERMITTED,
    ReasonCode.CALLER_ROLE_MISSING, ReasonCode.POLICY_NOT_REGISTERED, ReasonCode.POLICY_MISMATCH})
_UNAVAILABLE = frozenset({ReasonCode.STORE_UNAVAILABLE, ReasonCode.SCHEMA_OUTDATED,
                          ReasonCode.SCHEMA_BEFORE_BASELINE})
# An operator command (offboard, unblock, policy, login) run with a login that is no operator.
_NOT_AN_OPERATOR = frozenset({ReasonCode.ROLE_NOT_PERMITTED, ReasonCode.PERMISSION_DENIED})
_OPERATOR_LOGIN = ("this login may not run this command: use an operator login (a member of "
                   "kagent_memory_operator, e.g. dev-db's kgm_operator, printed as 'operator') "
                   "or the owner as --dsn")


def exit_code(reason: ReasonCode) -> int:
    """The exit code of a ``GovernanceError`` (see ``EXIT_CODES_HELP``)."""
    if reason in _UNAVAILABLE:
        return EXIT_UNAVAILABLE
    if reason in _CONFIGURATION:
        return EXIT_CONFIGURATION
    if reason.value.startswith("invalid_"):
        return EXIT_USAGE
    return EXIT_FAILED


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error under ``--json`` is one JSON object on stdout like every
    other error (exit 2), and says only that the command line was not understood: argparse's
    own message may quote an argument (a DSN with its password, say)."""

    json_errors = False

    def error(self, message: str) -> NoReturn:
        if _Parser.json_errors:
            fail(None, EXIT_USAGE, "usage", "")
            sys.exit(EXIT_USAGE)
        super().error(message)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    _Parser.json_errors = "--json" in (sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return EXIT_USAGE
    if hasattr(args, "local_server"):
        given = args.local_server or os.environ.get("KGM_LOCAL_SERVER") or None
        args.local_server_given = given is not None
        args.local_server = given or DEFAULT_LOCAL_SERVER
    try:
        return int(asyncio.run(args.handler(args)))
    except CliError as exc:
        return fail(args, exc.code, exc.error, exc.message)
    except EmbeddedUnavailable as exc:
        return fail(args, EXIT_UNAVAILABLE, "embedded_unavailable", str(exc))
    except GovernanceError as exc:
        return fail(args, exit_code(exc.reason), exc.reason.value, str(exc))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _command(sub: argparse._SubParsersAction, name: str, summary: str, details: str,  # type: ignore[type-arg]
             parents: list[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, parents=parents, help=summary, epilog=EXIT_CODES_POINTER,
        description=f"{summary}.\n\n{textwrap.fill(details, 78)}".rstrip(),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    return parser


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kagent-governed-memory", description=DESCRIPTION, epilog=EXIT_CODES_HELP,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=__version__)
    server = argparse.ArgumentParser(add_help=False)
    server.add_argument("--local-server", default=None,
                        help="the local Matrix homeserver name (default: $KGM_LOCAL_SERVER, "
                        f"else {DEFAULT_LOCAL_SERVER})")
    server.add_argument("--json", action="store_true",
                        help="machine-readable output (errors too, as one JSON object)")
    common = argparse.ArgumentParser(add_help=False, parents=[server])
    common.add_argument("--dsn", default=os.environ.get("KGM_DSN"),
                        help="PostgreSQL DSN (default: $KGM_DSN)")
    # the bridge's side of a patched kagent controller, instead of the database
    bridge = argparse.ArgumentParser(add_help=False, parents=[common])
    bridge.add_argument("--controller", default=os.environ.get("KGM_CONTROLLER_URL"),
                        help="the kagent controller's governed memory URL, e.g. "
                        "http://kagent-controller.kagent:8085 (default: $KGM_CONTROLLER_URL); "
                        "instead of --dsn")
    bridge.add_argument("--token-file", default=None,
                        help="with --controller: a ServiceAccount token file of the bridge "
                        "(default: /var/run/secrets/tokens/kagent-token)")
    sub = p.add_subparsers(dest="command")

    demo = _command(sub, "demo", "walk one scope through consent, save, search, forget, withdraw",
                    "Without --dsn on a throwaway embedded PostgreSQL (migrated, then deleted); "
                    "$KGM_DSN is ignored. With --dsn (an application login on a migrated "
                    "database) it grants, fills and withdraws one demo scope there.", [server])
    demo.add_argument("--dsn", default=None, help="an application login to run against "
                      "(default: a throwaway embedded database, never $KGM_DSN)")
    demo.add_argument("--matrix", action="store_true",
                      help="the same flow in a Matrix control room: a throwaway Synapse "
                      "homeserver, the reference bridge, an A2A agent and a scripted user; "
                      "prints the room's transcript (needs the matrix-demo extra)")
    demo.set_defaults(handler=run_demo)
    dev = _command(sub, "dev-db", "run a local development database until Ctrl-C",
                   "Starts the embedded PostgreSQL 18 + pgvector, migrates it as the owner for "
                   "--local-server, prints export KGM_DSN=... (the EXECUTE-only application "
                   "login) and the operator/owner DSNs, and stops cleanly on Ctrl-C or SIGTERM. "
                   "With --data-dir the socket, and so every DSN, is the same on every run: "
                   "export KGM_DSN once. Trust authentication on a private socket: "
                   "development only.", [server])
    dev.add_argument("--data-dir", type=Path, default=None,
                     help="keep the cluster in this directory and reuse it next time, on the "
                     "same socket (in the directory, or a private one in the temp directory "
                     "when its path is too long for a Unix socket) (default: a temporary "
                     "directory, deleted when stopped)")
    dev.set_defaults(handler=run_dev_db)
    migrate_cmd = _command(sub, "migrate", "apply the SQL migrations",
                           "--dsn is the OWNER role (the trust root), never the application's "
                           "login. Records --local-server only when given (flag or "
                           "$KGM_LOCAL_SERVER); otherwise the first store to open records its "
                           "own. Then registers the packaged configuration (the ADR 0023 "
                           "prototype policy, allowed for every agent), idempotently.",
                           [common])
    migrate_cmd.set_defaults(handler=_migrate)
    _command(sub, "sweep", "physically delete expired rows",
             "For a CronJob; exits non-zero on failure.", [common]
             ).set_defaults(handler=_with_store(_sweep))
    status = _command(sub, "status", "content-free status of one scope or of the whole store",
                      "With --principal, --namespace, --agent and --room: one scope; without: "
                      "aggregate counts (database only). With --controller, one scope through "
                      "the kagent controller, as the bridge.", [bridge])
    _key_args(status)
    status.set_defaults(handler=_with_store(_status))
    _command(sub, "verify", "check the store's invariants",
             "Exit 1 on any violation, naming the violated invariants and the scopes (by their "
             "random id) that hold rows expired more than 24 hours ago.", [common]
             ).set_defaults(handler=_with_store(_verify))
    operator = argparse.ArgumentParser(add_help=False, parents=[common])
    _principal_args(operator, required=True)
    offboard = argparse.ArgumentParser(add_help=False, parents=[bridge])
    _principal_args(offboard, required=True)
    _command(sub, "offboard", "block, disable, clear and verify every scope of one principal",
             "--dsn is an OPERATOR login (kagent_memory_operator) or the owner; or "
             "--controller, as the bridge. Exit 1 when an erasure could not be verified (run "
             "it again).", [offboard]
             ).set_defaults(handler=_with_store(_offboard, privileged=True))
    _command(sub, "unblock", "lift an offboarding block so the principal may consent again",
             "--dsn is an OPERATOR login (kagent_memory_operator) or the owner.", [operator]
             ).set_defaults(handler=_with_store(_unblock, privileged=True))
    add_registry_commands(sub, _command, common, lambda fn: _with_store(fn, privileged=True))
    add_key_commands(sub)
    return p


def _principal_args(p: argparse.ArgumentParser, *, required: bool = False) -> None:
    p.add_argument("--principal", required=required,
                   help="the principal's complete Matrix ID, e.g. @alice:example.org")
    p.add_argument("--origin", default=OriginKind.NATIVE_LOCAL.value,
                   choices=[o.value for o in OriginKind],
                   help="how the principal reached the bridge (default: native_local, a user "
                   "of the local homeserver); the same MXID with another origin is another "
                   "principal")


def _key_args(p: argparse.ArgumentParser) -> None:
    _principal_args(p)
    p.add_argument("--namespace", help="the agent's Kubernetes namespace, e.g. kagent")
    p.add_argument("--agent", help="the agent's name (the kagent Agent resource's name)")
    p.add_argument("--room", help="the scope's control room ID, e.g. !room:example.org")


def _check_dsn(args: argparse.Namespace) -> None:
    if not args.dsn:
        raise CliError(EXIT_USAGE, "invalid_argument", "no database: KGM_DSN is unset and no "
                       "--dsn given: export KGM_DSN=... or run kagent-governed-memory dev-db")
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(args.dsn)
    except Exception:  # noqa: BLE001 - the parser's message may echo the DSN (a password)
        raise CliError(EXIT_USAGE, "invalid_argument",
                       "the DSN is not a valid PostgreSQL connection string") from None


async def _probe_login(dsn: str) -> None:
    """One direct connection first: a refused login fails here at once with its own reason
    (``login_refused``), where the pool would retry until its timeout."""
    import psycopg

    failed: GovernanceError | None = None
    try:
        conn = await psycopg.AsyncConnection.connect(pinned_dsn(dsn), connect_timeout=10)
    except (psycopg.Error, OSError) as exc:
        failed = from_database_error(exc, "open")
    else:
        await conn.close()
    if failed is not None:
        failed.__cause__ = failed.__context__ = None
        raise failed


def _with_store(
    fn: Callable[[Any, argparse.Namespace], Awaitable[int]],
    *,
    privileged: bool = False,
) -> Callable[[argparse.Namespace], Awaitable[int]]:
    async def run(args: argparse.Namespace) -> int:
        if getattr(args, "controller", None):
            if args.dsn and os.environ.get("KGM_DSN") != args.dsn:
                raise CliError(EXIT_USAGE, "invalid_argument",
                               "pass --dsn or --controller, not both")
            from ..kagent import KagentBridgeStore

            async with KagentBridgeStore(args.controller, local_server=args.local_server,
                                         token_file=args.token_file) as bridge:
                return await fn(bridge, args)
        _check_dsn(args)
        await _probe_login(args.dsn)
        try:
            async with await GovernedMemoryStore.open(args.dsn, local_server=args.local_server,
                                                      sweep_every=None,
                                                      privileged=privileged) as s:
                return await fn(s, args)
        except GovernanceError as exc:
            if privileged and exc.reason in _NOT_AN_OPERATOR:
                raise CliError(EXIT_CONFIGURATION, exc.reason.value, _OPERATOR_LOGIN) from None
            raise

    return run


async def _migrate(args: argparse.Namespace) -> int:
    _check_dsn(args)
    applied = await migrate(args.dsn,
                            local_server=args.local_server if args.local_server_given else None)
    # policies are configuration (D5): the packaged ADR 0023 prototype policy, registered
    # through memory_register_policy, idempotently
    registered = await configure(args.dsn, packaged_configuration())
    emit(args, {"applied": applied, "version": LATEST_VERSION,
                "configured": [{"what": w, "name": n, "outcome": o} for w, n, o in registered]},
         f"migrations applied: {len(applied)}; schema version {LATEST_VERSION}; "
         + "; ".join(f"{w} {n}: {o}" for w, n, o in registered))
    return EXIT_OK


async def _unblock(store: GovernedMemoryStore, args: argparse.Namespace) -> int:
    principal = Principal(mxid=args.principal, origin=args.origin)
    lifted = await store.unblock(principal)
    emit(args, {"principal_id": principal.opaque_id, "lifted": lifted},
         f"principal {principal.opaque_id}: " + ("block lifted" if lifted else "was not blocked"))
    return EXIT_OK


async def _sweep(store: GovernedMemoryStore, args: argparse.Namespace) -> int:
    removed = await store.sweep()
    emit(args, {"deleted": removed}, f"expired entries deleted: {removed}")
    return EXIT_OK


async def _status(store: ControlRepository, args: argparse.Namespace) -> int:
    given = [args.principal, args.namespace, args.agent, args.room]
    if not any(given):
        if not isinstance(store, OperatorRepository):
            raise CliError(EXIT_USAGE, "invalid_argument",
                           "the store-wide status needs --dsn (an operator login); through "
                           "--controller, name one scope")
        report = await store.report()
        body = report.model_dump(mode="json")
        emit(args, body, "\n".join(f"{k}: {human_value(v)}" for k, v in body.items()))
        return EXIT_OK
    if not all(given):
        raise CliError(EXIT_USAGE, "invalid_argument",
                       "a scope needs --principal, --namespace, --agent and --room")
    key = ScopeKey(
        principal=Principal(mxid=args.principal, origin=args.origin),
        agent=AgentIdentity(namespace=args.namespace, name=args.agent),
        scope=MemoryScope.control_room(args.room),
    )
    st = await store.status(key)
    emit(args, st.model_dump(mode="json"),
         "\n".join(f"{k}: {human_value(getattr(st, k))}" for k in type(st).model_fields))
    return EXIT_OK


async def _verify(store: GovernedMemoryStore, args: argparse.Namespace) -> int:
    report = await store.report()
    violations = report.violations
    lines = [f"scopes: {report.scopes}, live entries: {report.entries_live}"]
    for name, count in violations.items():
        lines.append(f"VIOLATION {name}: {count}")
        if name == "expired_overdue":
            lines += [f"  scope {sid}" for sid in report.overdue_scope_ids]
    if violations and report.violating_scope_ids:
        lines.append("scopes with a violation (their memory_scope ids):")
        lines += [f"  scope {sid}" for sid in report.violating_scope_ids]
    lines.append("store invariants hold" if not violations else "store invariants violated")
    emit(args, {"ok": not violations, "violations": violations,
                **report.model_dump(mode="json")}, "\n".join(lines))
    return EXIT_OK if not violations else EXIT_FAILED


async def _offboard(store: ControlRepository, args: argparse.Namespace) -> int:
    print("offboarding: disabling every scope of the principal, then clearing each ...",
          file=sys.stderr)
    report = await store.offboard(Principal(mxid=args.principal, origin=args.origin))
    lines = [f"principal {report.principal_id}: {len(report.scopes)} scope(s)"]
    lines += [f"  {s.scope_id}: {s.outcome} (deleted {s.deleted})" for s in report.scopes]
    emit(args, report.model_dump(mode="json") | {"ok": report.ok}, "\n".join(lines))
    return EXIT_OK if report.ok else EXIT_FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
