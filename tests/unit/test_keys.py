"""Keys (T1): the bridge's private key, the verifiers' public keys, and the ``keys`` commands.

Loading refuses private material where public keys belong, keys that are not Ed25519,
duplicate kids and malformed input, without echoing any of it; the CLI writes the private key
to a 0600 file only and prints public material only.  ``openssl`` interop is checked when the
binary is present (it says so loudly when it is not).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from kagent_governed_memory import InvalidInput
from kagent_governed_memory.scope import (
    generate_private_key,
    load_private_key,
    load_public_keys,
    private_key_from_env,
    public_keys_from_env,
)
from kagent_governed_memory.scope import key_id, private_key_pem, public_jwks, public_key_pem


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kagent_governed_memory", "keys", *args],
                          capture_output=True, text=True, timeout=60, cwd=cwd, check=False)


def test_t1_pem_jwk_and_jwks_name_a_key_the_same() -> None:
    key = generate_private_key()
    kid = key_id(key)
    assert list(load_public_keys(public_key_pem(key))) == [kid]
    assert list(load_public_keys(json.dumps(public_jwks(key)))) == [kid]
    jwk = public_jwks(key)["keys"][0]
    del jwk["kid"]
    assert list(load_public_keys(json.dumps(jwk))) == [kid]  # thumbprint when no kid
    assert load_private_key(private_key_pem(key)).public_key().public_bytes_raw() == \
        key.public_key().public_bytes_raw()


def test_t1_several_pem_blocks_are_several_keys_for_rotation() -> None:
    a, b = generate_private_key(), generate_private_key()
    keys = load_public_keys(public_key_pem(a) + b"\n" + public_key_pem(b))
    assert set(keys) == {key_id(a), key_id(b)}
    assert all(isinstance(k, Ed25519PublicKey) for k in keys.values())
    # nothing but PUBLIC KEY blocks: stray text could be (raw) private material
    for stray in (b"# next key\n", private_key_pem(a), b"d=" + b"A" * 43 + b"\n"):
        with pytest.raises(InvalidInput):
            load_public_keys(public_key_pem(a) + stray + public_key_pem(b))


@pytest.mark.parametrize("source", [
    "", "   ", "not a key", '{"keys": "x"}', "[1]", '{"kty": "OKP"}',
    '{"kty": "OKP", "crv": "Ed25519", "x": "short"}', b"\xff\xfe", 7, None,
    "x" * (64 * 1024 + 1),
])
def test_t1_malformed_key_sources_are_refused_without_echo(source) -> None:
    with pytest.raises(InvalidInput) as info:
        load_public_keys(source)
    err = info.value
    assert err.__cause__ is None and err.__context__ is None
    if isinstance(source, str) and len(source) > 4:
        assert source[:40] not in str(err) + repr(err)


def test_t1_a_private_key_is_never_accepted_as_a_public_key() -> None:
    key = generate_private_key()
    private_jwk = {**public_jwks(key)["keys"][0], "d": "A" * 43}
    for source in (private_key_pem(key), json.dumps(private_jwk),
                   json.dumps({"keys": [private_jwk]})):
        with pytest.raises(InvalidInput):
            load_public_keys(source)


def test_t1_keys_from_the_environment_value_or_file(tmp_path, monkeypatch) -> None:
    key = generate_private_key()
    monkeypatch.setenv("KGM_ASSERTION_PUBLIC_KEYS", public_key_pem(key).decode())
    assert list(public_keys_from_env()) == [key_id(key)]
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(public_jwks(key)))
    monkeypatch.setenv("KGM_ASSERTION_PUBLIC_KEYS_FILE", str(path))
    with pytest.raises(InvalidInput):  # both set: ambiguous
        public_keys_from_env()
    monkeypatch.delenv("KGM_ASSERTION_PUBLIC_KEYS")
    assert list(public_keys_from_env()) == [key_id(key)]
    monkeypatch.setenv("KGM_ASSERTION_PUBLIC_KEYS_FILE", str(tmp_path / "missing"))
    with pytest.raises(InvalidInput):
        public_keys_from_env()
    private = tmp_path / "bridge.pem"
    private.write_bytes(private_key_pem(key))
    monkeypatch.setenv("KGM_ASSERTION_PRIVATE_KEY_FILE", str(private))
    assert key_id(private_key_from_env()) == key_id(key)
    monkeypatch.delenv("KGM_ASSERTION_PRIVATE_KEY_FILE")
    with pytest.raises(InvalidInput):  # neither set
        private_key_from_env()


def test_t1_cli_generate_public_key_and_jwks(tmp_path) -> None:
    done = run("generate", "--out", "bridge.pem", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    private = tmp_path / "bridge.pem"
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    assert "PRIVATE" not in done.stdout and "BEGIN PUBLIC KEY" in done.stdout
    key = load_private_key(private)
    assert key_id(key) in done.stderr
    assert run("generate", "--out", "bridge.pem", cwd=tmp_path).returncode == 2  # no overwrite
    assert load_private_key(private).public_key().public_bytes_raw() == \
        key.public_key().public_bytes_raw()

    pub = run("public-key", "--private", "bridge.pem", cwd=tmp_path)
    assert pub.returncode == 0 and pub.stdout == done.stdout
    (tmp_path / "old.pem").write_text(pub.stdout)
    other = generate_private_key()
    (tmp_path / "new.json").write_text(json.dumps(public_jwks(other)))
    merged = run("jwks", "old.pem", "new.json", cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr
    assert set(load_public_keys(merged.stdout)) == {key_id(key), key_id(other)}
    refused = run("jwks", "bridge.pem", cwd=tmp_path)  # a private key is not a public key
    assert refused.returncode == 2 and "PRIVATE" not in refused.stdout + refused.stderr
    assert run("public-key", "--private", "old.pem", cwd=tmp_path).returncode == 2


def test_t1_openssl_keys_interoperate(tmp_path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl is not installed: the documented openssl one-liners were NOT "
                    "checked on this machine", pytrace=False)
    subprocess.run([openssl, "genpkey", "-algorithm", "ed25519", "-out", "k.pem"], cwd=tmp_path,
                   check=True, capture_output=True)
    subprocess.run([openssl, "pkey", "-in", "k.pem", "-pubout", "-out", "p.pem"], cwd=tmp_path,
                   check=True, capture_output=True)
    key = load_private_key(tmp_path / "k.pem")
    assert list(load_public_keys(tmp_path / "p.pem")) == [key_id(key)]
