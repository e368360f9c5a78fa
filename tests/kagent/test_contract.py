"""One contract, two implementations, three callers: every scenario runs on the library's store
in-process, on the patched kagent controller compiled from the Go series (``go_controller.py``)
called over raw HTTP, and on that controller through the library's own kagent-mode clients
(``KagentControllerStore``/``KagentBridgeStore``), each on its own PostgreSQL database, as EXECUTE-only logins: the application's (a member of
``kagent_memory_service``), and for offboarding the operator's (also ``kagent_memory_operator``);
the compiled controller's login is a member of ``kagent_memory_runtime``,
``kagent_memory_bridge`` and ``kagent_memory_operator``, as a deployment's serving login.

The controller is called as a deployment calls it (``contract_backends.HttpBackend``): bridge
routes with the bridge's ServiceAccount token, runtime routes with the agent's token and a
bridge-signed scope assertion.  The controller-only tests at the end check, through the compiled
HTTP server, that an unauthenticated caller, another agent and an agent on a bridge route are
refused with the right status and ``{"error": ...}`` body and change nothing in the database,
and that ``/search`` with ``vectors`` answers each query vector as a single search does.

The ``kagent-main`` backend runs the same scenarios through the library's clients over gRPC
against kagent MAIN's controller compiled from ``patches/kagent-main/``
(``go_controller_main.py``; main migrates its own schema, ``governed_memory``, which the
database checks read), each runtime call presenting a grant minted for its request through the
grants login.

Without Go or kagent's source the controller runs are reported as NOT RUN (skipped, with the
reason in pytest's summary); the library runs always run.  The scenarios use fresh keys, so the
controller serves one database for the whole module.
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

from support import go_controller_main
import httpx
import psycopg
import pytest
from support.contract_backends import (
    Backend,
    HttpBackend,
    KagentBackend,
    KagentMainBackend,
    LibraryBackend,
    Refused,
    scope_body,
)
from support.go_controller import (
    BRIDGE_SERVICE_ACCOUNT,
    Unavailable,
    agent_headers,
    bridge_headers,
    serve,
    service_account_token,
)
from psycopg.conninfo import make_conninfo

from kagent_governed_memory import (
    AgentIdentity,
    GovernedMemoryStore,
    HashingEmbedder,
    MemoryScope,
    OriginKind,
    Principal,
    ScopeKey,
)
from kagent_governed_memory.store import migrate
from kagent_governed_memory.dev import (
    APP_ROLE,
    CONTROLLER_ROLE,
    GRANTS_ROLE,
    OPERATOR_ROLE,
    OWNER_ROLE,
    prepare_app_database,
)
from kagent_governed_memory.scope import generate_private_key, public_key_pem

LOCAL = "example.org"
ISSUER = "https://bridge.example.org"
BRIDGE_KEY = generate_private_key()  # the bridge's; the controller gets the public key only
PURPOSE = "personal_preferences"
EMBED = HashingEmbedder()
# every backend but the library runs a compiled controller stand-in (docs/testing.md: markers)
COMPILED = pytest.mark.controller
BACKENDS = ["library", pytest.param("controller", marks=COMPILED),
            pytest.param("kagent", marks=COMPILED), pytest.param("kagent-main", marks=COMPILED)]


def fresh_key(tag: str, *, mxid: str | None = None, agent: str = "my-agent") -> ScopeKey:
    suffix = secrets.token_hex(5)
    return ScopeKey(principal=Principal(mxid=mxid or f"@{tag}{suffix}:{LOCAL}",
                                        origin=OriginKind.NATIVE_LOCAL),
                    agent=AgentIdentity(namespace="kagent", name=agent),
                    scope=MemoryScope.control_room(f"!{tag}{suffix}:{LOCAL}"))


def vec(text: str) -> list[float]:
    return EMBED.embed_one(text)


class Db:
    def __init__(self, app: str, owner: str, admin: str, operator: str, controller: str,
                 grants: str = "") -> None:
        self.app, self.owner, self.admin, self.operator = app, owner, admin, operator
        self.controller = controller  # the kagent controller's serving login
        self.grants = grants  # the A2A transport's part: mints runtime grants (kagent main)

    def scalar(self, sql: str, params: list[Any] | None = None) -> Any:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            row = conn.execute(sql, params or []).fetchone()
            return None if row is None else row[0]

    def rows_of(self, key: ScopeKey) -> int:
        return int(self.scalar(
            "SELECT count(*) FROM memory_entry e JOIN memory_scope s ON s.id = e.scope_id"
            " WHERE s.principal_subject = %s AND s.scope_ref = %s",
            [key.principal.mxid, key.scope.room_id]))

    def expire_now(self, entry_id: str) -> None:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute("SET session_replication_role = replica")  # past the immutability trigger
            conn.execute("UPDATE memory_entry SET expires_at = now() - interval '1 millisecond'"
                         " WHERE id = %s", [entry_id])


@pytest.fixture(scope="module", params=BACKENDS)
def backend_db(request: pytest.FixtureRequest, postgresql_proc: Any) -> Iterator[tuple[str, Db]]:
    name = f"c_{uuid.uuid4().hex[:16]}"
    base = make_conninfo(host=postgresql_proc.host, port=postgresql_proc.port,
                         user=postgresql_proc.user, dbname="postgres")
    prepare_app_database(base, name, template=postgresql_proc.template_dbname)
    main = request.param == "kagent-main"
    # kagent main keeps the governed tables in their own schema (its migration track, 0011)
    admin = make_conninfo(base, dbname=name, **(
        {"options": f"-c search_path={go_controller_main.SCHEMA},public"} if main else {}))
    db = Db(make_conninfo(base, user=APP_ROLE, dbname=name),
            make_conninfo(base, user=OWNER_ROLE, dbname=name), admin,
            make_conninfo(base, user=OPERATOR_ROLE, dbname=name),
            make_conninfo(base, user=CONTROLLER_ROLE, dbname=name),
            make_conninfo(base, user=GRANTS_ROLE, dbname=name))
    if not main:  # main's controller migrates with its own runner, as the owner
        asyncio.run(migrate(db.owner, local_server=LOCAL))
    yield request.param, db
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def controller_url(backend_db: tuple[str, Db]) -> Iterator[str | None]:
    kind, db = backend_db
    if kind == "library":
        yield None
        return
    if kind == "kagent-main":
        env = {"KAGENT_MEMORY_SCOPE_PUBLIC_KEYS": public_key_pem(BRIDGE_KEY).decode(),
               "KAGENT_MEMORY_SCOPE_ISSUER": ISSUER}
        try:
            with go_controller_main.serve(db.controller, migrate_dsn=db.owner, local_server=LOCAL,
                                          env=env) as process:
                yield process.url
        except Unavailable as exc:
            pytest.skip(f"KAGENT MAIN CONTROLLER NOT RUN: it cannot be compiled here ({exc})")
        return
    try:
        # the controller's login: the runtime, bridge and operator roles (not the service role)
        env = {"KAGENT_MEMORY_SCOPE_PUBLIC_KEYS": public_key_pem(BRIDGE_KEY).decode(),
               "KAGENT_MEMORY_SCOPE_ISSUER": ISSUER}
        with serve(db.controller, local_server=LOCAL, env=env) as url:
            yield url
    except Unavailable as exc:
        pytest.skip(f"GO VERIFICATION NOT RUN: the compiled controller is unavailable ({exc})")


@pytest.fixture
async def b(backend_db: tuple[str, Db], controller_url: str | None) -> AsyncIterator[Backend]:
    kind, db = backend_db
    if kind == "library":
        store = await GovernedMemoryStore.open(db.app, local_server=LOCAL, sweep_every=None)
        operator = await GovernedMemoryStore.open(db.operator, local_server=LOCAL,
                                                  sweep_every=None)
        try:
            yield LibraryBackend(store, operator)
        finally:
            await store.close()
            await operator.close()
    elif kind == "kagent-main":
        assert controller_url is not None

        def mint(key: ScopeKey, token: str) -> str:
            return go_controller_main.mint_grant(db.grants, namespace=key.agent.namespace,
                                                 name=key.agent.name, assertion=token)

        main = KagentMainBackend(
            controller_url, bridge_key=BRIDGE_KEY, issuer=ISSUER, local_server=LOCAL,
            agent_token=service_account_token,
            bridge_token=service_account_token(*BRIDGE_SERVICE_ACCOUNT),
            operator_token=service_account_token(*go_controller_main.OPERATOR_SERVICE_ACCOUNT),
            mint=mint)
        try:
            yield main
        finally:
            await main.aclose()
    elif kind == "kagent":
        assert controller_url is not None
        kagent = KagentBackend(controller_url, bridge_key=BRIDGE_KEY, issuer=ISSUER,
                               local_server=LOCAL, agent_token=service_account_token,
                               bridge_token=service_account_token(*BRIDGE_SERVICE_ACCOUNT))
        try:
            yield kagent
        finally:
            await kagent.aclose()
    else:
        assert controller_url is not None
        async with httpx.AsyncClient(base_url=controller_url, timeout=30) as client:
            yield HttpBackend(client, bridge_key=BRIDGE_KEY, issuer=ISSUER, local_server=LOCAL,
                              agent_headers=agent_headers, bridge_headers=bridge_headers)


@pytest.fixture
def db(backend_db: tuple[str, Db]) -> Db:
    return backend_db[1]


async def refused(coro: Any) -> str:
    with pytest.raises(Refused) as info:
        await coro
    return info.value.reason


# -- the scenarios ---------------------------------------------------------------------------


async def test_consent_before_collection(b: Backend, db: Db) -> None:
    key = fresh_key("c")
    assert await b.generation(key) is None
    assert await refused(b.save(key, 1, ["likes tea"], [vec("likes tea")])) == "consent_required"
    assert db.rows_of(key) == 0
    generation = await b.grant(key, PURPOSE)
    assert generation >= 1 and await b.generation(key) == generation
    ids = await b.save(key, generation, ["likes tea"], [vec("likes tea")])
    assert len(ids) == 1 and db.rows_of(key) == 1


async def test_generation_fence_under_a_racing_withdrawal(b: Backend, db: Db) -> None:
    key = fresh_key("f")
    generation = await b.grant(key, PURPOSE)
    await b.save(key, generation, ["first"], [vec("first")])

    async def late_save(i: int) -> str:
        try:
            await b.save(key, generation, [f"late {i}"], [vec(f"late {i}")])
            return "saved"
        except Refused as exc:
            return exc.reason

    outcomes = await asyncio.gather(b.withdraw(key), *(late_save(i) for i in range(8)))
    assert all(o in ("saved", "stale_generation", "consent_required") for o in outcomes[1:])
    # whatever raced, nothing survives the withdrawal and the old generation is dead
    assert db.rows_of(key) == 0
    assert await refused(b.save(key, generation, ["after"], [vec("after")])) in (
        "consent_required", "stale_generation")
    assert (await b.status(key))["enabled"] is False


async def test_per_entry_forget_is_verified(b: Backend, db: Db) -> None:
    key = fresh_key("p")
    generation = await b.grant(key, PURPOSE)
    tea, cat = await b.save(key, generation, ["likes green tea", "cat is called Miso"],
                            [vec("likes green tea"), vec("cat is called Miso")])
    erased = await b.forget(key, tea)
    assert (erased.deleted, erased.verified) == (1, True)
    hits = await b.search(key, generation, vec("likes green tea"), limit=5)
    assert [h[0] for h in hits] == [cat]
    assert [e[0] for e in await b.inspect(key)] == [cat]
    again = await b.forget(key, tea)
    assert (again.deleted, again.verified) == (0, True)
    assert db.rows_of(key) == 1


async def test_no_existence_oracle(b: Backend, db: Db) -> None:
    """Another scope's entry, an unknown id and a scope without consent all answer alike."""
    alice, mallory = fresh_key("a"), fresh_key("m")
    generation = await b.grant(alice, PURPOSE)
    [secret] = await b.save(alice, generation, ["spare key under the mat"],
                            [vec("spare key under the mat")])
    await b.grant(mallory, PURPOSE)
    answers = [await b.forget(mallory, secret), await b.forget(mallory, str(uuid.uuid4())),
               await b.forget(fresh_key("n"), secret)]
    assert {(a.deleted, a.verified) for a in answers} == {(0, True)}
    assert db.rows_of(alice) == 1


