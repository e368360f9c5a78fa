"""The development bridge: memory on a laptop, in a notebook, in ``adk web`` (issue 26).

In production the Matrix bridge signs a scope assertion per request with its Ed25519 key and
records the request; the agent runtime verifies it and redeems it.  ``DevBridge`` plays that
bridge locally, on a ``dev_database()`` only:

* a dev user ``@dev:<local_server>`` and a dev control room ``!dev-control-room:<local_server>``;
* an **ephemeral** Ed25519 key made in memory at ``open`` and never written anywhere, under the
  distinct issuer :data:`DEV_ISSUER` — a production runtime (its own keys and issuer) rejects
  every token it signs;
* the bridge's login (``db.bridge_dsn``) for ``!memory`` commands and request records, the
  runtime login (``db.runtime_dsn``, registered for the agent with the operator login) for
  ``bridge.runtime``, under the development policy :data:`DEV_POLICY`.

It refuses to open unless enabled (``enable=True`` or ``KGM_DEV_BRIDGE=1``), under kagent mode
(``KAGENT_MEMORY_URL``/``KAGENT_NAME``/``KAGENT_NAMESPACE``) and on a database dev-db did not
create; it announces itself with one WARNING.  No google-adk import here (``adk.dev`` has the
ADK plugin).
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Self

import psycopg
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ._embedded import BRIDGE_ROLE, DEV_MARKER, OPERATOR_ROLE, OWNER_ROLE, RUNTIME_ROLE
from ._logpin import pinned_dsn
from .assertion import sign_scope_assertion, verify_scope_assertion
from .control_room import ControlRoomCheck
from .controls import (
    ConfirmationRequired,
    ConsentReply,
    ErasureReply,
    ForgetReply,
    InspectReply,
    MemoryControls,
    Notice,
    StatusReply,
)
from .devdb import DevDatabase
from .errors import InvalidInput, ReasonCode
from .identity import AgentIdentity, MemoryScope, OriginKind, Principal, ScopeKey
from .keys import generate_private_key, key_id
from .models import MemoryRecord
from .policy import DEV_POLICY
from .request import RequestBinding, memory_request
from .store import GovernedMemoryStore

__all__ = ["DEV_ISSUER", "DEV_POLICY", "ENABLE_ENV", "KAGENT_ENV", "DevBridge", "dev_database_at",
           "refusal"]

DEV_ISSUER = "urn:kagent-governed-memory:dev-bridge"
ENABLE_ENV = "KGM_DEV_BRIDGE"
# Any of these in the environment means kagent mode: the development bridge stays off.
KAGENT_ENV = ("KAGENT_MEMORY_URL", "KAGENT_NAME", "KAGENT_NAMESPACE")
REQUEST_LIFETIME = timedelta(seconds=60)
_ALLOWED = ControlRoomCheck(allowed=True)
# The marker is dev-db's twice: on its database (which the database's owner could also write)
# and on the cluster's pg_default tablespace, which only a superuser can comment on (dev-db's
# `postgres`; never an application login, even one that owns its database).  The database's
# oid and the server's start time tell whether every login reaches the same database.
_MARKER_QUERY = ("SELECT shobj_description(d.oid, 'pg_database'), "
                 "shobj_description(t.oid, 'pg_tablespace'), d.oid::text, "
                 "pg_postmaster_start_time()::text FROM pg_database d, pg_tablespace t "
                 "WHERE d.datname = current_database() AND t.spcname = 'pg_default'")

logger = logging.getLogger("kagent_governed_memory.devbridge")


def refusal(*, enable: bool = False, environ: Mapping[str, str] | None = None) -> str | None:
    """The ``field`` of the refusal that applies before any database is touched, or ``None``:
    ``dev_bridge_enable`` (not enabled), ``dev_bridge_kagent`` (kagent mode)."""
    env = os.environ if environ is None else environ
    if not (enable or env.get(ENABLE_ENV, "") == "1"):
        return "dev_bridge_enable"
    # kagent mode is the process's: a replacement ``environ`` (tests) cannot hide it
    if any(e.get(name) for e in (env, os.environ) for name in KAGENT_ENV):
        return "dev_bridge_kagent"
    return None


def _single_local_socket(dsn: str) -> bool:
    """``dsn`` names one Unix socket directory and nothing libpq would dial instead (dev-db
    listens on its socket only): not several hosts (tried in turn, or at random), a TCP host,
    a ``hostaddr`` or a ``service``, nor ``PGHOSTADDR``/``PGSERVICE`` in the environment."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return False
    host, port = params.get("host"), str(params.get("port") or "")
    return (isinstance(host, str) and host.startswith("/") and "," not in host
            and "," not in port and not params.get("hostaddr") and not params.get("service")
            and not os.environ.get("PGHOSTADDR") and not os.environ.get("PGSERVICE"))


