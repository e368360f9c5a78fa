"""Kagent-mode errors name their real cause (issue 26, item 5): each missing setting of
``KagentControllerStore.from_env()`` names itself, an unreadable token file says so (not "the
controller did not accept"), the CLI's ``--controller`` with nothing listening says the
controller could not be reached (not the database), and keys from the environment name the
variable the caller asked for.  No message carries a value or a path."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kagent_governed_memory import InvalidInput, KagentControllerStore, ReasonCode
from kagent_governed_memory.kagent import KagentBridgeStore
from kagent_governed_memory.scope import (
    generate_private_key,
    private_key_from_env,
    public_key_pem,
    public_keys_from_env,
)

from support.scopes import make_key

FULL = {
    "KAGENT_MEMORY_URL": "http://127.0.0.1:9",
    "KAGENT_NAMESPACE": "kagent",
    "KAGENT_NAME": "my-agent",
    "KAGENT_MEMORY_LOCAL_SERVER": "example.org",
}


@pytest.mark.parametrize("missing", sorted(FULL))
def test_from_env_names_each_missing_setting(missing: str) -> None:
    env = {k: v for k, v in FULL.items() if k != missing}
    with pytest.raises(InvalidInput) as err:
        KagentControllerStore.from_env(env)
    message = str(err.value)
    assert f"{missing} is not set" in message, message
    assert "KGM_ASSERTION_PUBLIC_KEYS" not in message  # the old, wrong cause
    assert err.value.reason is ReasonCode.NOT_CONFIGURED
    assert "127.0.0.1" not in message and "my-agent" not in message  # no value echoed


def test_from_env_with_every_setting_builds_the_store() -> None:
    store = KagentControllerStore.from_env(FULL)
    assert (store.agent.namespace, store.agent.name) == ("kagent", "my-agent")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_missing_token_file_says_it_could_not_be_read(tmp_path: Path) -> None:
    secret_path = tmp_path / "no-such-dir" / "token-file-name"
    async with KagentBridgeStore(f"http://127.0.0.1:{_free_port()}", local_server="example.org",
                                 token_file=secret_path) as bridge:
        with pytest.raises(InvalidInput) as err:
            await bridge.status(make_key())
    message = str(err.value)
    assert "token file could not be read" in message, message
    assert "did not accept" not in message  # the old, wrong cause: nothing was sent
    assert "token-file-name" not in message and str(tmp_path) not in message


async def test_an_unreadable_token_file_says_it_could_not_be_read(tmp_path: Path) -> None:
    directory = tmp_path / "a-directory"  # not a regular file
    directory.mkdir()
    async with KagentBridgeStore(f"http://127.0.0.1:{_free_port()}", local_server="example.org",
                                 token_file=directory) as bridge:
        with pytest.raises(InvalidInput) as err:
            await bridge.status(make_key())
    assert "token file could not be read" in str(err.value)


async def test_an_empty_token_given_says_so() -> None:
    async with KagentBridgeStore(f"http://127.0.0.1:{_free_port()}", local_server="example.org",
                                 token=lambda: "") as bridge:
        with pytest.raises(InvalidInput) as err:
            await bridge.status(make_key())
    assert "the token given" in str(err.value) and "token file" not in str(err.value)


def test_cli_controller_with_nothing_listening_says_the_controller(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("header.payload.signature")
    env = {k: v for k, v in os.environ.items() if k not in ("KGM_DSN", "KGM_CONTROLLER_URL")}
    done = subprocess.run(
        [sys.executable, "-m", "kagent_governed_memory", "status",
         "--controller", f"http://127.0.0.1:{_free_port()}", "--token-file", str(token),
         "--principal", "@alice:example.org", "--namespace", "kagent", "--agent", "my-agent",
         "--room", "!control-a:example.org"],
        capture_output=True, text=True, timeout=120, env=env, check=False)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "controller could not be reached" in out, out
    assert "database could not be reached" not in out, out
    assert "header.payload.signature" not in out


def test_keys_from_env_name_the_variable_asked_for(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KAGENT_MEMORY_SCOPE_PUBLIC_KEYS", "KAGENT_MEMORY_SCOPE_PUBLIC_KEYS_FILE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(InvalidInput) as err:
        public_keys_from_env("KAGENT_MEMORY_SCOPE_PUBLIC_KEYS")
    assert "setting=KAGENT_MEMORY_SCOPE_PUBLIC_KEYS" in str(err.value)
    assert "KGM_ASSERTION_PUBLIC_KEYS" not in str(err.value)
    assert "not set" in str(err.value)

    missing = tmp_path / "keys-file-name.pem"
    monkeypatch.setenv("KAGENT_MEMORY_SCOPE_PUBLIC_KEYS_FILE", str(missing))
    with pytest.raises(InvalidInput) as err:
        public_keys_from_env("KAGENT_MEMORY_SCOPE_PUBLIC_KEYS")
    message = str(err.value)
    assert "could not be read" in message and "setting=KAGENT_MEMORY_SCOPE_PUBLIC_KEYS_FILE" \
        in message, message
    assert "keys-file-name" not in message

    monkeypatch.setenv("KAGENT_MEMORY_SCOPE_PUBLIC_KEYS",
                       public_key_pem(generate_private_key()).decode())
    with pytest.raises(InvalidInput) as err:  # both set
        public_keys_from_env("KAGENT_MEMORY_SCOPE_PUBLIC_KEYS")
    assert "both set" in str(err.value)

    monkeypatch.delenv("BRIDGE_KEY", raising=False)
    monkeypatch.delenv("BRIDGE_KEY_FILE", raising=False)
    with pytest.raises(InvalidInput) as err:
        private_key_from_env("BRIDGE_KEY")
    assert "setting=BRIDGE_KEY" in str(err.value) and "not set" in str(err.value)
