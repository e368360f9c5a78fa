#!/usr/bin/env python3
"""Writes ``scope_assertion_v1.json``: shared test vectors for every scope-assertion verifier.

The library's verifier (``kagent_governed_memory.scope``), the patched kagent-adk runtime
and the kagent controller (Go) must give the same verdict for every token here.  Ed25519
signatures are deterministic and every key, time and ``jti`` below is fixed, so this script
reproduces the file byte for byte (``tests/test_assertion_vectors.py`` checks that).

The private keys are TEST KEYS, derived from public seeds: never use them anywhere else.
Stdlib + ``cryptography`` only (no JWT library: hostile tokens are built by hand).

    python tests/vectors/generate.py [--check]
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sys
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

OUT = Path(__file__).with_name("scope_assertion_v1.json")
NOW = 1893553445  # 2030-01-02T03:04:05Z
ISSUER = "https://bridge.example.org"
AGENT = "kagent/my-agent"
CONTEXT = "6f1c0d2e-0b7a-4c55-9a53-1d6f6b1c2a10"
LEEWAY = 5


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def test_key(seed: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(seed.encode()).digest())


def raw_public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw,
                                         serialization.PublicFormat.Raw)


def thumbprint(key: Ed25519PrivateKey) -> str:
    canonical = f'{{"crv":"Ed25519","kty":"OKP","x":"{b64(raw_public(key))}"}}'
    return b64(hashlib.sha256(canonical.encode()).digest())


KEY_A = test_key("kagent-governed-memory test key A (public seed; never deploy)")
KEY_B = test_key("kagent-governed-memory test key B (public seed; never deploy)")
KEY_C = test_key("kagent-governed-memory test key C (public seed; never deploy)")
KID_A, KID_B, KID_C = thumbprint(KEY_A), "bridge-2030-01", thumbprint(KEY_C)


def jwk(key: Ed25519PrivateKey, kid: str | None, private: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"kty": "OKP", "crv": "Ed25519", "x": b64(raw_public(key))}
    if kid is not None:
        out["kid"] = kid
    if private:
        out["d"] = b64(key.private_bytes(serialization.Encoding.Raw,
                                         serialization.PrivateFormat.Raw,
                                         serialization.NoEncryption()))
    return out


def compact(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def claims(**over: Any) -> dict[str, Any]:
    c: dict[str, Any] = {
        "iss": ISSUER, "aud": AGENT, "sub": "@alice:example.org", "org": "native_local",
        "room": "!control:example.org", "cls": "personal", "out": ["example.org"],
        "ctx": CONTEXT, "iat": NOW - 10, "exp": NOW + 20, "jti": "vJ1f0b1mQk2nS3tU4wX5yA",
    }
    for k, v in over.items():
        if v is DROP:
            del c[k]
        else:
            c[k] = v
    return c


DROP = object()


def token(body: dict[str, Any] | bytes, *, key: Ed25519PrivateKey = KEY_A,
          header: dict[str, Any] | bytes | None = None) -> str:
    head = header if header is not None else {"alg": "EdDSA", "kid": KID_A, "typ": "JWT"}
    h = head if isinstance(head, bytes) else compact(head)
    p = body if isinstance(body, bytes) else compact(body)
    signing_input = f"{b64(h)}.{b64(p)}".encode()
    return f"{signing_input.decode()}.{b64(key.sign(signing_input))}"


def cases() -> list[dict[str, Any]]:
    good = token(claims())
    head, payload, sig = good.split(".")
    pem = KEY_A.public_key().public_bytes(serialization.Encoding.PEM,
                                          serialization.PublicFormat.SubjectPublicKeyInfo)
    hs_input = b64(compact({"alg": "HS256", "kid": KID_A, "typ": "JWT"})) + "." + payload
    out: list[dict[str, Any]] = [
        ("valid", good, "ok"),
        ("rotation: second key by its explicit kid",
         token(claims(jti="rotationBkey000000000A"), key=KEY_B,
               header={"alg": "EdDSA", "kid": KID_B, "typ": "JWT"}), "ok"),
        ("typ may be omitted", token(claims(jti="noTypHeader00000000000"),
                                     header={"alg": "EdDSA", "kid": KID_A}), "ok"),
        ("federated principal verifies; the store refuses it later",
         token(claims(sub="@bob:remote.example", org="remote_federated",
                      jti="federatedPrincipal0000")), "ok"),
        ("iat exactly leeway in the future", token(claims(iat=NOW + 5, exp=NOW + 30)), "ok"),
        ("exp one second inside the leeway", token(claims(iat=NOW - 30, exp=NOW - 4)), "ok"),
        ("lifetime exactly 60 s", token(claims(iat=NOW - 30, exp=NOW + 30)), "ok"),
        ("unknown kid", token(claims(), key=KEY_C,
                              header={"alg": "EdDSA", "kid": KID_C, "typ": "JWT"}),
         "assertion_unknown_key"),
        ("known kid, signed by another key", token(claims(), key=KEY_C), "assertion_invalid"),
        ("kid of key A, signed by rotation key B", token(claims(), key=KEY_B),
         "assertion_invalid"),
        ("alg none, empty signature",
         b64(compact({"alg": "none", "kid": KID_A, "typ": "JWT"})) + "." + payload + ".",
         "assertion_invalid"),
        ("alg none with a copied signature",
         b64(compact({"alg": "none", "kid": KID_A, "typ": "JWT"})) + "." + payload + "." + sig,
         "assertion_invalid"),
        ("alg HS256 keyed with the public key PEM (key confusion)",
         hs_input + "." + b64(hmac.new(pem, hs_input.encode(), hashlib.sha256).digest()),
         "assertion_invalid"),
        ("alg HS256 keyed with the raw public key",
         hs_input + "." + b64(hmac.new(raw_public(KEY_A), hs_input.encode(),
                                       hashlib.sha256).digest()), "assertion_invalid"),
        ("alg ES256", token(claims(), header={"alg": "ES256", "kid": KID_A, "typ": "JWT"}),
         "assertion_invalid"),
        ("alg Ed25519 (not the JOSE name)",
         token(claims(), header={"alg": "Ed25519", "kid": KID_A, "typ": "JWT"}),
         "assertion_invalid"),
        ("no kid", token(claims(), header={"alg": "EdDSA", "typ": "JWT"}), "assertion_invalid"),
        ("kid not a string", token(claims(), header={"alg": "EdDSA", "kid": 1, "typ": "JWT"}),
         "assertion_invalid"),
        ("typ other than JWT", token(claims(), header={"alg": "EdDSA", "kid": KID_A,
                                                       "typ": "at+jwt"}), "assertion_invalid"),
        ("crit header", token(claims(), header={"alg": "EdDSA", "kid": KID_A, "typ": "JWT",
                                                "crit": ["exp"]}), "assertion_invalid"),
        ("jku header", token(claims(), header={"alg": "EdDSA", "kid": KID_A, "typ": "JWT",
                                               "jku": "https://attacker.example/jwks"}),
         "assertion_invalid"),
        ("duplicate alg in the header",
         token(claims(), header=b'{"alg":"none","alg":"EdDSA","kid":"%s","typ":"JWT"}'
               % KID_A.encode()), "assertion_invalid"),
        ("duplicate claim member",
         token(compact(claims())[:-1] + b',"sub":"@mallory:example.org"}'),
         "assertion_invalid"),
        ("claims not an object", token(b'["iss"]'), "assertion_invalid"),
        ("claims not JSON", token(b"iss=bridge"), "assertion_invalid"),
        ("header not JSON", token(claims(), header=b"alg:EdDSA"), "assertion_invalid"),
        ("claims not JSON under an unknown kid (format before key, check order)",
         token(b"iss=bridge", key=KEY_C, header={"alg": "EdDSA", "kid": KID_C, "typ": "JWT"}),
         "assertion_invalid"),
        ("duplicate claim member under an unknown kid (check order)",
         token(compact(claims())[:-1] + b',"sub":"@mallory:example.org"}', key=KEY_C,
               header={"alg": "EdDSA", "kid": KID_C, "typ": "JWT"}), "assertion_invalid"),
        ("NaN in the claims", token(compact(claims())[:-1] + b',"x":NaN}'), "assertion_invalid"),
        ("truncated signature", good[:-2], "assertion_invalid"),
        ("signature removed", f"{head}.{payload}", "assertion_invalid"),
        ("trailing dot", good + ".", "assertion_invalid"),
        ("four segments", good + ".e30", "assertion_invalid"),
        ("padded base64 payload", f"{head}.{payload}{'=' * (-len(payload) % 4) or '=='}.{sig}",
         "assertion_invalid"),
        ("standard base64 alphabet in the signature",
         f"{head}.{payload}.{sig.replace('-', '+').replace('_', '/')}"
         if ("-" in sig or "_" in sig) else f"{head}.{payload}.{sig[:-1]}+",
         "assertion_invalid"),
        ("non-canonical trailing bits in the signature",
         f"{head}.{payload}.{sig[:-1]}{_flip_low_bits(sig[-1])}", "assertion_invalid"),
        ("payload re-encoded with whitespace (signature no longer matches)",
         f"{head}.{b64(json.dumps(claims()).encode())}.{sig}", "assertion_invalid"),
        ("token over 4096 characters",
         token(claims(cls="personal", room="!" + "r" * 200 + ":example.org",
                      out=sorted(f"s{i:04d}.example.org" for i in range(160)))),
         "assertion_invalid"),
        ("non-ASCII character", good[:-1] + "é", "assertion_invalid"),
        ("wrong issuer", token(claims(iss="https://bridge.attacker.example")),
         "assertion_invalid"),
        ("missing jti", token(claims(jti=DROP)), "assertion_invalid"),
        ("missing ctx", token(claims(ctx=DROP)), "assertion_invalid"),
        ("extra claim nbf", token({**claims(), "nbf": NOW - 10}), "assertion_invalid"),
        ("jti too short", token(claims(jti="short")), "assertion_invalid"),
        ("jti with a dot", token(claims(jti="abcdefgh.ijklmnopqrst")), "assertion_invalid"),
        ("iat as a float", token(claims(iat=float(NOW - 10))), "assertion_invalid"),
        ("exp as a string", token(claims(exp=str(NOW + 20))), "assertion_invalid"),
        ("exp as a boolean", token(claims(exp=True)), "assertion_invalid"),
        ("lifetime 61 s", token(claims(iat=NOW - 30, exp=NOW + 31)), "assertion_invalid"),
        ("exp before iat", token(claims(iat=NOW, exp=NOW - 1)), "assertion_invalid"),
        ("aud as a list", token(claims(aud=[AGENT])), "assertion_invalid"),
        ("aud without a namespace", token(claims(aud="my-agent")), "assertion_invalid"),
        ("sub not an MXID", token(claims(sub="alice")), "assertion_invalid"),
        ("unknown origin", token(claims(org="local")), "assertion_invalid"),
        ("room not a room id", token(claims(room="#alias:example.org")), "assertion_invalid"),
        ("classification not lower snake case", token(claims(cls="Personal")),
         "assertion_invalid"),
        ("output audience empty", token(claims(out=[])), "assertion_invalid"),
        ("output audience unsorted", token(claims(out=["z.example", "example.org"])),
         "assertion_invalid"),
        ("output audience duplicated", token(claims(out=["example.org", "example.org"])),
         "assertion_invalid"),
        ("iat beyond the leeway in the future", token(claims(iat=NOW + 6, exp=NOW + 30)),
         "assertion_invalid"),
        ("expired: exp + leeway reached", token(claims(iat=NOW - 30, exp=NOW - 5)),
         "assertion_expired"),
        ("expired long ago", token(claims(iat=NOW - 3600, exp=NOW - 3570)),
         "assertion_expired"),
        ("another agent", token(claims(aud="kagent/other-agent")), "agent_mismatch"),
        ("another namespace", token(claims(aud="team-b/my-agent")), "agent_mismatch"),
        ("another A2A context", token(claims(ctx="a-different-context")), "context_mismatch"),
        ("expired beats another agent (check order)",
         token(claims(aud="kagent/other-agent", iat=NOW - 90, exp=NOW - 60)),
         "assertion_expired"),
        ("wrong issuer beats expiry (check order)",
         token(claims(iss="https://other.example", iat=NOW - 90, exp=NOW - 60)),
         "assertion_invalid"),
    ]
    return [{"name": n, "token": t, "verdict": v} for n, t, v in out]


def _flip_low_bits(ch: str) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    # the last char of a 64-byte signature carries 2 data bits and 4 padding bits
    return alphabet[alphabet.index(ch) ^ 0b0001]


def key_sets() -> list[dict[str, Any]]:
    p256 = ec.derive_private_key(int.from_bytes(hashlib.sha256(b"p256 test").digest(), "big")
                                 % (2**255), ec.SECP256R1())
    p256_pem = p256.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    a_pem = KEY_A.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return [
        {"name": "JWK Set, two keys", "source": json.dumps({"keys": [jwk(KEY_A, KID_A),
                                                                     jwk(KEY_B, KID_B)]}),
         "verdict": "ok", "kids": sorted([KID_A, KID_B])},
        {"name": "one PEM public key (kid = RFC 7638 thumbprint)", "source": a_pem,
         "verdict": "ok", "kids": [KID_A]},
        {"name": "one JWK without kid (kid = thumbprint)",
         "source": json.dumps(jwk(KEY_A, None)), "verdict": "ok", "kids": [KID_A]},
        {"name": "a private JWK", "source": json.dumps({"keys": [jwk(KEY_A, KID_A, True)]}),
         "verdict": "refused"},
        {"name": "a private PEM key", "source": KEY_A.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()).decode(), "verdict": "refused"},
        {"name": "a P-256 public key", "source": p256_pem, "verdict": "refused"},
        {"name": "an X25519 JWK (not a signing curve)",
         "source": json.dumps({"kty": "OKP", "crv": "X25519", "x": b64(raw_public(KEY_A))}),
         "verdict": "refused"},
        {"name": "a private JWK spelling d as \\u0064",
         "source": json.dumps(jwk(KEY_A, KID_A))[:-1]
         + ', "\\u0064": "' + jwk(KEY_A, KID_A, True)["d"] + '"}', "verdict": "refused"},
        {"name": "a JWK with a NaN member",
         "source": json.dumps(jwk(KEY_A, KID_A))[:-1] + ', "ext": NaN}', "verdict": "refused"},
        {"name": "a small-order public key (the identity point: verifies forged signatures)",
         "source": json.dumps({"kty": "OKP", "crv": "Ed25519", "x": b64(b"\x01" + bytes(31))}),
         "verdict": "refused"},
        {"name": "a small-order public key, non-canonical encoding with the sign bit set",
         "source": json.dumps({"kty": "OKP", "crv": "Ed25519",
                               "x": b64(bytes.fromhex("ee" + "ff" * 30 + "ff"))}),
         "verdict": "refused"},
        {"name": "a JWK with an unknown member (it could hold private material)",
         "source": json.dumps({**jwk(KEY_A, KID_A), "seed": b64(bytes(32))}),
         "verdict": "refused"},
        {"name": "a JWK Set with members besides keys",
         "source": json.dumps({"keys": [jwk(KEY_A, KID_A)], "d": b64(bytes(32))}),
         "verdict": "refused"},
        {"name": "PEM public key with other text beside it", "source": a_pem + "d=secret\n",
         "verdict": "refused"},
        {"name": "two PEM public keys (rotation)", "source": a_pem + "\n" + KEY_B.public_key()
         .public_bytes(serialization.Encoding.PEM,
                       serialization.PublicFormat.SubjectPublicKeyInfo).decode(),
         "verdict": "ok", "kids": sorted([KID_A, thumbprint(KEY_B)])},
        {"name": "duplicate kid", "source": json.dumps({"keys": [jwk(KEY_A, "same"),
                                                                 jwk(KEY_B, "same")]}),
         "verdict": "refused"},
        {"name": "empty set", "source": '{"keys": []}', "verdict": "refused"},
        {"name": "a JWK for another algorithm",
         "source": json.dumps({**jwk(KEY_A, KID_A), "alg": "ES256"}), "verdict": "refused"},
    ]


def document() -> str:
    doc = {
        "about": ("Shared test vectors for the bridge-signed scope assertion (JWT, EdDSA/Ed25519)."
                  " Every verifier (kagent_governed_memory, the kagent-adk runtime, the kagent "
                  "controller) must give each token its verdict when verifying with public_keys, "
                  "issuer, agent, context_id, now and leeway_seconds below. Generated by "
                  "tests/vectors/generate.py. The private keys are TEST KEYS from public seeds."),
        "verify_with": {"public_keys": {"keys": [jwk(KEY_A, KID_A), jwk(KEY_B, KID_B)]},
                        "issuer": ISSUER, "agent": AGENT, "context_id": CONTEXT, "now": NOW,
                        "leeway_seconds": LEEWAY},
        "test_private_keys": {"keys": [jwk(KEY_A, KID_A, True), jwk(KEY_B, KID_B, True),
                                       jwk(KEY_C, KID_C, True)]},
        "cases": cases(),
        "replay": {"about": "the same valid token presented to two requests (any replica): "
                            "the first redeems its jti, the second is refused",
                   "token": token(claims(jti="replayedTokenJti000001")),
                   "verdicts": ["ok", "assertion_replayed"]},
        "key_sets": key_sets(),
    }
    return json.dumps(doc, indent=1, ensure_ascii=True) + "\n"


def main() -> int:
    text = document()
    if "--check" in sys.argv[1:]:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.name} is stale: run python tests/vectors/generate.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
