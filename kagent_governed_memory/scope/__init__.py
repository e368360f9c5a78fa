"""Scope assertions: the bridge signs one request's scope, runtimes and the controller verify it
(``_assertion``, the JWS envelope in ``_jws``), the Ed25519 keys (``_keys``) and the binding of
one request's verified assertion (``_request``).  Import the names below from here."""

from ._assertion import (
    DEFAULT_LEEWAY,
    MAX_LEEWAY,
    MAX_LIFETIME,
    MAX_TOKEN_CHARS,
    ScopeAssertion,
    sign_scope_assertion,
    verify_scope_assertion,
)
from ._keys import (
    PRIVATE_KEY_ENV,
    PUBLIC_KEYS_ENV,
    PublicKeys,
    generate_private_key,
    key_id,
    load_private_key,
    load_public_keys,
    private_key_from_env,
    private_key_pem,
    public_jwks,
    public_key_pem,
    public_keys_from_env,
)
from ._request import ASSERTION_HEADER, GRANT_HEADER, RequestBinding, current_request, memory_request

__all__ = [
    "ASSERTION_HEADER",
    "DEFAULT_LEEWAY",
    "GRANT_HEADER",
    "MAX_LEEWAY",
    "MAX_LIFETIME",
    "MAX_TOKEN_CHARS",
    "PRIVATE_KEY_ENV",
    "PUBLIC_KEYS_ENV",
    "PublicKeys",
    "RequestBinding",
    "ScopeAssertion",
    "current_request",
    "generate_private_key",
    "key_id",
    "load_private_key",
    "load_public_keys",
    "memory_request",
    "private_key_from_env",
    "private_key_pem",
    "public_jwks",
    "public_key_pem",
    "public_keys_from_env",
    "sign_scope_assertion",
    "verify_scope_assertion",
]