async def test_read_time_expiry_at_the_instant(b: Backend, db: Db) -> None:
    key = fresh_key("e")
    generation = await b.grant(key, PURPOSE)
    old, live = await b.save(key, generation, ["expires now", "still here"],
                             [vec("expires now"), vec("still here")])
    db.expire_now(old)  # not swept: only past its expiry by a millisecond
    hits = await b.search(key, generation, vec("expires now"), limit=5)
    assert [h[0] for h in hits] == [live]
    assert [e[0] for e in await b.inspect(key)] == [live]
    assert db.rows_of(key) == 2  # physically still there, unreadable all the same


async def test_cap_refusal(b: Backend, db: Db) -> None:
    key = fresh_key("k")
    generation = await b.grant(key, PURPOSE)
    facts = [f"fact number {i}" for i in range(100)]
    for i in range(0, 100, 25):
        await b.save(key, generation, facts[i:i + 25], [vec(f) for f in facts[i:i + 25]])
    assert await refused(b.save(key, generation, ["one too many"],
                                [vec("one too many")])) == "entry_cap_reached"
    assert db.rows_of(key) == 100


async def test_withdraw_disables_first_and_fails_closed(b: Backend, db: Db) -> None:
    key = fresh_key("w")
    generation = await b.grant(key, PURPOSE)
    await b.save(key, generation, ["a", "b"], [vec("a"), vec("b")])
    erased = await b.withdraw(key)
    assert (erased.deleted, erased.verified) == (2, True)
    assert await b.generation(key) is None
    assert await refused(b.search(key, generation, vec("a"))) in ("consent_required",
                                                                   "stale_generation")
    status = await b.status(key)
    assert status["enabled"] is False and status["entry_count"] == 0
    again = await b.grant(key, PURPOSE)
    assert again > generation
    assert await refused(b.save(key, generation, ["old"], [vec("old")])) == "stale_generation"
    assert (await b.withdraw(key)).verified  # idempotent


