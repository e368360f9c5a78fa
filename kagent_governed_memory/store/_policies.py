"""Registered policies, issuers and logins: what an operator writes, what every store checks.

A policy is a row only the owner or a ``kagent_memory_operator`` member writes
(``memory_register_policy``), immutable once a consent refers to it; ``grant`` names its
version and records exactly its limits, ``admit`` reads the scope's.  A store opened with a
``MemoryPolicy`` refuses to start unless the database holds the same policy under that version,
so the early checks the library makes are the ones the database enforces.  An issuer is a row
of the same kind (``memory_register_issuer``): the database grants consent only to a principal
of a registered, enabled issuer, under that issuer's rules.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput, ReasonCode
from ..identity import AgentIdentity, Issuer, IssuerRegistration
from ..policy import MemoryPolicy
from ._base import _StoreBase
from ._logpin import SETTINGS_COLUMNS

if TYPE_CHECKING:
    from ..configuration import Configuration

__all__: list[str] = []

# Can this login switch the rules off (superuser, BYPASSRLS, a member of the tables' owner)?
# Which governed roles does it hold, and which entry points may it run?  Does each pinned
# server-log setting hold its safe value (one boolean each, _logpin order)?  One round trip.
_LOGIN_CHECK = f"""
SELECT r.rolsuper, r.rolbypassrls,
       coalesce((SELECT pg_has_role(current_user, c.relowner, 'MEMBER')
                   FROM pg_class c WHERE c.oid = to_regclass('memory_entry')), false),
       ARRAY(SELECT g.rolname::text FROM pg_roles g
              WHERE g.rolname IN ('kagent_memory_runtime', 'kagent_memory_bridge',
                                  'kagent_memory_operator', 'kagent_memory_service')
                AND pg_has_role(current_user, g.oid, 'MEMBER')
              ORDER BY 1),
       ARRAY(SELECT DISTINCT p.proname::text FROM pg_proc p
              WHERE p.pronamespace = current_schema()::regnamespace
                AND p.proname LIKE 'memory\\_%' AND p.prosecdef
                AND has_function_privilege(p.oid, 'EXECUTE')),
       {SETTINGS_COLUMNS}
  FROM pg_roles r WHERE r.rolname = current_user