async def _dev_database_seen_by(dsn: str) -> tuple[str, str] | None:
    """The identity (database oid, server start) of the dev-db database ``dsn`` reaches, or
    ``None`` when it is not one (no marker, or a marker a non-superuser could have written)."""
    try:
        async with await psycopg.AsyncConnection.connect(pinned_dsn(dsn), autocommit=True,
                                                         connect_timeout=10) as conn:
            row = await (await conn.execute(_MARKER_QUERY)).fetchone()
    except (psycopg.Error, OSError, psycopg.ProgrammingError):
        return None
    if row is None or row[0] != DEV_MARKER or row[1] != DEV_MARKER:
        return None
    return str(row[2]), str(row[3])


async def _is_dev_database(*dsns: str) -> bool:
    """Every one of ``dsns`` reaches the same dev-db database."""
    seen = {await _dev_database_seen_by(dsn) for dsn in dsns}
    return len(seen) == 1 and None not in seen


def _login_of(dsn: str) -> str:
    try:
        user = conninfo_to_dict(dsn).get("user")
    except psycopg.ProgrammingError:
        user = None
    if not isinstance(user, str) or not user:
        raise InvalidInput(ReasonCode.DEV_BRIDGE_REFUSED, field="dev_bridge_database")
    return user


def dev_database_at(dsn: str, local_server: str) -> DevDatabase:
    """The logins of a running ``kagent-governed-memory dev-db`` from the DSN it printed
    (``KGM_DSN``): the same socket and database with dev-db's fixed login names.  Whether it
    is a dev-db database at all, ``DevBridge.open`` checks (the marker)."""
    if not isinstance(dsn, str) or not dsn:
        raise InvalidInput(ReasonCode.DEV_BRIDGE_REFUSED, field="dev_bridge_database")
    try:
        def as_login(user: str) -> str:
            return make_conninfo(dsn, user=user)

        return DevDatabase(dsn=dsn, operator_dsn=as_login(OPERATOR_ROLE),
                           owner_dsn=as_login(OWNER_ROLE), admin_dsn="",
                           local_server=local_server, runtime_dsn=as_login(RUNTIME_ROLE),
                           bridge_dsn=as_login(BRIDGE_ROLE))
    except psycopg.ProgrammingError:
        raise InvalidInput(ReasonCode.DEV_BRIDGE_REFUSED, field="dev_bridge_database") from None