async def test_offboarding_leaves_nothing_and_blocks(b: Backend, db: Db) -> None:
    mxid = f"@off{secrets.token_hex(5)}:{LOCAL}"
    keys = [fresh_key("o", mxid=mxid, agent=agent) for agent in ("agent-a", "agent-b")]
    for key in keys:
        generation = await b.grant(key, PURPOSE)
        await b.save(key, generation, ["private fact"], [vec("private fact")])
    report = await b.offboard(keys[0].principal)
    assert sorted(report) == [("cleared", 1), ("cleared", 1)]
    assert db.scalar("SELECT count(*) FROM memory_scope WHERE principal_subject = %s", [mxid]) == 0
    assert await refused(b.grant(keys[0], PURPOSE)) == "principal_offboarded"


# -- the controller is a boundary (compiled HTTP server only) --------------------------------

GOVERNED = "/api/memories/governed"
_STATE = ("memory_scope", "memory_entry", "memory_audit", "memory_assertion_use",
          "memory_admission_bucket")


def _state(db: Db) -> dict[str, int]:
    return {table: int(db.scalar(f"SELECT count(*) FROM {table}")) for table in _STATE}


@pytest.fixture
def controller(backend_db: tuple[str, Db], controller_url: str | None) -> Iterator[str]:
    assert backend_db[0] == "controller" and controller_url is not None
    yield controller_url


