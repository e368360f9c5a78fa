"""Ed25519 keys for scope assertions: the bridge's private key, everyone else's public keys.

Only the bridge holds a private key (T1).  Agent runtimes and the kagent controller load
*public* keys only; ``load_public_keys`` refuses private material outright, so a verifier
configured by mistake with the signing key fails at start-up instead of quietly becoming able
to mint assertions.

Formats: PEM (``-----BEGIN PUBLIC KEY-----``, several blocks for rotation), a JWK or a JWK Set
(RFC 7517/8037: ``{"kty": "OKP", "crv": "Ed25519", "x": ...}``).  A key's id (``kid``) is the
JWK's own ``kid`` when it has one, else its RFC 7638 thumbprint -- the same rule in the Go
verifier, so a PEM file and the JWKS made from it name their keys identically.

Every error is a content-free ``InvalidInput(field=...)``; no key bytes, no library message.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..errors import InvalidInput, ReasonCode

__all__ = [
    "PRIVATE_KEY_ENV",
    "PUBLIC_KEYS_ENV",
    "PublicKeys",
    "generate_private_key",
    "key_id",
    "load_private_key",
    "load_public_keys",
    "private_key_from_env",
    "private_key_pem",
    "public_jwks",
    "public_key_pem",
    "public_keys_from_env",
]

PublicKeys = Mapping[str, Ed25519PublicKey]  # kid -> key

# Value, or a file path in the same name + "_FILE" (Kubernetes Secret mounted as a file).
PRIVATE_KEY_ENV = "KGM_ASSERTION_PRIVATE_KEY"  # the bridge only
PUBLIC_KEYS_ENV = "KGM_ASSERTION_PUBLIC_KEYS"  # runtimes, controller
MAX_KEY_SOURCE_BYTES = 64 * 1024
KID = re.compile(r"[A-Za-z0-9._~-]{1,128}")
_PEM_PUBLIC_KEY = re.compile(
    rb"-----BEGIN PUBLIC KEY-----\r?\n[A-Za-z0-9+/=\r\n]+-----END PUBLIC KEY-----")
_JWK_PUBLIC = frozenset({"kty", "crv", "x", "kid", "use", "alg", "key_ops"})
_JWK_PRIVATE = _JWK_PUBLIC | {"d"}
_SMALL_ORDER = frozenset(bytes.fromhex(h) for h in (  # libsodium ed25519_is_small_order
    "0100000000000000000000000000000000000000000000000000000000000000",
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
))


def _bad(field: str) -> InvalidInput:
    return InvalidInput(ReasonCode.INVALID_ARGUMENT, field=field)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def generate_private_key() -> Ed25519PrivateKey:
    """A new Ed25519 signing key for the bridge."""
    return Ed25519PrivateKey.generate()


def key_id(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """RFC 7638 JWK thumbprint (SHA-256, base64url) of the public key."""
    if isinstance(key, Ed25519PrivateKey):
        key = key.public_key()
    if not isinstance(key, Ed25519PublicKey):
        raise _bad("key")
    canonical = f'{{"crv":"Ed25519","kty":"OKP","x":"{_b64(_raw_public(key))}"}}'
    return _b64(hashlib.sha256(canonical.encode("ascii")).digest())


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    """PKCS#8 PEM, unencrypted: store it in a Kubernetes Secret readable by the bridge only."""
    if not isinstance(key, Ed25519PrivateKey):
        raise _bad("private_key")
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def public_key_pem(key: Ed25519PublicKey | Ed25519PrivateKey) -> bytes:
    if isinstance(key, Ed25519PrivateKey):
        key = key.public_key()
    if not isinstance(key, Ed25519PublicKey):
        raise _bad("public_key")
    return key.public_bytes(serialization.Encoding.PEM,
                            serialization.PublicFormat.SubjectPublicKeyInfo)


def public_jwks(keys: PublicKeys | Ed25519PublicKey | Ed25519PrivateKey) -> dict[str, Any]:
    """A JWK Set of public keys (``kid``, ``use: sig``, ``alg: EdDSA``), e.g. for a ConfigMap."""
    if isinstance(keys, Ed25519PublicKey | Ed25519PrivateKey):
        keys = {key_id(keys): keys.public_key() if isinstance(keys, Ed25519PrivateKey) else keys}
    out = []
    for kid, key in keys.items():
        if not isinstance(key, Ed25519PublicKey) or not isinstance(kid, str) or not KID.fullmatch(kid):
            raise _bad("public_keys")
        out.append({"kty": "OKP", "crv": "Ed25519", "x": _b64(_raw_public(key)), "kid": kid,
                    "use": "sig", "alg": "EdDSA"})
    return {"keys": out}


