"""Bridge-signed scope assertion (SPEC S6, T1; CONTRACT "Inside kagent / google-adk").

Pure, synchronous tests: no database (replay through the ledger is in test_assertion_ledger).
The MXID, room and keys are distinctive sentinels so that every error can be searched for them.
The verdict of every hostile token is pinned by the shared vectors (test_assertion_vectors);
this file covers the API around them: signing, key handling, clocks, fuzzing, reprs.
"""

from __future__ import annotations

import base64
import json
import random
import traceback
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kagent_governed_memory.scope import _assertion as assertion_mod
from kagent_governed_memory.scope import (
    MAX_LIFETIME,
    MAX_TOKEN_CHARS,
    ScopeAssertion,
    sign_scope_assertion,
    verify_scope_assertion,
)
from kagent_governed_memory.errors import (
    GovernanceError,
    InvalidIdentity,
    InvalidInput,
    ReasonCode,
    ScopeDenied,
)
from kagent_governed_memory.identity import (
    AgentIdentity,
    MemoryScope,
    OriginKind,
    Principal,
    ScopeKey,
    ScopeKind,
)
from kagent_governed_memory.scope import generate_private_key, key_id

LOCAL = "example.org"
LOCALPART = "qz7sentinel-user"
MXID = f"@{LOCALPART}:{LOCAL}"
ROOM_OPAQUE = "qz7sentinelroom"
ROOM = f"!{ROOM_OPAQUE}:{LOCAL}"
ISSUER = "https://bridge.qz7sentinel.example"
CONTEXT = "ctx-qz7sentinel-0001"
AGENT = AgentIdentity(namespace="kagent", name="my-agent")
OTHER_CONTEXT, OTHER_ISSUER = CONTEXT + "-other", ISSUER + "/other"
OTHER_AGENT = AgentIdentity(namespace="kagent", name="qz7sentinel-agent")
PRIVATE = generate_private_key()
OTHER_PRIVATE = generate_private_key()
PUBLIC = {key_id(PRIVATE): PRIVATE.public_key()}
T0 = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
INVALID, EXPIRED = ReasonCode.ASSERTION_INVALID, ReasonCode.ASSERTION_EXPIRED
B64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _key(mxid: str = MXID, origin: OriginKind = OriginKind.NATIVE_LOCAL,
         room: str = ROOM, kind: ScopeKind = ScopeKind.CONTROL_ROOM) -> ScopeKey:
    return ScopeKey(principal=Principal(mxid=mxid, origin=origin), agent=AGENT,
                    scope=MemoryScope(kind=kind, room_id=room))


def _sign(key: ScopeKey | None = None, **kw: Any) -> str:
    kw.setdefault("private_key", PRIVATE)
    kw.setdefault("issuer", ISSUER)
    kw.setdefault("audience", [LOCAL])
    kw.setdefault("context_id", CONTEXT)
    kw.setdefault("now", T0)
    return sign_scope_assertion(key or _key(), **kw)


def _verify(token: Any, **kw: Any) -> ScopeAssertion:
    kw.setdefault("public_keys", PUBLIC)
    kw.setdefault("issuer", ISSUER)
    kw.setdefault("agent", AGENT)
    kw.setdefault("context_id", CONTEXT)
    kw.setdefault("now", T0)
    return verify_scope_assertion(token, **kw)


def _texts(err: BaseException) -> list[str]:
    ids = getattr(err, "ids", {})
    return [str(err), repr(err), repr(err.args), *(str(a) for a in err.args), repr(dict(ids)),
            "".join(traceback.format_exception(err))]


