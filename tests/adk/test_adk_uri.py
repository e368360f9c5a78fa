"""google-adk's memory-service URI mechanism: ``--memory_service_uri=kgm+postgresql://…``.

The service is built the way ``adk web``/``adk api_server`` build one (the registry, or a
``services.yaml`` beside the agent), before any event loop; its store opens on first use in the
loop that uses it; bad URIs are refused with a hint and without echoing the URI.
"""

from __future__ import annotations

import pytest
from support.scopes import make_key
from google.adk.cli import service_registry
from google.adk.cli.service_registry import ServiceRegistry

from kagent_governed_memory import GovernanceError, InvalidInput, ReasonCode
from kagent_governed_memory.adk.uri import SCHEME, UriGovernedMemoryService, register


def _uri(dsn: str, **params: str) -> str:
    """The test database's login as a kgm+postgresql URI: libpq keywords (host may be a socket
    directory) ride in the query, beside the service's own parameters."""
    from urllib.parse import urlencode

    from psycopg.conninfo import conninfo_to_dict

    d = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    dbname = d.pop("dbname")
    query = {**d, "local_server": "example.org", "agent": "kagent/my-agent",
             "embedder": "hashing", "span_content": "ignore", **params}
    return f"{SCHEME}:///{dbname}?{urlencode(query)}"


async def test_registered_scheme_builds_a_lazily_opened_service(store, database):
    key = make_key()
    granted = await store.grant(key, purpose="personal_preferences")
    registry = ServiceRegistry()
    register(registry)
    service = registry.create_memory_service(_uri(database.dsn, sslmode="disable"))
    assert isinstance(service, UriGovernedMemoryService)
    assert (service.agent.namespace, service.agent.name) == ("kagent", "my-agent")
    assert service.embedder.dimension == service.store.policy.embedding_dimension == 768
    assert service.store._pool is None  # nothing opened before the server's loop runs
    try:
        assert await service.store.generation(key) == granted.generation  # opens here
        assert service.store._pool is not None
    finally:
        await service.aclose()
        await service.store.close()


async def test_services_yaml_beside_the_agent(tmp_path, database, monkeypatch):
    (tmp_path / "services.yaml").write_text(
        "services:\n"
        f"  - scheme: {SCHEME}\n"
        "    type: memory\n"
        "    class: kagent_governed_memory.adk.uri.UriGovernedMemoryService\n")
    monkeypatch.setattr(service_registry, "_service_registry_instance", None)
    service_registry.load_services_module(str(tmp_path))
    service = service_registry.get_service_registry().create_memory_service(
        _uri(database.dsn, embedder="hashing", dimension="1024"))
    assert isinstance(service, UriGovernedMemoryService)
    assert service.store.policy.embedding_dimension == 1024
    assert service.store._pool is None


async def test_a_privileged_login_is_refused_on_first_use(store, database):
    service = UriGovernedMemoryService(_uri(database.owner_dsn))  # `store` migrated it
    try:
        with pytest.raises(GovernanceError) as err:
            await service.store.generation(make_key())
        assert err.value.reason is ReasonCode.PRIVILEGED_ROLE
        assert service.store._pool is None  # refused, nothing left open
    finally:
        await service.store.close()


@pytest.mark.parametrize("change, field", [
    ({"agent": "my-agent"}, "uri_agent"),
    ({"local_server": ""}, "uri_local_server"),
    ({"embedder": "", "embedding_model": "bge-m3"}, "embedding_url"),
    ({"dimension": "many"}, "dimension"),
    ({"dimension": "0"}, "dimension"),
    ({"span_content": "sometimes"}, "span_content"),
])
def test_bad_uris_are_refused_with_a_hint_and_no_echo(change, field):
    secret = "s3ntinel-password"
    uri = _uri(f"host=db port=5432 user=app password={secret} dbname=memory", **change)
    with pytest.raises(InvalidInput) as err:
        UriGovernedMemoryService(uri)
    assert err.value.ids.get("field") == field
    text = str(err.value) + repr(err.value)
    assert ":" in str(err.value)  # the reason code, then what to do
    assert secret not in text and "memory" not in text.split(":", 1)[0]


def test_another_scheme_is_refused():
    with pytest.raises(InvalidInput) as err:
        UriGovernedMemoryService("postgresql://app@db/memory?local_server=example.org")
    assert err.value.ids.get("field") == "memory_service_uri"


async def test_kagent_mode_uri_builds_the_service_on_the_controller(tmp_path):
    from kagent_governed_memory import KagentControllerStore
    from kagent_governed_memory.adk.uri import KAGENT_SCHEMES

    token = tmp_path / "token"
    token.write_text("a-service-account-token\n")
    registry = ServiceRegistry()
    register(registry)
    for scheme in KAGENT_SCHEMES:
        service = registry.create_memory_service(
            f"{scheme}://kagent-controller.kagent:8085?local_server=example.org"
            f"&agent=kagent/my-agent&embedder=hashing&span_content=ignore"
            f"&token_file={token}")
        store = service.store
        assert isinstance(store, KagentControllerStore)
        assert store.agent == service.agent and store.local_server == "example.org"
        assert store._http._base.startswith(scheme.removeprefix("kgm+") + "://kagent-controller")
        assert store._http._tokens.get() == "a-service-account-token"
        await store.aclose()


async def test_kagent_main_grpc_uri_builds_the_service_on_the_grpc_transport():
    pytest.importorskip("grpc", reason="GRPC URI NOT RUN: the kagent-main extra is missing")
    from kagent_governed_memory import KagentControllerStore
    from kagent_governed_memory.adk.uri import GRPC_SCHEMES

    registry = ServiceRegistry()
    register(registry)
    for scheme in GRPC_SCHEMES:
        service = registry.create_memory_service(
            f"{scheme}://kagent-controller.kagent:8084?local_server=example.org"
            f"&agent=kagent/my-agent&embedder=hashing&span_content=ignore")
        store = service.store
        assert isinstance(store, KagentControllerStore)
        assert type(store._http).__name__ == "GrpcTransport" and store._http.sends_grant
        assert store._http._target == "kagent-controller.kagent:8084"
        assert store._http._secure is (scheme == "kgm+grpcs")
        await store.aclose()
    with pytest.raises(InvalidInput) as info:  # the runtime presents a grant, never a token
        UriGovernedMemoryService("kgm+grpc://c:8084?local_server=example.org&agent=kagent/a"
                                 "&embedder=hashing&token_file=/t")
    assert info.value.ids.get("field") == "token"


@pytest.mark.parametrize("uri", [
    "kgm+http://user:secret@kagent-controller:8085?local_server=example.org&agent=kagent/a"
    "&embedder=hashing",  # no credentials in a controller URI
    "kgm+http://kagent-controller:8085?local_server=example.org&agent=kagent/a"
    "&embedder=hashing&sslmode=disable",  # libpq options mean the wrong scheme
    "kgm+http:///?local_server=example.org&agent=kagent/a&embedder=hashing",  # no host
])
def test_bad_kagent_mode_uris_are_refused_without_echo(uri):
    with pytest.raises(InvalidInput) as info:
        UriGovernedMemoryService(uri)
    assert info.value.ids.get("field") == "memory_service_uri"
    assert "secret" not in str(info.value) and "kagent-controller" not in repr(info.value)