def load_private_key(source: str | bytes | os.PathLike[str]) -> Ed25519PrivateKey:
    """The bridge's signing key from PEM (PKCS#8) or a private JWK (with ``d``); a path is read."""
    data = _read(source, "private_key").strip()
    key: Any = None
    if data.startswith(b"{"):
        jwk = _json_object(data)
        d = _okp_bytes(jwk, "d") if jwk is not None and set(jwk) <= _JWK_PRIVATE else None
        x = _okp_bytes(jwk, "x") if jwk is not None else None
        if d is not None and x is not None:
            key = Ed25519PrivateKey.from_private_bytes(d)
            if _raw_public(key.public_key()) != x:
                key = None
    else:
        key = _loaded(serialization.load_pem_private_key, data, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise _bad("private_key")  # not Ed25519, encrypted or malformed
    return key


def load_public_keys(source: str | bytes | os.PathLike[str]) -> dict[str, Ed25519PublicKey]:
    """``kid -> key`` for every public key in ``source``: ``PUBLIC KEY`` PEM blocks (and
    nothing else but whitespace), a JWK or a JWK Set.

    Refuses: private key material of any kind (JWKs may carry only ``kty``, ``crv``, ``x``,
    ``kid``, ``use``, ``alg`` and ``key_ops``), keys that are not Ed25519, small-order keys
    (which verify forged signatures), duplicate ``kid``s, an empty set, anything malformed.
    """
    found = _public_keys(_read(source, "public_keys").strip())
    keys = dict(found or [])
    if not found or len(keys) != len(found):
        raise _bad("public_keys")
    return keys


def _public_keys(data: bytes) -> list[tuple[str, Ed25519PublicKey]] | None:
    found: list[tuple[str, Ed25519PublicKey]] = []
    if data.startswith(b"{"):
        doc = _json_object(data)
        if doc is None:
            return None
        jwks = doc["keys"] if set(doc) == {"keys"} else [doc]
        if not isinstance(jwks, list):
            return None
        for jwk in jwks:
            if not isinstance(jwk, dict) or not set(jwk) <= _JWK_PUBLIC:
                return None  # "d" (however spelled in JSON) and anything unknown: refused
            if jwk.get("alg", "EdDSA") != "EdDSA" or jwk.get("use", "sig") != "sig":
                return None
            raw = _okp_bytes(jwk, "x")
            if raw is None or _small_order(raw):
                return None
            key = Ed25519PublicKey.from_public_bytes(raw)
            kid = jwk.get("kid", key_id(key))
            if not isinstance(kid, str) or not KID.fullmatch(kid):
                return None
            found.append((kid, key))
        return found
    blocks = list(_PEM_PUBLIC_KEY.finditer(data))
    if _PEM_PUBLIC_KEY.sub(b"", data).strip():
        return None  # only PUBLIC KEY blocks: no private or unknown material beside them
    for block in blocks:
        loaded = _loaded(serialization.load_pem_public_key, block.group(0))
        if not isinstance(loaded, Ed25519PublicKey) or _small_order(_raw_public(loaded)):
            return None
        found.append((key_id(loaded), loaded))
    return found


def _loaded(loader: Any, data: bytes, **kw: Any) -> Any:
    """``loader(data)`` or ``None``: cryptography's errors (which may quote input) never escape."""
    try:
        return loader(data, **kw)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return None


def _small_order(raw: bytes) -> bool:
    """One of the eight small-order points, in any of its encodings (libsodium's list; the
    sign bit is ignored): such a "public key" verifies signatures nobody made."""
    return raw[:31] + bytes([raw[31] & 0x7F]) in _SMALL_ORDER


def public_keys_from_env(name: str = PUBLIC_KEYS_ENV) -> dict[str, Ed25519PublicKey]:
    """Public keys from ``$name`` (the keys themselves) or ``$name_FILE`` (a path)."""
    return load_public_keys(_env(name, "public_keys"))


def private_key_from_env(name: str = PRIVATE_KEY_ENV) -> Ed25519PrivateKey:
    """The bridge's key from ``$name`` (PEM or JWK) or ``$name_FILE`` (a path)."""
    return load_private_key(_env(name, "private_key"))


def _env(name: str, field: str) -> str | bytes | Path:
    # errors name the setting the caller asked for (e.g. KAGENT_MEMORY_SCOPE_PUBLIC_KEYS), never
    # its value or the file's path
    value, path = os.environ.get(name), os.environ.get(name + "_FILE")
    if not value and not path:
        raise InvalidInput(ReasonCode.NOT_CONFIGURED, field=f"{field}_env", setting=name)
    if value and path:  # exactly one of the two
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field=f"{field}_env", setting=name)
    if path:
        try:
            with open(path, "rb") as f:
                return f.read(MAX_KEY_SOURCE_BYTES + 1)
        except OSError:
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field=f"{field}_file",
                               setting=name + "_FILE") from None
    return (value or "").encode("utf-8")


def _read(source: Any, field: str) -> bytes:
    data: bytes | None = None
    if isinstance(source, os.PathLike):
        try:
            with open(source, "rb") as f:
                data = f.read(MAX_KEY_SOURCE_BYTES + 1)
        except OSError:
            data = None
    elif isinstance(source, str):
        data = source.encode("utf-8")
    elif isinstance(source, bytes | bytearray):
        data = bytes(source)
    if data is None or not data.strip() or len(data) > MAX_KEY_SOURCE_BYTES:
        raise _bad(field)
    return data


def _json_object(data: bytes) -> dict[str, Any] | None:
    """A JSON object without duplicate members or NaN/Infinity, else ``None``."""
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if len(out) != len(pairs):
            raise ValueError("duplicate")
        return out

    def no_constant(name: str) -> Any:
        raise ValueError("NaN and Infinity are not JSON")

    try:
        doc = json.loads(data.decode("utf-8"), object_pairs_hook=no_duplicates,
                         parse_constant=no_constant)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def _okp_bytes(jwk: Mapping[str, Any] | None, member: str) -> bytes | None:
    """The 32 bytes of an Ed25519 JWK member in its canonical base64url spelling, or None."""
    if jwk is None or jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
        return None
    value = jwk.get(member)
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_-]{43}", value):
        return None
    raw = base64.urlsafe_b64decode(value + "=")
    return raw if _b64(raw) == value else None
