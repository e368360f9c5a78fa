"""``kagent-governed-memory policy …`` and ``login …``: what an operator registers (see
``REGISTRY_HELP``)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..configuration import load_configuration, packaged_configuration
from ..errors import InvalidInput
from ..identity import AgentIdentity, Issuer, MatrixIssuer, OidcIssuer
from ..policy import MemoryPolicy
from ._text import EXIT_CODES_POINTER, EXIT_OK, EXIT_USAGE, CliError, emit

__all__ = ["add_registry_commands"]

REGISTRY_HELP = """\
What an operator registers: the memory policies agents may consent under, the issuers whose
principals may consent, and the database logins of agent runtimes and verifiers.

  configure [--file config.json]               # policies and issuers, from a configuration
  issuer register --oidc URL [--subject-pattern P] | --matrix SERVER
  issuer disable --oidc URL | --matrix SERVER
  policy register --file policy.json [--dimensions 768,1024]   # a MemoryPolicy as JSON
  policy allow --version V [--namespace NS [--agent NAME]]      # who may consent under it
  policy disallow --version V [--namespace NS [--agent NAME]]
  login register-runtime --login L --namespace NS --agent NAME  # an agent runtime's login
  login register-verifier --login L                             # a login that verifies itself
  login unregister --login L

--dsn is an OPERATOR login (a member of kagent_memory_operator; dev-db's kgm_operator) or
the owner."""

Command = Callable[..., argparse.ArgumentParser]
Runner = Callable[[Callable[[Any, argparse.Namespace], Awaitable[int]]],
                  Callable[[argparse.Namespace], Awaitable[int]]]


def add_registry_commands(sub: argparse._SubParsersAction, command: Command,  # type: ignore[type-arg]
                          common: argparse.ArgumentParser, with_store: Runner) -> None:
    policy = sub.add_parser("policy", help="register and allow memory policies (operator)",
                            description=REGISTRY_HELP, epilog=EXIT_CODES_POINTER,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    psub = policy.add_subparsers(dest="policy_command", required=True)
    reg = command(psub, "register", "register a policy version",
                  "FILE holds a MemoryPolicy as JSON (version, max_ttl and consent_max_age in "
                  "seconds or ISO 8601, the caps and rates). Identical: unchanged; different "
                  "and no consent refers to it yet: replaced; else refused (policy_immutable: "
                  "register the new limits under a new version).", [common])
    reg.add_argument("--file", type=Path, required=True, help="the policy, as JSON")
    reg.add_argument("--dimensions", default=None,
                     help="comma-separated embedding dimensions a consent may record "
                     "(default: the policy's embedding_dimension)")
    reg.set_defaults(handler=with_store(_register))
    for name, fn, summary in (("allow", _allow, "allow consents under a version"),
                              ("disallow", _disallow, "withdraw an allowance")):
        p = command(psub, name, summary,
                    "For one agent (--namespace and --agent), every agent of a namespace "
                    "(--namespace), or every agent (neither).", [common])
        p.add_argument("--version", required=True, help="the registered policy version")
        p.add_argument("--namespace", default=None, help="the agents' Kubernetes namespace")
        p.add_argument("--agent", default=None, help="one Agent's name")
        p.set_defaults(handler=with_store(fn))

    conf = command(sub, "configure", "register policies and issuers from a configuration",
                   "FILE is a configuration as JSON (policies with their embedding dimensions "
                   "and allowances, issuers; see docs/cli.md); default: the packaged one, the "
                   "ADR 0023 prototype policy allowed for every agent. Idempotent: what is "
                   "registered identically is unchanged.", [common])
    conf.add_argument("--file", type=Path, default=None,
                      help="the configuration, as JSON (default: the packaged configuration)")
    conf.set_defaults(handler=with_store(_configure))
    issuer = sub.add_parser("issuer", help="register and disable issuers (operator)",
                            description=REGISTRY_HELP, epilog=EXIT_CODES_POINTER,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    isub = issuer.add_subparsers(dest="issuer_command", required=True)
    ireg = command(isub, "register", "register an issuer whose principals may consent",
                   "An OIDC provider (its iss URL; subjects matching --subject-pattern, "
                   "default any 1 to 255 characters; scope principal, audience principal) or "
                   "the Matrix issuer of a homeserver (its native users in single-subject "
                   "control rooms). Registered again: unchanged, or replaced (and enabled).",
                   [common])
    idis = command(isub, "disable", "disable an issuer",
                   "Its principals can no longer consent and their requests get no memory; "
                   "their scopes stay withdrawable and offboardable.", [common])
    for p in (ireg, idis):
        which = p.add_mutually_exclusive_group(required=True)
        which.add_argument("--oidc", default=None, help="the OIDC provider's iss URL")
        which.add_argument("--matrix", default=None, help="the homeserver's server name")
    ireg.add_argument("--subject-pattern", default="^.{1,255}$",
                      help="an anchored pattern every subject of an OIDC issuer matches "
                      "(default: ^.{1,255}$)")
    ireg.set_defaults(handler=with_store(_register_issuer))
    idis.set_defaults(handler=with_store(_disable_issuer))

    login = sub.add_parser("login", help="register database logins (operator)",
                           description=REGISTRY_HELP, epilog=EXIT_CODES_POINTER,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    lsub = login.add_subparsers(dest="login_command", required=True)
    rt = command(lsub, "register-runtime", "let an agent runtime's login serve one agent",
                 "The login (a member of kagent_memory_runtime) then redeems only requests the "
                 "bridge recorded for that agent.", [common])
    rt.add_argument("--login", required=True, help="the database login (role name)")
    rt.add_argument("--namespace", required=True, help="the Agent's namespace")
    rt.add_argument("--agent", required=True, help="the Agent's name")
    rt.set_defaults(handler=with_store(_register_runtime))
    for name, fn, summary, details in (
            ("register-verifier", _register_verifier,
             "let a login redeem requests nobody recorded",
             "Only for a caller that verifies the bridge's signatures itself (the kagent "
             "controller's serving login)."),
            ("unregister", _unregister, "remove every registration of a login", "")):
        p = command(lsub, name, summary, details, [common])
        p.add_argument("--login", required=True, help="the database login (role name)")
        p.set_defaults(handler=with_store(fn))


async def _register(store: Any, args: argparse.Namespace) -> int:
    try:
        data = json.loads(args.file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise CliError(EXIT_USAGE, "invalid_argument",
                       "--file is not a readable JSON file") from None
    policy = MemoryPolicy.model_validate(data)
    dims = None
    if args.dimensions:
        try:
            dims = [int(d) for d in args.dimensions.split(",")]
        except ValueError:
            raise CliError(EXIT_USAGE, "invalid_argument",
                           "--dimensions is a comma-separated list of integers") from None
    outcome = await store.register_policy(policy, dimensions=dims)
    emit(args, {"ok": True, "version": policy.version, "outcome": outcome},
         f"policy {policy.version}: {outcome}")
    return EXIT_OK


def _scope(args: argparse.Namespace) -> dict[str, str | None]:
    if args.agent is not None:
        if args.namespace is None:
            raise CliError(EXIT_USAGE, "invalid_argument", "--agent needs --namespace")
        AgentIdentity(namespace=args.namespace, name=args.agent)
    return {"namespace": args.namespace, "agent": args.agent}


async def _allow(store: Any, args: argparse.Namespace) -> int:
    where = _scope(args)
    await store.allow_policy(args.version, **where)
    emit(args, {"ok": True, "version": args.version, **where}, f"policy {args.version}: allowed")
    return EXIT_OK


async def _disallow(store: Any, args: argparse.Namespace) -> int:
    where = _scope(args)
    removed = await store.disallow_policy(args.version, **where)
    emit(args, {"ok": True, "version": args.version, "removed": removed, **where},
         f"policy {args.version}: allowances removed: {removed}")
    return EXIT_OK


async def _configure(store: Any, args: argparse.Namespace) -> int:
    config = packaged_configuration() if args.file is None else load_configuration(args.file)
    done = await store.configure(config)
    emit(args, {"ok": True, "configured": [{"what": w, "name": n, "outcome": o}
                                           for w, n, o in done]},
         "\n".join(f"{w} {n}: {o}" for w, n, o in done) or "nothing to register")
    return EXIT_OK


def _issuer(args: argparse.Namespace) -> Issuer:
    if args.oidc is not None:
        return OidcIssuer(args.oidc, subject_pattern=getattr(args, "subject_pattern",
                                                             "^.{1,255}$"))
    return MatrixIssuer(args.matrix)


async def _register_issuer(store: Any, args: argparse.Namespace) -> int:
    issuer = _issuer(args)
    outcome = await store.register_issuer(issuer)
    emit(args, {"ok": True, "issuer_kind": issuer.issuer_kind, "issuer": issuer.issuer,
                "outcome": outcome}, f"issuer {issuer.issuer_kind} {issuer.issuer}: {outcome}")
    return EXIT_OK


async def _disable_issuer(store: Any, args: argparse.Namespace) -> int:
    issuer = _issuer(args)
    disabled = await store.disable_issuer(issuer)
    emit(args, {"ok": True, "issuer_kind": issuer.issuer_kind, "issuer": issuer.issuer,
                "disabled": disabled},
         f"issuer {issuer.issuer_kind} {issuer.issuer}: "
         + ("disabled" if disabled else "was not enabled"))
    return EXIT_OK


async def _register_runtime(store: Any, args: argparse.Namespace) -> int:
    try:
        agent = AgentIdentity(namespace=args.namespace, name=args.agent)
    except InvalidInput:
        raise CliError(EXIT_USAGE, "invalid_identity", "--namespace/--agent is not an Agent")
    await store.register_runtime_login(args.login, agent)
    emit(args, {"ok": True, "login": args.login, "namespace": agent.namespace,
                "agent": agent.name},
         f"login {args.login}: serves {agent.namespace}/{agent.name}")
    return EXIT_OK


async def _register_verifier(store: Any, args: argparse.Namespace) -> int:
    await store.register_verifier_login(args.login)
    emit(args, {"ok": True, "login": args.login}, f"login {args.login}: verifier")
    return EXIT_OK


async def _unregister(store: Any, args: argparse.Namespace) -> int:
    removed = await store.unregister_login(args.login)
    emit(args, {"ok": True, "login": args.login, "removed": removed},
         f"login {args.login}: registrations removed: {removed}")
    return EXIT_OK