def assert_content_free(err: BaseException, *extra: str) -> None:
    """No identity, key, issuer, context or token text in the error, and nothing chained."""
    assert isinstance(err, GovernanceError)
    assert err.__context__ is None and err.__cause__ is None
    needles = [MXID, LOCALPART, ROOM, ROOM_OPAQUE, ISSUER, CONTEXT, "qz7sentinel"]
    for token in extra:
        if isinstance(token, str):
            needles.append(token)
            needles.extend(p for p in token.split(".") if len(p) >= 6)
    for text in _texts(err):
        for needle in needles:
            if len(needle) >= 6:
                assert needle not in text, (needle, text)


def _denied(token: Any, reason: ReasonCode = INVALID, **kw: Any) -> ScopeDenied:
    with pytest.raises(ScopeDenied) as info:
        _verify(token, **kw)
    assert info.value.reason == reason
    assert_content_free(info.value, token if isinstance(token, str) else "")
    return info.value


# --- round trip and format ---------------------------------------------------------------------


def test_t1_round_trip_gives_back_the_signed_scope() -> None:
    got = _verify(_sign(classification="health"))
    assert got.key == _key() and got.audience == (LOCAL,) and got.classification == "health"
    assert got.issuer == ISSUER and got.context_id == CONTEXT and 16 <= len(got.jti) <= 64
    assert got.issued_at == T0 and got.expires_at == T0 + timedelta(seconds=30)


def test_t1_round_trip_with_the_real_clock() -> None:
    token = _sign(now=None)
    assert _verify(token, now=None).key == _key()


def test_t1_a_stock_jwt_library_reads_the_token() -> None:
    """A bridge in any language signs with a stock library: the token is a plain EdDSA JWT."""
    token = _sign()
    header = jwt.get_unverified_header(token)
    assert header == {"alg": "EdDSA", "kid": key_id(PRIVATE), "typ": "JWT"}
    claims = jwt.decode(token, PRIVATE.public_key(), algorithms=["EdDSA"], audience="kagent/my-agent",
                        issuer=ISSUER, options={"verify_exp": False, "verify_iat": False})
    assert set(claims) == {"iss", "aud", "sub", "org", "room", "cls", "out", "ctx", "iat", "exp",
                           "jti"}
    assert claims["sub"] == MXID and claims["out"] == [LOCAL] and claims["exp"] - claims["iat"] == 30


def test_t1_a_token_from_a_stock_library_verifies() -> None:
    claims = {"iss": ISSUER, "aud": "kagent/my-agent", "sub": MXID, "org": "native_local",
              "room": ROOM, "cls": "personal", "out": [LOCAL], "ctx": CONTEXT,
              "iat": int(T0.timestamp()), "exp": int(T0.timestamp()) + 60,
              "jti": "stockLibraryToken00001"}
    token = jwt.encode(claims, PRIVATE, algorithm="EdDSA", headers={"kid": key_id(PRIVATE)})
    assert _verify(token).jti == "stockLibraryToken00001"


def test_t1_every_token_has_its_own_jti() -> None:
    assert len({_verify(_sign()).jti for _ in range(50)}) == 50


def test_t1_output_audience_is_sorted_and_deduplicated() -> None:
    got = _verify(_sign(audience=["b.example", LOCAL, "b.example"]))
    assert got.audience == ("b.example", LOCAL)


@pytest.mark.parametrize("audience", [[], LOCAL, [MXID], ["bad server!"], [LOCAL, None], None],
                         ids=str)
def test_t1_bad_output_audience_is_refused_by_sign(audience: Any) -> None:
    with pytest.raises(GovernanceError) as info:
        _sign(audience=audience)
    assert_content_free(info.value)


def test_t1_audience_too_large_for_a_token_is_refused_by_sign() -> None:
    many = [f"s{i:04d}.example.org" for i in range(400)]
    with pytest.raises(InvalidInput) as info:
        _sign(audience=many)
    assert info.value.ids.get("field") == "audience"


# --- keys: the runtime verifies, it cannot mint --------------------------------------------------