class DevBridge:
    """A local stand-in for the Matrix bridge; create with ``await DevBridge.open(db, ...)``."""

    def __init__(self, db: DevDatabase, agent: AgentIdentity, *, runtime: GovernedMemoryStore,
                 bridge_store: GovernedMemoryStore) -> None:
        self.agent = agent
        self.local_server = db.local_server
        self.user = Principal(mxid=f"@dev:{db.local_server}", origin=OriginKind.NATIVE_LOCAL)
        self.room = f"!dev-control-room:{db.local_server}"
        self.key = ScopeKey(principal=self.user, agent=agent,
                            scope=MemoryScope.control_room(self.room))
        self.issuer = DEV_ISSUER
        self.runtime = runtime
        self._bridge_store = bridge_store
        self._private = generate_private_key()  # ephemeral: in memory only, never written
        self.kid = key_id(self._private)
        self.public_keys: dict[str, Ed25519PublicKey] = {self.kid: self._private.public_key()}
        self._controls = MemoryControls(bridge_store,
                                        agents={agent.name: agent},
                                        secret=secrets.token_bytes(32))

    def __repr__(self) -> str:
        return f"DevBridge(agent={self.agent!r}, scope={self.key.opaque_id}, kid={self.kid})"

    @classmethod
    async def open(cls, db: DevDatabase, *, agent: AgentIdentity, enable: bool = False,
                   environ: Mapping[str, str] | None = None) -> DevBridge:
        """Refuse (``InvalidInput(DEV_BRIDGE_REFUSED, field=...)``) unless enabled, outside
        kagent mode, on a dev-db database; register the runtime login for ``agent`` (operator
        login), open ``runtime`` (runtime login) and the bridge's store (bridge login)."""
        if not isinstance(db, DevDatabase):
            raise InvalidInput(ReasonCode.DEV_BRIDGE_REFUSED, field="dev_bridge_database")
        if not isinstance(agent, AgentIdentity):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="agent")
        refused = refusal(enable=enable, environ=environ)
        if refused is not None:
            raise InvalidInput(ReasonCode.DEV_BRIDGE_REFUSED, field=refused)
        dsns = (db.bridge_dsn, db.operator_dsn, db.runtime_dsn)
        if not (all(dsns) and all(_single_local_socket(d) for d in dsns)
                and await _is_dev_database(*dsns)):
            raise InvalidInput(ReasonCode.DEV_BRIDGE_REFUSED, field="dev_bridge_database")
        async with await GovernedMemoryStore.open(db.operator_dsn, local_server=db.local_server,
                                                  sweep_every=None, max_size=1) as operator:
            await operator.register_runtime_login(_login_of(db.runtime_dsn), agent)
        runtime = await GovernedMemoryStore.open(db.runtime_dsn, local_server=db.local_server,
                                                 policy=DEV_POLICY, sweep_every=None)
        try:
            bridge_store = await GovernedMemoryStore.open(
                db.bridge_dsn, local_server=db.local_server, policy=DEV_POLICY, sweep_every=None)
        except BaseException:
            await runtime.close()
            raise
        bridge = cls(db, agent, runtime=runtime, bridge_store=bridge_store)
        logger.warning(
            "development bridge enabled: issuer %s, an ephemeral signing key (kid %s) that "
            "exists only in this process, scope %s, on a dev-db database; never in production",
            DEV_ISSUER, bridge.kid, bridge.key.opaque_id)
        return bridge

    async def close(self) -> None:
        try:
            await self._bridge_store.close()
        finally:
            await self.runtime.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- commands ---------------------------------------------------------------------------

    async def command(self, text: str, *, confirm: bool = False) -> str:
        """Carry out one ``!memory`` command as the dev user in the dev control room and return
        one printable line (``inspect`` lists the entries).  ``confirm=True`` answers a
        confirmation request at once (the dev shortcut for the confirmation step)."""
        reply = await self._handle(text)
        if confirm and isinstance(reply, ConfirmationRequired):
            reply = await self._handle(f"{text.strip()} {reply.token}")
        return self._render(text, reply)

    async def _handle(self, text: str) -> object:
        return await self._controls.handle(text, sender=self.user, subject=self.user,
                                           room_id=self.room, room_check=lambda: _ALLOWED)

    def _render(self, text: str, reply: object) -> str:
        name = self.agent.name
        if isinstance(reply, ConsentReply):
            r = reply.receipt
            return f"memory on: {name}, purpose {r.purpose}, generation {r.generation}"
        if isinstance(reply, ErasureReply):
            r2 = reply.receipt
            state = "erased and verified" if r2.verified else "erased, NOT verified"
            what = "memory off" if reply.action == "off" else "forgot all"
            return f"{what}: {name}, {r2.deleted} entries {state}"
        if isinstance(reply, ForgetReply):
            state = "verified" if reply.receipt.verified else "NOT verified"
            entry = text.split()[-1] if text.split() else "?"
            if not reply.receipt.deleted:
                return f"forgot {entry}: not found"
            return f"forgot {entry}: {state}"
        if isinstance(reply, StatusReply):
            s = reply.status
            if not s.enabled:
                return f"status: {name}, memory off"
            return (f"status: {name}, memory on, purpose {s.purpose}, policy {s.policy_version}, "
                    f"generation {s.generation}, {s.entry_count} entries")
        if isinstance(reply, InspectReply):
            n = len(reply.entries)
            lines = [f"inspect: {n} {'entry' if n == 1 else 'entries'}"]
            lines += [f"- {e.id}: {e.text}" for e in reply.entries]
            if reply.next_cursor:
                lines.append(f"(more: !memory inspect {name} {reply.next_cursor})")
            return "\n".join(lines)
        if isinstance(reply, ConfirmationRequired):
            words = ["!memory", "forget" if reply.action == "forget_all" else reply.action, name]
            if reply.action == "forget_all":
                words.append("all")
            if reply.purpose:
                words.append(reply.purpose)
            return f"confirm with: {' '.join(words)} {reply.token}"
        if isinstance(reply, Notice) and reply.reason is ReasonCode.UNKNOWN_AGENT:
            return (f"refused: unknown_agent: this bridge serves {name} "
                    f"(!memory on {name} <purpose>)")
        if isinstance(reply, Notice):
            return f"refused: {reply.reason.value}"
        return "refused: command_invalid"

    async def entries(self) -> list[MemoryRecord]:
        """Every live entry of the dev scope (the inspect path, the bridge's login)."""
        out: list[MemoryRecord] = []
        cursor: str | None = None
        while True:
            page = await self._bridge_store.inspect(self.key, cursor=cursor)
            out.extend(page.entries)
            cursor = page.next_cursor
            if not cursor:
                return out

    # -- requests ---------------------------------------------------------------------------

    def sign(self, context_id: str) -> str:
        """A fresh assertion for one request (``context_id``: the ADK session id), 60 s."""
        return sign_scope_assertion(self.key, private_key=self._private, issuer=DEV_ISSUER,
                                    audience=[self.local_server], context_id=context_id,
                                    lifetime=REQUEST_LIFETIME, kid=self.kid)

    @asynccontextmanager
    async def request(self, session_id: str) -> AsyncIterator[RequestBinding]:
        """One request: mint an assertion (context id ``session_id``), record it with the
        bridge's login, and bind it (``memory_request``) as the runtime would verify it."""
        token = self.sign(session_id)
        assertion = verify_scope_assertion(token, public_keys=self.public_keys, issuer=DEV_ISSUER,
                                           agent=self.agent, context_id=session_id)
        await self._bridge_store.record_request(assertion)
        with memory_request(token, public_keys=self.public_keys, issuer=DEV_ISSUER,
                            context_id=session_id, agent=self.agent) as binding:
            yield binding
