"""Policies and issuers as configuration (D5): what a deployment registers, from a file.

No migration should write a policy or an issuer: they are an operator's configuration,
registered through ``memory_register_policy`` / ``memory_allow_policy`` and
``memory_register_issuer`` by the owner or a ``kagent_memory_operator`` login, idempotently (an
identical registration answers ``unchanged``).  A configuration file is JSON::

    {"policies": [{"policy": {"version": "...", "max_ttl": "P7D", ...},
                   "embedding_dimensions": [768, 1024],
                   "allow": [{"namespace": null, "agent": null}]}],
     "issuers": [{"issuer_kind": "oidc", "issuer": "https://idp.example.org",
                  "subject_pattern": "^.{1,255}$"},
                 {"issuer_kind": "matrix", "issuer": "example.org"}]}

``allow`` lists who may consent under the policy (``null`` namespace: every agent; a namespace
alone: its agents; both: one agent).  The library's own ADR 0023 prototype policy is the
packaged file ``policies/adr0023-prototype-1.json`` (``packaged_configuration()``), registered
this way at setup (``kagent-governed-memory migrate``, ``dev-db``, the demo), even though the
released baseline 000015 still inserts it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg

from .errors import GovernanceError, InvalidInput, ReasonCode, from_database_error
from .identity import MATRIX_KIND, OIDC_KIND, AgentIdentity, Issuer, MatrixIssuer, OidcIssuer
from .policy import MemoryPolicy
from .store import _sql
from .store._logpin import pinned_dsn
from .store._policies import _policy_params

__all__ = ["PACKAGED_CONFIGURATION", "Configuration", "PolicyRegistration", "apply_configuration",
           "configure", "load_configuration", "packaged_configuration"]

PACKAGED_CONFIGURATION = "adr0023-prototype-1.json"
"""The packaged configuration: the ADR 0023 prototype policy, allowed for every agent."""


@dataclass(frozen=True)
class PolicyRegistration:
    """A policy, the embedding dimensions a consent under it may record (default: its own) and
    the agents allowed to consent under it (``(namespace, agent)``; ``None`` for every)."""

    policy: MemoryPolicy
    dimensions: tuple[int, ...] = ()
    allow: tuple[tuple[str | None, str | None], ...] = ((None, None),)


@dataclass(frozen=True)
class Configuration:
    """The policies and issuers a deployment registers."""

    policies: tuple[PolicyRegistration, ...] = ()
    issuers: tuple[Issuer, ...] = field(default=())

    def __add__(self, other: Configuration) -> Configuration:
        return Configuration(self.policies + other.policies, self.issuers + other.issuers)


def _bad(what: str) -> InvalidInput:
    return InvalidInput(ReasonCode.INVALID_ARGUMENT, field=what)


def _allowance(item: object) -> tuple[str | None, str | None]:
    if not isinstance(item, dict) or not set(item) <= {"namespace", "agent"}:
        raise _bad("allow")
    namespace, agent = item.get("namespace"), item.get("agent")
    if agent is not None:
        if namespace is None:
            raise _bad("allow")
        AgentIdentity(namespace=namespace, name=agent)
    elif namespace is not None and not isinstance(namespace, str):
        raise _bad("allow")
    return namespace, agent


def _issuer(item: object) -> Issuer:
    if not isinstance(item, dict):
        raise _bad("issuers")
    kind = item.get("issuer_kind")
    if kind == OIDC_KIND and set(item) <= {"issuer_kind", "issuer", "subject_pattern"}:
        pattern = item.get("subject_pattern", "^.{1,255}$")
        return OidcIssuer(item.get("issuer"), subject_pattern=pattern)  # type: ignore[arg-type]
    if kind == MATRIX_KIND and set(item) <= {"issuer_kind", "issuer"}:
        return MatrixIssuer(item.get("issuer"))  # type: ignore[arg-type]
    raise _bad("issuers")


def load_configuration(data: str | Path | dict[str, Any]) -> Configuration:
    """A configuration from a JSON file (a ``Path``), JSON text or its parsed form; every
    policy and issuer validated (``invalid_policy``, ``invalid_argument``)."""
    if isinstance(data, Path):
        try:
            data = data.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            raise _bad("configuration") from None
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            raise _bad("configuration") from None
    if not isinstance(data, dict) or not set(data) <= {"policies", "issuers"}:
        raise _bad("configuration")
    policies, issuers = data.get("policies", []), data.get("issuers", [])
    if not isinstance(policies, list) or not isinstance(issuers, list):
        raise _bad("configuration")
    out: list[PolicyRegistration] = []
    for item in policies:
        if not isinstance(item, dict) or not set(item) <= {"policy", "embedding_dimensions",
                                                           "allow"}:
            raise _bad("policies")
        policy = MemoryPolicy.model_validate(item.get("policy"))
        dims = item.get("embedding_dimensions", [policy.embedding_dimension])
        allow = item.get("allow", [{"namespace": None, "agent": None}])
        if not isinstance(dims, list) or not isinstance(allow, list):
            raise _bad("policies")
        _policy_params(policy, dims)  # the dimensions' rules, before any round trip
        out.append(PolicyRegistration(policy, tuple(dims), tuple(_allowance(a) for a in allow)))
    return Configuration(tuple(out), tuple(_issuer(i) for i in issuers))


def packaged_configuration(name: str = PACKAGED_CONFIGURATION) -> Configuration:
    """A configuration file packaged with the library (``policies/``)."""
    text = resources.files("kagent_governed_memory").joinpath("policies", name).read_text(
        encoding="utf-8")
    return load_configuration(text)


async def apply_configuration(conn: psycopg.AsyncConnection[Any], config: Configuration
                              ) -> list[tuple[str, str, str]]:
    """Register ``config`` on ``conn`` (autocommit; the owner or an operator login), one
    statement each: every policy (``registered``, ``unchanged``, ``replaced``; a policy a
    consent refers to is never changed: ``policy_immutable``) and its allowances, then every
    issuer.  Returns ``(what, name, outcome)`` per policy and issuer."""
    done: list[tuple[str, str, str]] = []
    cur = psycopg.AsyncRawCursor(conn)
    for reg in config.policies:
        dims = list(reg.dimensions) if reg.dimensions else None
        await cur.execute(_sql.query("RegisterMemoryPolicy"), _policy_params(reg.policy, dims))
        row = await cur.fetchone()
        done.append(("policy", reg.policy.version, str(row[0]) if row else ""))
        for namespace, agent in reg.allow:
            await cur.execute(_sql.query("AllowMemoryPolicy"),
                              [reg.policy.version, namespace, agent])
    for issuer in config.issuers:
        await cur.execute(_sql.query("RegisterMemoryIssuer"), issuer.registration().params())
        row = await cur.fetchone()
        done.append(("issuer", f"{issuer.issuer_kind}:{issuer.issuer}",
                     str(row[0]) if row else ""))
    return done


async def configure(dsn: str, config: Configuration | None = None
                    ) -> list[tuple[str, str, str]]:
    """``apply_configuration`` on a connection of ``dsn`` (the owner or an operator login);
    default: the packaged configuration.  Idempotent."""
    failed: GovernanceError | None = None
    try:
        async with await psycopg.AsyncConnection.connect(pinned_dsn(dsn), autocommit=True) as conn:
            return await apply_configuration(conn, config or packaged_configuration())
    except (psycopg.Error, OSError) as exc:
        failed = from_database_error(exc, "configure")
    failed.__cause__ = failed.__context__ = None
    raise failed