def test_t1_verifying_needs_only_the_public_key_and_the_verifier_refuses_a_private_one() -> None:
    token = _sign()
    assert _verify(token, public_keys={key_id(PRIVATE): PRIVATE.public_key()}).key == _key()
    with pytest.raises(InvalidInput) as info:
        _verify(token, public_keys={key_id(PRIVATE): PRIVATE})
    assert info.value.ids.get("field") == "public_keys"


def test_t1_signing_needs_the_private_key() -> None:
    for bad in (PRIVATE.public_key(), b"k" * 32, "secret", None):
        with pytest.raises(InvalidInput) as info:
            _sign(private_key=bad)
        assert info.value.ids.get("field") == "private_key"


def test_t1_rotation_two_public_keys_verify_tokens_of_either_bridge_key() -> None:
    keys = {"old": PRIVATE.public_key(), "new": OTHER_PRIVATE.public_key()}
    old = _sign(kid="old")
    new = _sign(private_key=OTHER_PRIVATE, kid="new")
    assert _verify(old, public_keys=keys).key == _verify(new, public_keys=keys).key == _key()
    _denied(new, ReasonCode.ASSERTION_UNKNOWN_KEY, public_keys={"old": keys["old"]})
    _denied(_sign(private_key=OTHER_PRIVATE, kid="old"), public_keys=keys)  # kid lies


def test_t1_hs256_with_the_public_key_as_the_hmac_secret_is_invalid() -> None:
    """The classic confusion attack, made with PyJWT's own HMAC over the raw public key."""
    from cryptography.hazmat.primitives import serialization

    raw = PRIVATE.public_key().public_bytes(serialization.Encoding.Raw,
                                            serialization.PublicFormat.Raw)
    claims = jwt.decode(_sign(), options={"verify_signature": False})
    forged = jwt.encode(claims, raw, algorithm="HS256", headers={"kid": key_id(PRIVATE)})
    _denied(forged)


# --- tampering and fuzz ------------------------------------------------------------------------


def test_t1_tampering_any_single_character_is_refused() -> None:
    token = _sign()
    for i in range(len(token)):
        for c in {"A", "_", ".", B64_ALPHABET[(B64_ALPHABET.find(token[i]) + 1) % 64]}:
            if c != token[i]:
                bad = token[:i] + c + token[i + 1:]
                with pytest.raises(ScopeDenied) as info:
                    _verify(bad)
                assert info.value.reason in (INVALID, ReasonCode.ASSERTION_UNKNOWN_KEY)


def _mutate(rng: random.Random, token: str) -> str:
    chars = list(token)
    pool = B64_ALPHABET + ".=+/ \n\x00é"
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        op = rng.randrange(6)
        i = rng.randrange(len(chars)) if chars else 0
        if op == 0 and chars:
            chars[i] = rng.choice(pool)
        elif op == 1 and chars:
            del chars[i]
        elif op == 2:
            chars.insert(i, rng.choice(pool))
        elif op == 3 and len(chars) > 1:
            j = min(i + 1, len(chars) - 1)
            chars[i], chars[j] = chars[j], chars[i]
        elif op == 4:
            chars = chars[: rng.randrange(len(chars) + 1)]
        elif chars:
            chars[i] = chars[i].swapcase()
    return "".join(chars)


def test_t1_fuzz_mutations_only_ever_raise_scope_denied() -> None:
    """1,500 seeded mutations: nothing but ``ScopeDenied``, and only the original token is ever
    accepted (so no mutation can yield another scope)."""
    token, key = _sign(), _key()
    rng = random.Random(20261201)
    denied = 0
    for n in range(1500):
        bad = _mutate(rng, token)
        try:
            got = _verify(bad)
        except ScopeDenied as err:
            denied += 1
            assert err.reason in (INVALID, ReasonCode.ASSERTION_UNKNOWN_KEY)
            assert err.__context__ is None and err.__cause__ is None
            if n % 50 == 0:
                assert_content_free(err, token, bad)
        else:
            assert bad == token and got.key == key
    assert denied > 1400