# The library has no callers to authenticate: these run on the compiled controller only.
controller_only = pytest.mark.parametrize(
    "backend_db", [pytest.param("controller", marks=COMPILED)], indirect=True)


async def _seeded(url: str) -> tuple[ScopeKey, HttpBackend, httpx.AsyncClient]:
    client = httpx.AsyncClient(base_url=url, timeout=30)
    backend = HttpBackend(client, bridge_key=BRIDGE_KEY, issuer=ISSUER, local_server=LOCAL,
                          agent_headers=agent_headers, bridge_headers=bridge_headers)
    key = fresh_key("z")
    generation = await backend.grant(key, PURPOSE)
    await backend.save(key, generation, ["a private fact"], [vec("a private fact")])
    return key, backend, client


def _body(key: ScopeKey, route: str) -> dict[str, Any]:
    if route == "offboard":
        return {"principal": {"issuer": key.principal.issuer_kind, "subject": key.principal.subject}}
    return {"scope": scope_body(key), "purpose": PURPOSE, "generation": 1, "units": 1,
            "entry_id": str(uuid.uuid4()), "vector": vec("a private fact"), "page_size": 5,
            "items": [{"content": "injected", "vector": vec("injected")}]}


RUNTIME = ["generation", "admit", "entries", "search", "forget"]
BRIDGE = ["consent", "status", "inspect", "forget-all", "withdraw", "offboard"]


