"""The governed listener's token file: kagent mode clients default to the governed-audience
mount (or ``KAGENT_MEMORY_TOKEN_FILE``), never kagent's A2A token (audience "kagent")."""

from __future__ import annotations

import pytest

from kagent_governed_memory.kagent import KagentBridgeStore
from kagent_governed_memory.kagent import _transport as _http


def test_default_is_the_governed_mount(monkeypatch):
    monkeypatch.delenv("KAGENT_MEMORY_TOKEN_FILE", raising=False)
    assert _http.default_token_file() == "/var/run/secrets/kagent-governed-memory/token"
    assert _http.default_token_file() != _http.KAGENT_TOKEN_PATH


def test_env_overrides_the_default(monkeypatch, tmp_path):
    token = tmp_path / "token"
    token.write_text("governed-token\n")
    monkeypatch.setenv("KAGENT_MEMORY_TOKEN_FILE", str(token))
    assert _http.TokenSource(None, None).get() == "governed-token"


def test_explicit_file_wins(monkeypatch, tmp_path):
    env_file, explicit = tmp_path / "env", tmp_path / "explicit"
    env_file.write_text("from-env")
    explicit.write_text("from-argument")
    monkeypatch.setenv("KAGENT_MEMORY_TOKEN_FILE", str(env_file))
    assert _http.TokenSource(None, explicit).get() == "from-argument"


def test_kagent_token_is_not_read_by_default(monkeypatch, tmp_path):
    kagent_token = tmp_path / "kagent-token"
    kagent_token.write_text("kagent-a2a-token")
    monkeypatch.setattr(_http, "KAGENT_TOKEN_PATH", str(kagent_token))
    monkeypatch.setenv("KAGENT_MEMORY_TOKEN_FILE", str(tmp_path / "absent"))
    assert _http.TokenSource(None, None).get() == ""


@pytest.mark.parametrize("store", [KagentBridgeStore])
def test_bridge_store_reads_the_governed_token_file(store, monkeypatch, tmp_path):
    token = tmp_path / "token"
    token.write_text("bridge-governed-token")
    monkeypatch.setenv("KAGENT_MEMORY_TOKEN_FILE", str(token))
    client = store("http://kagent-controller.kagent:8085", local_server="example.org")
    assert client._http._tokens.get() == "bridge-governed-token"  # noqa: SLF001