def test_t1_length_is_bounded_before_any_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(assertion_mod, "_envelope", lambda s: calls.append(s))
    _denied("A" * (MAX_TOKEN_CHARS + 1))
    _denied("é" * 10)
    assert calls == []


def test_t1_the_signature_is_checked_before_the_claims_are_parsed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[Any] = []
    real = assertion_mod._parse
    monkeypatch.setattr(assertion_mod, "_parse", lambda c: parsed.append(c) or real(c))
    _denied(_sign(private_key=OTHER_PRIVATE, kid=key_id(PRIVATE)))
    assert parsed == []
    _verify(_sign())
    assert len(parsed) == 1


# --- clocks and lifetime -----------------------------------------------------------------------


def test_t1_expired_exactly_at_exp_plus_leeway_and_valid_just_before() -> None:
    token = _sign(lifetime=timedelta(seconds=60))
    end = T0 + timedelta(seconds=60)
    assert _verify(token, now=end + timedelta(seconds=4)).key == _key()
    _denied(token, EXPIRED, now=end + timedelta(seconds=5))
    _denied(token, EXPIRED, now=end + timedelta(days=3650))
    assert _verify(token, now=end + timedelta(seconds=29), leeway=timedelta(seconds=30))


def test_t1_issued_beyond_the_leeway_in_the_future_is_invalid() -> None:
    token = _sign()
    assert _verify(token, now=T0 - timedelta(seconds=5)).key == _key()
    _denied(token, INVALID, now=T0 - timedelta(seconds=6))


def test_t1_verify_clock_in_another_timezone_is_the_same_instant() -> None:
    tz = timezone(timedelta(hours=-7))
    assert _verify(_sign(now=T0.astimezone(tz)), now=T0.astimezone(tz)).issued_at == T0


@pytest.mark.parametrize("lifetime", [timedelta(0), timedelta(seconds=61), timedelta(minutes=5),
                                      timedelta(milliseconds=1500), -timedelta(seconds=1), 30],
                         ids=str)
def test_t1_sign_refuses_a_lifetime_outside_1_to_60_seconds(lifetime: Any) -> None:
    with pytest.raises(InvalidInput) as info:
        _sign(lifetime=lifetime)
    assert info.value.ids.get("field") == "lifetime"


def test_t1_lifetime_bounds_themselves_are_accepted() -> None:
    for seconds in (1, 60):
        got = _verify(_sign(lifetime=timedelta(seconds=seconds)))
        assert got.expires_at - got.issued_at == timedelta(seconds=seconds) <= MAX_LIFETIME


@pytest.mark.parametrize(
    "kw",
    [{"now": datetime(2030, 1, 2)}, {"now": 0}, {"leeway": timedelta(seconds=31)},
     {"leeway": -timedelta(seconds=1)}, {"leeway": 5}, {"public_keys": {}},
     {"public_keys": [PRIVATE.public_key()]}, {"issuer": ""}, {"issuer": "has space"},
     {"issuer": None}, {"agent": "kagent/my-agent"}, {"context_id": 7}],
    ids=str,
)
def test_t1_verify_refuses_bad_configuration_as_invalid_input(kw: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput) as info:
        _verify(_sign(), **kw)
    assert_content_free(info.value)


@pytest.mark.parametrize(
    "kw", [{"now": datetime(2030, 1, 2)}, {"now": datetime(1969, 12, 31, tzinfo=UTC)},
           {"now": datetime.max.replace(tzinfo=UTC)}, {"issuer": "two words"},
           {"context_id": ""}, {"context_id": "x" * 257}, {"jti": "short"}, {"kid": "a b"},
           {"classification": "Personal"}],
    ids=str,
)
def test_t1_sign_refuses_bad_arguments(kw: dict[str, Any]) -> None:
    with pytest.raises(GovernanceError) as info:
        _sign(**kw)
    assert_content_free(info.value)