@controller_only
@pytest.mark.parametrize("credential", ["none", "forged", "not-bearer"])
async def test_unauthenticated_calls_are_refused_and_change_nothing(
        controller: str, db: Db, credential: str) -> None:
    key, backend, client = await _seeded(controller)
    headers = {"none": {}, "forged": {"Authorization": "Bearer forged-token"},
               "not-bearer": {"Authorization": "Basic a2FnZW50OmthZ2VudA=="}}[credential]
    before = _state(db)
    # The listener throttles failed authentications per source address (10, then 429): each
    # route is called from a loopback address of its own, so every answer is the refusal itself.
    offset = {"none": 0, "forged": 20, "not-bearer": 40}[credential]
    try:
        for i, route in enumerate(RUNTIME + BRIDGE):
            extra = {"x-kagent-memory-scope": backend.assertion(key)} if route in RUNTIME else {}
            async with _client_from(controller, f"127.0.1.{offset + i + 1}") as source:
                r = await source.post(f"{GOVERNED}/{route}", json=_body(key, route),
                                      headers={**headers, **extra,
                                               "X-Agent-Name": "kagent__NS__my_agent"})
            assert (r.status_code, r.json()) == (401, {"error": "unauthenticated"}), route
    finally:
        await client.aclose()
    assert _state(db) == before
    assert db.rows_of(key) == 1


def _client_from(url: str, address: str) -> httpx.AsyncClient:
    """A client whose connections come from ``address`` (any 127/8 address on loopback)."""
    return httpx.AsyncClient(base_url=url, timeout=30,
                             transport=httpx.AsyncHTTPTransport(local_address=address))


@controller_only
async def test_failed_authentications_are_throttled_per_source(controller: str) -> None:
    """Ten failed authentications from one address are answered 401; then that address gets
    429 ``rate_limited`` (no TokenReview) while another address is still answered 401, and a
    token already reviewed as valid keeps working from the throttled address."""
    forged = {"Authorization": "Bearer forged-token", "X-Agent-Name": "kagent__NS__my_agent"}
    body = {"scope": scope_body(fresh_key("t"))}
    async with _client_from(controller, "127.0.2.1") as noisy, \
            _client_from(controller, "127.0.2.2") as other:
        r = await other.post(f"{GOVERNED}/status", json=body, headers=bridge_headers())
        assert r.status_code not in (401, 429), r.text  # the bridge token, now reviewed
        answers = [(r.status_code, r.json()) for r in
                   [await noisy.post(f"{GOVERNED}/status", json=body, headers=forged)
                    for _ in range(12)]]
        assert answers[:10] == [(401, {"error": "unauthenticated"})] * 10
        assert (429, {"error": "rate_limited"}) in answers[10:]
        r = await other.post(f"{GOVERNED}/status", json=body, headers=forged)
        assert (r.status_code, r.json()) == (401, {"error": "unauthenticated"})
        r = await noisy.post(f"{GOVERNED}/status", json=body, headers=bridge_headers())
        assert r.status_code != 429 and r.status_code != 401, r.text


@controller_only
async def test_another_agents_scope_is_refused_and_changes_nothing(controller: str,
                                                                    db: Db) -> None:
    key, backend, client = await _seeded(controller)  # my-agent's scope
    before = _state(db)
    try:
        for route in RUNTIME:
            # other-agent's own, valid credentials, on my-agent's scope (with a valid assertion
            # for that scope: the caller's identity, not the assertion, is what is refused)
            r = await client.post(f"{GOVERNED}/{route}", json=_body(key, route),
                                  headers={**agent_headers("kagent", "other-agent"),
                                           "x-kagent-memory-scope": backend.assertion(key)})
            assert (r.status_code, r.json()) == (403, {"error": "agent_mismatch"}), route
            # and my-agent's token with other-agent's name: not the agent that token runs
            r = await client.post(f"{GOVERNED}/{route}", json=_body(key, route),
                                  headers={**agent_headers("kagent", "my-agent"),
                                           "X-Agent-Name": "kagent__NS__other_agent",
                                           "x-kagent-memory-scope": backend.assertion(key)})
            assert (r.status_code, r.json()) == (403, {"error": "forbidden"}), route
    finally:
        await client.aclose()
    assert _state(db) == before
    assert db.rows_of(key) == 1