"""
_LOGIN_SETTINGS_AT = 5  # the column of _LOGIN_CHECK where the settings' booleans start

_LOGIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_$.-]{0,62}$")


def _policy_params(policy: MemoryPolicy, dimensions: Sequence[int] | None) -> list[Any]:
    p = policy
    dims = sorted(set(dimensions if dimensions is not None else [p.embedding_dimension]))
    if (p.embedding_dimension not in dims or not 1 <= len(dims) <= 8
            or not all(isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= 16000
                       for d in dims)):
        raise InvalidInput(ReasonCode.INVALID_POLICY)
    if p.prefetch_max_subqueries > 8:
        raise InvalidInput(ReasonCode.INVALID_POLICY)
    return [p.version, p.max_ttl, p.entry_cap, p.fact_max_bytes, p.consent_max_age,
            p.prefetch_max_subqueries, p.prefetch_subquery_max_bytes,
            p.explicit_ops_per_minute, p.explicit_burst, p.scope_ops_per_hour,
            p.autosave_every_user_turns, p.summariser_input_max_bytes, p.summariser_max_facts,
            p.search_limit, dims]


def _check_policy(row: tuple[Any, ...] | None, policy: MemoryPolicy) -> None:
    """Refuse unless ``row`` (GetMemoryPolicy) is ``policy`` and lists its dimension."""
    if row is None:
        raise InvalidInput(ReasonCode.POLICY_NOT_REGISTERED)
    mine = _policy_params(policy, [policy.embedding_dimension])
    if list(row[:-1]) != mine[:-1] or policy.embedding_dimension not in (row[-1] or ()):
        raise InvalidInput(ReasonCode.POLICY_MISMATCH)


def _login(value: object) -> str:
    if not isinstance(value, str) or not _LOGIN.fullmatch(value):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="login")
    return value


class _Registry(_StoreBase):
    """A part of ``GovernedMemoryStore``: the operator's registrations (a
    ``kagent_memory_operator`` login, or the owner's privileged store)."""

    async def register_policy(self, policy: MemoryPolicy, *,
                              dimensions: Sequence[int] | None = None) -> str:
        """Register ``policy`` (and the embedding ``dimensions`` a consent under it may
        record; default: its own).  Returns ``registered``, ``unchanged`` or ``replaced``
        (only while no consent refers to the version); ``policy_immutable`` otherwise."""
        if not isinstance(policy, MemoryPolicy):
            raise InvalidInput(ReasonCode.INVALID_POLICY)
        row = await self._one("register_policy", "RegisterMemoryPolicy",
                              _policy_params(policy, dimensions))
        assert row is not None
        return str(row[0])

    async def allow_policy(self, version: str, *, namespace: str | None = None,
                           agent: str | None = None) -> None:
        """Allow consents under ``version`` for one agent, every agent of ``namespace``, or
        (both ``None``) every agent."""
        if agent is not None:
            if namespace is None:
                raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="namespace")
            AgentIdentity(namespace=namespace, name=agent)  # validates
        await self._one("allow_policy", "AllowMemoryPolicy", [version, namespace, agent])

    async def disallow_policy(self, version: str, *, namespace: str | None = None,
                              agent: str | None = None) -> int:
        row = await self._one("disallow_policy", "DisallowMemoryPolicy",
                              [version, namespace, agent])
        return int(row[0]) if row else 0

    async def register_issuer(self, issuer: Issuer) -> str:
        """Register ``issuer`` in the database (its ``registration()``: scope kind, subject and
        scope-reference patterns, audience) and serve its principals from this store.  Returns
        ``registered``, ``unchanged`` or ``replaced`` (a disabled issuer registered again is
        enabled).  The owner or a ``kagent_memory_operator`` login."""
        if not isinstance(issuer, Issuer):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="issuer")
        row = await self._one("register_issuer", "RegisterMemoryIssuer",
                              issuer.registration().params())
        assert row is not None
        self._add_issuer(issuer)
        return str(row[0])

    async def configure(self, config: Configuration) -> list[tuple[str, str, str]]:
        """Register a configuration's policies (with their allowances) and issuers, each
        idempotently (``kagent_governed_memory.configuration``); serve its issuers from this
        store.  Returns ``(what, name, outcome)`` per policy and issuer."""
        from ..configuration import Configuration, apply_configuration

        if not isinstance(config, Configuration):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="configuration")
        done = await self._with_conn("configure", lambda conn: apply_configuration(conn, config))
        for issuer in config.issuers:
            self._add_issuer(issuer)
        return done

    async def disable_issuer(self, issuer: Issuer) -> bool:
        """Disable ``issuer``: its principals can no longer consent and their requests capture
        no generation; their scopes stay withdrawable and offboardable.  Whether an enabled
        issuer was disabled.  The owner or a ``kagent_memory_operator`` login."""
        if not isinstance(issuer, Issuer):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="issuer")
        row = await self._one("disable_issuer", "DisableMemoryIssuer",
                              [issuer.issuer_kind, issuer.issuer])
        return bool(row and row[0])

    async def registered_issuer(self, issuer: Issuer) -> tuple[IssuerRegistration, bool] | None:
        """What the database holds for ``issuer`` (and whether it is enabled), or ``None``."""
        if not isinstance(issuer, Issuer):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="issuer")
        row = await self._one("get_issuer", "GetMemoryIssuer",
                              [issuer.issuer_kind, issuer.issuer])
        if row is None:
            return None
        return IssuerRegistration(row[0], row[1], row[2], row[3], row[4], tuple(row[5])), row[6]

    async def register_runtime_login(self, login: str, agent: AgentIdentity) -> None:
        """Let database login ``login`` (a member of kagent_memory_runtime) serve ``agent``:
        it redeems only requests the bridge recorded for that agent."""
        if not isinstance(agent, AgentIdentity):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="agent")
        await self._one("register_login", "RegisterMemoryRuntimeLogin",
                        [_login(login), agent.namespace, agent.name])

    async def register_verifier_login(self, login: str) -> None:
        """Let ``login`` redeem requests nobody recorded: only for a caller that verifies the
        bridge's signatures itself (the kagent controller)."""
        await self._one("register_login", "RegisterMemoryVerifierLogin", [_login(login)])

    async def unregister_login(self, login: str) -> int:
        row = await self._one("unregister_login", "UnregisterMemoryLogin", [_login(login)])
        return int(row[0]) if row else 0