# --- identities ----------------------------------------------------------------------------------


@pytest.mark.parametrize("origin,mxid", [(OriginKind.EXTERNAL_APPSERVICE, "@telegram_42:example.org"),
                                         (OriginKind.REMOTE_FEDERATED, "@bob:remote.example")])
def test_s5_bridged_and_federated_principals_are_signable_and_refused_later(
        origin: OriginKind, mxid: str) -> None:
    got = _verify(_sign(_key(mxid=mxid, origin=origin)))
    assert got.principal.origin is origin
    with pytest.raises(ScopeDenied):
        got.key.require_servable(LOCAL)


def test_s3_sign_refuses_a_cross_room_or_non_key() -> None:
    with pytest.raises(ScopeDenied) as info:
        _sign(_key(kind=ScopeKind.CROSS_ROOM))
    assert info.value.reason == ReasonCode.SCOPE_KIND_RESERVED
    with pytest.raises(InvalidInput):
        sign_scope_assertion("not a key", private_key=PRIVATE, issuer=ISSUER,  # type: ignore[arg-type]
                             audience=[LOCAL], context_id=CONTEXT)


# --- content-free errors and reprs -------------------------------------------------------------


def test_b6_every_error_is_content_free_even_in_tracebacks() -> None:
    token = _sign()
    head, payload, sig = token.split(".")
    errors: list[tuple[BaseException, str]] = []

    def collect(fn: Callable[[], Any], tok: str = "") -> None:
        try:
            fn()
        except GovernanceError as err:
            errors.append((err, tok))
        else:
            pytest.fail("expected a refusal")

    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    # the signature's last two characters changed, never to themselves (a random jti ends a
    # signature in "AA" once in 256 runs)
    tampered = token[:-2] + ("AQ" if token[-2:] != "AQ" else "Ag")
    bad_tokens = [tampered, f"{head}.{payload}X.{sig}",
                  jwt.encode({**claims, "sub": LOCALPART}, PRIVATE, algorithm="EdDSA",
                             headers={"kid": key_id(PRIVATE)}),
                  jwt.encode({**claims, "room": ROOM_OPAQUE}, PRIVATE, algorithm="EdDSA",
                             headers={"kid": key_id(PRIVATE)}),
                  _sign(private_key=OTHER_PRIVATE, kid=key_id(PRIVATE)),
                  _sign(private_key=OTHER_PRIVATE), f"{MXID}.{ROOM}.{ISSUER}"]
    for bad in bad_tokens:
        collect(lambda bad=bad: _verify(bad), bad)
    collect(lambda: _verify(token, now=T0 + timedelta(hours=1)), token)
    collect(lambda: _verify(token, now=T0 - timedelta(hours=1)), token)
    collect(lambda: _verify(token, context_id=OTHER_CONTEXT), token)
    collect(lambda: _verify(token, agent=OTHER_AGENT), token)
    collect(lambda: _verify(token, issuer=OTHER_ISSUER), token)
    collect(lambda: _sign(audience=[MXID]))
    collect(lambda: _sign(audience=ROOM))
    collect(lambda: _sign(_key(kind=ScopeKind.CROSS_ROOM)))
    collect(lambda: ScopeAssertion(principal=MXID, agent=None, room_id=ROOM, audience=[LOCAL],
                                   issued_at=T0, expires_at=T0))
    assert len(errors) == 16
    for err, tok in errors:
        assert_content_free(err, tok)


def test_b6_scope_assertion_repr_has_no_mxid_room_issuer_or_context() -> None:
    got = _verify(_sign())
    texts = [repr(got), str(got), f"{got}", f"{got!r}", repr(list(got.__repr_args__())),
             got.__repr_str__(", "), repr(got.key), repr([got]), repr({"a": got})]
    for text in texts:
        for needle in (MXID, LOCALPART, ROOM, ROOM_OPAQUE, ISSUER, CONTEXT, got.jti):
            assert needle not in text, (needle, text)
    assert got.key.opaque_id in repr(got)