@controller_only
async def test_agent_tokens_are_refused_on_bridge_routes_and_change_nothing(controller: str,
                                                                             db: Db) -> None:
    key, _backend, client = await _seeded(controller)
    before = _state(db)
    try:
        for route in BRIDGE:
            r = await client.post(f"{GOVERNED}/{route}", json=_body(key, route),
                                  headers=agent_headers("kagent", "my-agent"))
            assert (r.status_code, r.json()) == (403, {"error": "forbidden"}), route
        for route in RUNTIME:  # and the bridge's token on the agent runtime routes
            if route == "forget":  # the bridge forgets for its subject: below
                continue
            r = await client.post(f"{GOVERNED}/{route}", json=_body(key, route),
                                  headers=bridge_headers())
            assert (r.status_code, r.json()) == (403, {"error": "forbidden"}), route
    finally:
        await client.aclose()
    assert _state(db) == before
    assert db.rows_of(key) == 1
    assert db.scalar("SELECT enabled FROM memory_scope WHERE principal_subject = %s",
                     [key.principal.subject]) is True


# -- several query vectors in one request ---------------------------------------------------


async def _search(client: httpx.AsyncClient, backend: HttpBackend, key: ScopeKey,
                  generation: int, **query: Any) -> httpx.Response:
    return await client.post(f"{GOVERNED}/search",
                             headers=await backend.request_headers("search", key, generation),
                             json={"scope": scope_body(key), "generation": generation,
                                   "limit": 5, **query})


@controller_only
async def test_vectors_answer_each_query_as_a_single_search(controller: str, db: Db) -> None:
    key, backend, client = await _seeded(controller)
    try:
        generation = await backend.generation(key)
        assert generation is not None
        await backend.save(key, generation, ["likes green tea", "works on kagent"],
                           [vec("likes green tea"), vec("works on kagent")])
        queries = [vec("likes green tea"), vec("works on kagent")]
        singles = []
        for query in queries:
            r = await _search(client, backend, key, generation, vector=query)
            assert r.status_code == 200, r.text
            singles.append(r.json()["memories"])
        r = await _search(client, backend, key, generation, vectors=queries)
        assert r.status_code == 200, r.text
        # element-wise: the same ids, contents, times and scores, in the same order
        assert r.json() == {"results": singles}
    finally:
        await client.aclose()
    assert [s[0]["content"] for s in singles] == ["likes green tea", "works on kagent"]
    assert [len(s) for s in singles] == [3, 3]


@controller_only
async def test_more_than_eight_vectors_are_refused_and_change_nothing(controller: str,
                                                                      db: Db) -> None:
    key, backend, client = await _seeded(controller)
    try:
        generation = await backend.generation(key)
        assert generation is not None
        before = _state(db)
        r = await _search(client, backend, key, generation,
                          vectors=[vec(f"query {i}") for i in range(9)])
        assert (r.status_code, r.json()) == (400, {"error": "invalid_argument"})
    finally:
        await client.aclose()
    assert _state(db) == before


@controller_only
async def test_the_bridge_forgets_one_entry_without_an_assertion(controller: str, db: Db) -> None:
    key, backend, client = await _seeded(controller)
    try:
        [(entry, _)] = await backend.inspect(key)
        r = await client.post(f"{GOVERNED}/forget", headers=bridge_headers(),
                              json={"scope": scope_body(key), "entry_id": entry})
        assert r.status_code == 200 and (r.json()["deleted"], r.json()["verified"]) == (1, True)
        assert db.rows_of(key) == 0
        # an agent's token still needs the request's assertion
        r = await client.post(f"{GOVERNED}/forget", headers=agent_headers("kagent", "my-agent"),
                              json={"scope": scope_body(key), "entry_id": entry})
        assert (r.status_code, r.json()) == (403, {"error": "assertion_missing"})
    finally:
        await client.aclose()


# -- every call bound to its redemption (migration 000011) ------------------------------------

_BOUND_ROUTES = ["admit", "entries", "search", "forget"]


def _bound_body(key: ScopeKey, generation: int, entry: str) -> dict[str, Any]:
    return {"scope": scope_body(key), "generation": generation, "units": 1, "entry_id": entry,
            "vector": vec("a private fact"), "limit": 5,
            "items": [{"content": "injected", "vector": vec("injected")}]}


