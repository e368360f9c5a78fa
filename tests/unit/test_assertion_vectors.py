"""Shared scope-assertion vectors (T1): this library's verifier gives every token its verdict.

``tests/support/vectors/scope_assertion_v1.json`` is read by every verifier: this suite, the patched
kagent-adk runtime (test_kagent_patch) and the kagent controller's Go tests.  The file is
regenerated here byte for byte, so it cannot drift from its generator, and each hostile case is
checked to really be what its name says (a guard against a vector that passes for the wrong
reason).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kagent_governed_memory import AgentIdentity, InvalidInput, ScopeDenied
from kagent_governed_memory.scope import load_private_key, load_public_keys, verify_scope_assertion
from kagent_governed_memory.scope import MAX_TOKEN_CHARS

VECTORS = (Path(__file__).resolve().parents[1] / "support" / "vectors"
           / "scope_assertion_v1.json")
DOC: dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))
WITH = DOC["verify_with"]
CASES = {c["name"]: c for c in DOC["cases"]}


def verdict(token: str, **over: Any) -> str:
    namespace, name = WITH["agent"].split("/")
    kw: dict[str, Any] = {
        "public_keys": load_public_keys(json.dumps(WITH["public_keys"])),
        "issuer": WITH["issuer"],
        "agent": AgentIdentity(namespace=namespace, name=name),
        "context_id": WITH["context_id"],
        "now": datetime.fromtimestamp(WITH["now"], UTC),
        "leeway": timedelta(seconds=WITH["leeway_seconds"]),
    }
    kw.update(over)
    try:
        verify_scope_assertion(token, **kw)
    except ScopeDenied as err:
        return err.reason.value
    return "ok"


def test_t1_the_vectors_file_is_what_its_generator_writes() -> None:
    done = subprocess.run([sys.executable, str(VECTORS.parent / "generate.py"), "--check"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_t1_the_vectors_cover_every_refusal_the_issue_names() -> None:
    verdicts = {c["verdict"] for c in DOC["cases"]}
    assert verdicts == {"ok", "assertion_invalid", "assertion_unknown_key", "assertion_expired",
                        "agent_mismatch", "context_mismatch"}
    names = " ".join(CASES)
    for needle in ("alg none", "HS256", "unknown kid", "truncated", "re-encoded", "rotation",
                   "expired", "in the future", "another agent", "another A2A context",
                   "wrong issuer", "duplicate"):
        assert needle in names, needle
    assert DOC["replay"]["verdicts"] == ["ok", "assertion_replayed"]


@pytest.mark.parametrize("case", DOC["cases"], ids=[c["name"] for c in DOC["cases"]])
def test_t1_shared_vector(case: dict[str, Any]) -> None:
    assert verdict(case["token"]) == case["verdict"]


def _segments(token: str) -> list[Any]:
    parts = token.split(".")
    out: list[Any] = []
    for p in parts[:2]:
        try:
            out.append(json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4))))
        except ValueError:
            out.append(None)
    return out


def test_t1_hostile_vectors_are_what_their_names_say() -> None:
    good = CASES["valid"]["token"]
    assert len(CASES["token over 4096 characters"]["token"]) > MAX_TOKEN_CHARS
    assert _segments(CASES["alg none, empty signature"]["token"])[0]["alg"] == "none"
    assert _segments(CASES["alg HS256 keyed with the public key PEM (key confusion)"]["token"]
                     )[0]["alg"] == "HS256"
    assert CASES["truncated signature"]["token"] == good[:-2]
    tail = CASES["non-canonical trailing bits in the signature"]["token"]
    assert tail != good and base64.urlsafe_b64decode(tail.split(".")[2] + "==") == \
        base64.urlsafe_b64decode(good.split(".")[2] + "==")  # same bytes, other spelling
    # each single-claim vector differs from the valid one only where its name says
    valid_claims = _segments(good)[1]
    assert _segments(CASES["another A2A context"]["token"])[1] == {
        **valid_claims, "ctx": "a-different-context"}
    assert _segments(CASES["wrong issuer"]["token"])[1]["iss"] != WITH["issuer"]
    # and the valid token is refused the moment any one verification input changes
    assert verdict(good, context_id="other") == "context_mismatch"
    assert verdict(good, agent=AgentIdentity(namespace="kagent", name="x")) == "agent_mismatch"
    assert verdict(good, issuer="https://other.example") == "assertion_invalid"
    assert verdict(good, now=datetime.fromtimestamp(WITH["now"] + 3600, UTC)) == \
        "assertion_expired"


@pytest.mark.parametrize("case", DOC["key_sets"], ids=[c["name"] for c in DOC["key_sets"]])
def test_t1_shared_key_set_vector(case: dict[str, Any]) -> None:
    try:
        keys = load_public_keys(case["source"])
    except InvalidInput as err:
        assert case["verdict"] == "refused"
        assert err.__cause__ is None and err.__context__ is None
        secret_part = case["source"][30:60]
        assert not secret_part or secret_part not in str(err) + repr(err)
    else:
        assert case["verdict"] == "ok" and sorted(keys) == case["kids"]


def test_t1_the_test_private_keys_sign_what_the_public_keys_verify() -> None:
    from kagent_governed_memory.scope import key_id

    public = load_public_keys(json.dumps(WITH["public_keys"]))
    for jwk in DOC["test_private_keys"]["keys"][:2]:
        private = load_private_key(json.dumps(jwk))
        assert public[jwk["kid"]].public_bytes_raw() == private.public_key().public_bytes_raw()
        assert jwk["kid"] in (key_id(private), "bridge-2030-01")
    unknown = load_private_key(json.dumps(DOC["test_private_keys"]["keys"][2]))
    assert key_id(unknown) not in public