# --- the model itself --------------------------------------------------------------------------


def _assertion(**overrides: Any) -> ScopeAssertion:
    fields: dict[str, Any] = {"principal": _key().principal, "agent": _key().agent,
                              "room_id": ROOM, "audience": [LOCAL], "issued_at": T0,
                              "expires_at": T0 + timedelta(seconds=60), "issuer": ISSUER,
                              "context_id": CONTEXT, "jti": "modelTestJti0000000001"}
    fields.update(overrides)
    return ScopeAssertion(**fields)


def test_t1_scope_assertion_model_normalises_and_is_frozen() -> None:
    tz = timezone(timedelta(hours=2))
    got = _assertion(audience={"b.example", LOCAL}, issued_at=T0.astimezone(tz),
                     principal={"mxid": MXID, "origin": "native_local"})
    assert got.audience == ("b.example", LOCAL)
    assert got.issued_at == T0 and got.issued_at.utcoffset() == timedelta(0)
    assert got.key == _key()
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error type varies
        got.room_id = "!other:example.org"  # type: ignore[misc]
    assert got.room_id == ROOM


@pytest.mark.parametrize(
    "overrides",
    [{"extra": 1}, {"room_id": ROOM_OPAQUE}, {"room_id": None}, {"principal": MXID},
     {"agent": "kagent/my-agent"}, {"audience": LOCAL}, {"audience": []},
     {"issued_at": datetime(2030, 1, 2)}, {"issued_at": T0 + timedelta(microseconds=1)},
     {"expires_at": T0}, {"expires_at": T0 + MAX_LIFETIME + timedelta(seconds=1)},
     {"issuer": None}, {"context_id": ""}, {"jti": "a" * 15}, {"jti": "a" * 65},
     {"jti": "has.dot.jti.0000000000"}, {"classification": "UPPER"}],
    ids=str,
)
def test_t1_scope_assertion_model_refuses_invalid_fields(overrides: dict[str, Any]) -> None:
    with pytest.raises((InvalidInput, InvalidIdentity)) as info:
        _assertion(**overrides)
    assert_content_free(info.value)


def test_t1_no_shared_secret_mode_remains() -> None:
    """The HMAC format is gone: a v1 HMAC token and a ``secret=`` argument are both refused."""
    with pytest.raises(TypeError):
        sign_scope_assertion(_key(), secret=b"k" * 32, audience=[LOCAL])  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        verify_scope_assertion(_sign(), secret=b"k" * 32)  # type: ignore[call-arg]
    _denied("v1." + "e30" + "." + "A" * 43)
    assert not hasattr(assertion_mod, "MIN_SECRET_BYTES")
    assert isinstance(PRIVATE, Ed25519PrivateKey)


def test_t1_verify_names_the_agent_and_the_context_explicitly() -> None:
    """No silent skip: ``agent`` is required, and ``context_id`` must be passed (``None`` only
    by a verifier that cannot know the request's A2A context)."""
    token = _sign()
    with pytest.raises(TypeError):
        verify_scope_assertion(token, public_keys=PUBLIC, issuer=ISSUER,  # type: ignore[call-arg]
                               context_id=CONTEXT, now=T0)
    with pytest.raises(TypeError):
        verify_scope_assertion(token, public_keys=PUBLIC, issuer=ISSUER,  # type: ignore[call-arg]
                               agent=AGENT, now=T0)
    with pytest.raises(InvalidInput):
        verify_scope_assertion(token, public_keys=PUBLIC, issuer=ISSUER,
                               agent=None, context_id=CONTEXT, now=T0)  # type: ignore[arg-type]
    assert verify_scope_assertion(token, public_keys=PUBLIC, issuer=ISSUER, agent=AGENT,
                                  context_id=None, now=T0).context_id == CONTEXT