async def _bound_answers(client: httpx.AsyncClient, key: ScopeKey, token: str, entry: str,
                         generations: list[int]) -> list[tuple[str, int, int, Any]]:
    out = []
    for route in _BOUND_ROUTES:
        for generation in generations:
            r = await client.post(f"{GOVERNED}/{route}", json=_bound_body(key, generation, entry),
                                  headers={**agent_headers("kagent", "my-agent"),
                                           "x-kagent-memory-scope": token})
            out.append((route, generation, r.status_code, r.json()))
    return out


@controller_only
async def test_a_redeemed_assertion_serves_only_the_generation_it_captured(controller: str,
                                                                           db: Db) -> None:
    """Redeem assertion A at generation g; then /admit, /entries, /search and /forget with A
    and any other generation are refused alike (request_not_redeemed), nothing is read or
    written, and the answer does not change when consent moves on."""
    key, backend, client = await _seeded(controller)
    try:
        token, g = await backend.redeem(key)
        assert g is not None
        [(entry, _)] = await backend.inspect(key)
        guesses = [g + 1, g - 1, 0, 99]
        before = _state(db)
        answers = await _bound_answers(client, key, token, entry, guesses)
        assert {(s, b["error"]) for *_, s, b in answers} == {(403, "request_not_redeemed")}
        assert _state(db) == before and db.rows_of(key) == 1
        # an assertion never redeemed, with the scope's real generation
        never = await _bound_answers(client, key, backend.assertion(key), entry, [g])
        assert {(s, b["error"]) for *_, s, b in never} == {(403, "request_not_redeemed")}
        assert _state(db) == before
        # consent moves on (forget-all advances the generation): the same answers
        await backend._post("forget-all", key)
        assert (await backend.status(key))["generation"] == g + 1
        moved = await _bound_answers(client, key, token, entry, guesses)
        assert [a[2:] for a in moved] == [a[2:] for a in answers]
        # the redeemed generation itself is now stale, as before
        r = await client.post(f"{GOVERNED}/search", json=_bound_body(key, g, entry),
                              headers={**agent_headers("kagent", "my-agent"),
                                       "x-kagent-memory-scope": token})
        assert (r.status_code, r.json()) == (409, {"error": "stale_generation"})
    finally:
        await client.aclose()


@controller_only
async def test_a_redemption_past_its_work_until_serves_nothing(controller: str, db: Db) -> None:
    key, backend, client = await _seeded(controller)
    try:
        token, g = await backend.redeem(key)
        assert g is not None
        [(entry, _)] = await backend.inspect(key)
        assert db.scalar("SELECT count(*) FROM memory_assertion_use"
                         " WHERE generation = %s AND work_until = forget_at", [g]) >= 1
        with psycopg.connect(db.owner, autocommit=True) as conn:  # the owner's clock hand
            conn.execute("UPDATE memory_assertion_use SET work_until = now() - interval '1 s'"
                         " WHERE work_until > now()")
        before = _state(db)
        answers = await _bound_answers(client, key, token, entry, [g])
        assert {(s, b["error"]) for *_, s, b in answers} == {(403, "request_not_redeemed")}
        assert _state(db) == before and db.rows_of(key) == 1
    finally:
        await client.aclose()


@controller_only
async def test_an_expired_assertion_still_serves_its_redeemed_request(controller: str,
                                                                       db: Db) -> None:
    """Background work (an auto-save) after the request's assertion expired: served until
    work_until (exp + 120 s); /generation still refuses the expired assertion."""
    import time
    from datetime import timedelta

    from kagent_governed_memory.scope import sign_scope_assertion
    key, backend, client = await _seeded(controller)
    try:
        token = sign_scope_assertion(key, private_key=BRIDGE_KEY, issuer=ISSUER,
                                     audience=[LOCAL], context_id="ctx-autosave",
                                     lifetime=timedelta(seconds=1))
        headers = {**agent_headers("kagent", "my-agent"), "x-kagent-memory-scope": token}
        r = await client.post(f"{GOVERNED}/generation", json={"scope": scope_body(key)},
                              headers=headers)
        assert r.status_code == 200, r.text
        g = r.json()["generation"]
        time.sleep(7.0)  # past exp and the controller's 5 s leeway
        r = await client.post(f"{GOVERNED}/entries", headers=headers, json={
            "scope": scope_body(key), "generation": g,
            "items": [{"content": "cycles to work", "vector": vec("cycles to work")}]})
        assert r.status_code == 201, r.text
        assert db.rows_of(key) == 2
        late = backend.assertion(key)  # an unredeemed assertion is not helped by the allowance
        r = await client.post(f"{GOVERNED}/entries", headers={**headers,
                                                              "x-kagent-memory-scope": late},
                              json={"scope": scope_body(key), "generation": g,
                                    "items": [{"content": "x", "vector": vec("x")}]})
        assert (r.status_code, r.json()) == (403, {"error": "request_not_redeemed"})
    finally:
        await client.aclose()


# -- metering ----------------------------------------------------------------------------------


def _counters(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("kagent_governed_memory_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


@controller_only
async def test_the_controller_meters_operations_without_ids_or_content(controller: str,
                                                                       db: Db) -> None:
    """The governed counters on the controller's metrics registry move with the calls, and
    the whole /metrics page names no principal, room, agent, assertion or memory content."""
    sentinel = f"sentinel-{secrets.token_hex(6)}"
    key, backend, client = await _seeded(controller)
    try:
        before = _counters((await client.get("/metrics")).text)
        token, g = await backend.redeem(key)
        r = await client.post(f"{GOVERNED}/admit", headers=await backend.request_headers(
            "admit", key, g), json={"scope": scope_body(key), "generation": g, "units": 2})
        assert r.status_code == 200, r.text
        await backend.save(key, g, [f"{sentinel} one", f"{sentinel} two"],
                           [vec("one"), vec("two")])
        hits = await backend.search(key, g, vec(sentinel), limit=5)
        assert await refused(backend.save(key, g + 7, [sentinel], [vec(sentinel)])) \
            == "request_not_redeemed"
        page = (await client.get("/metrics")).text
    finally:
        await client.aclose()
    after = _counters(page)

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    ops = "kagent_governed_memory_operations_total"
    assert delta(f'{ops}{{operation="admit",outcome="ok"}}') == 1
    assert delta(f'{ops}{{operation="save",outcome="ok"}}') == 1
    assert delta(f'{ops}{{operation="search",outcome="ok"}}') == 1
    assert delta(f'{ops}{{operation="save",outcome="request_not_redeemed"}}') == 1
    assert delta(f'{ops}{{operation="generation",outcome="ok"}}') >= 1
    assert delta('kagent_governed_memory_admitted_units_total{explicit="false"}') == 2
    assert delta("kagent_governed_memory_entries_saved_total") == 2
    assert delta("kagent_governed_memory_search_results_total") == len(hits) == 3
    for secret in (sentinel, key.principal.subject, key.scope.room_id or "!", "my-agent",
                   key.opaque_id, token.split(".")[1][:16]):
        assert secret not in page, secret


# -- the consent's embedding dimension follows the Agent ------------------------------------


@controller_only
async def test_a_consent_follows_its_agents_embedding_dimension(controller: str, db: Db) -> None:
    """bge-agent's memory.embeddingDimension is 1024: the bridge's consent is recorded at 1024,
    1024-d vectors are saved and searched, 768-d ones refused and nothing stored by them."""
    client = httpx.AsyncClient(base_url=controller, timeout=30)
    backend = HttpBackend(client, bridge_key=BRIDGE_KEY, issuer=ISSUER, local_server=LOCAL,
                          agent_headers=agent_headers, bridge_headers=bridge_headers)
    key = fresh_key("d", agent="bge-agent")
    wide = [((i * 7919) % 97 - 48) / 48.0 for i in range(1024)]
    try:
        g = await backend.grant(key, PURPOSE)
        assert db.scalar("SELECT embedding_dimension FROM memory_scope"
                         " WHERE principal_subject = %s", [key.principal.subject]) == 1024
        [entry] = await backend.save(key, g, ["uses a 1024-d embedder"], [wide])
        assert [h[0] for h in await backend.search(key, g, wide)] == [entry]
        assert await refused(backend.save(key, g, ["768"], [vec("768")])) == "invalid_embedding"
        assert await refused(backend.search(key, g, vec("768"))) == "invalid_embedding"
        assert db.rows_of(key) == 1
        # an Agent without the field: 768, as before
        other = fresh_key("d")
        g2 = await backend.grant(other, PURPOSE)
        assert await refused(backend.save(other, g2, ["wide"], [wide])) == "invalid_embedding"
        assert await backend.save(other, g2, ["narrow"], [vec("narrow")])
    finally:
        await client.aclose()
