"""Bridge-signed scope assertion (SPEC S4, S5, S6; CONTRACT "Inside kagent / google-adk").

Pure, synchronous tests: no database.  The MXID, room and secret are distinctive sentinels so
that every error can be searched for them; hand-made tokens are built from the documented
format (``_forge``), which also pins that format for the bridge's own implementation.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import random
import traceback
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from kagent_governed_memory import assertion as assertion_mod
from kagent_governed_memory.assertion import (
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

LOCAL = "example.org"
LOCALPART = "qz7sentinel-user"
MXID = f"@{LOCALPART}:{LOCAL}"
ROOM_OPAQUE = "qz7sentinelroom"
ROOM = f"!{ROOM_OPAQUE}:{LOCAL}"
SECRET = b"qz7-sentinel-secret-0123456789abcdef"
OTHER_SECRET = b"another-secret-of-enough-length-0123"
T0 = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
IAT = int(T0.timestamp())
SKEW = timedelta(seconds=30)
INVALID, EXPIRED = ReasonCode.ASSERTION_INVALID, ReasonCode.ASSERTION_EXPIRED
B64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _key(mxid: str = MXID, origin: OriginKind = OriginKind.NATIVE_LOCAL,
         room: str = ROOM, kind: ScopeKind = ScopeKind.CONTROL_ROOM) -> ScopeKey:
    return ScopeKey(
        principal=Principal(mxid=mxid, origin=origin),
        agent=AgentIdentity(namespace="kagent", name="my-agent"),
        scope=MemoryScope(kind=kind, room_id=room),
    )


def _sign(key: ScopeKey | None = None, **kw: Any) -> str:
    kw.setdefault("secret", SECRET)
    kw.setdefault("audience", [LOCAL])
    kw.setdefault("now", T0)
    return sign_scope_assertion(key or _key(), **kw)


def _verify(token: Any, **kw: Any) -> ScopeAssertion:
    kw.setdefault("secret", SECRET)
    kw.setdefault("now", T0)
    return verify_scope_assertion(token, **kw)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(seg: str) -> bytes:
    return base64.urlsafe_b64decode(seg + "=" * (-len(seg) % 4))


def _body(**overrides: Any) -> dict[str, Any]:
    body = {"v": 1, "sub": MXID, "org": "native_local", "ns": "kagent", "agt": "my-agent",
            "room": ROOM, "cls": "personal", "aud": [LOCAL], "iat": IAT, "exp": IAT + 60}
    body.update(overrides)
    return body


def _canon(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def _forge(payload: bytes | dict[str, Any], secret: bytes = SECRET, version: str = "v1") -> str:
    """A token with a *valid* MAC over arbitrary payload bytes, per the documented format."""
    raw = _canon(payload) if isinstance(payload, dict) else payload
    seg = _b64(raw)
    mac = hmac.new(secret, f"{version}.{seg}".encode(), hashlib.sha256).digest()
    return f"{version}.{seg}.{_b64(mac)}"


def _texts(err: BaseException) -> list[str]:
    ids = getattr(err, "ids", {})
    return [str(err), repr(err), repr(err.args), *(str(a) for a in err.args), repr(dict(ids)),
            "".join(traceback.format_exception(err))]


def assert_content_free(err: BaseException, *extra: str) -> None:
    """No identity, secret or token text anywhere in the error, and nothing chained to it."""
    assert isinstance(err, GovernanceError)
    assert err.__context__ is None and err.__cause__ is None
    needles = [MXID, LOCALPART, ROOM, ROOM_OPAQUE, SECRET.decode(), SECRET.hex(), repr(SECRET)]
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


def test_s6_round_trip_gives_back_the_signed_key() -> None:
    key = _key()
    got = _verify(_sign(key, lifetime=timedelta(seconds=90)))
    assert got.key == key and hash(got.key) == hash(key)
    assert got.key.opaque_id == key.opaque_id
    assert (got.principal, got.agent, got.room_id) == (key.principal, key.agent, ROOM)
    assert got.audience == (LOCAL,)
    assert got.issued_at == T0 and got.expires_at == T0 + timedelta(seconds=90)


def test_s6_round_trip_with_the_real_clock() -> None:
    assert verify_scope_assertion(sign_scope_assertion(_key(), secret=SECRET, audience=[LOCAL]),
                                  secret=SECRET).key == _key()


def test_s6_token_format_is_pinned() -> None:
    """The bridge may sign in another language: the bytes are the documented ones, exactly."""
    token = _sign(now=T0 + timedelta(microseconds=999_999))  # truncated to the whole second
    assert token == _forge(_body())
    assert _unb64(token.split(".")[1]) == (
        b'{"v":1,"sub":"@qz7sentinel-user:example.org","org":"native_local","ns":"kagent",'
        b'"agt":"my-agent","room":"!qz7sentinelroom:example.org","cls":"personal",'
        b'"aud":["example.org"],'
        b'"iat":1893553445,"exp":1893553505}'
    )
    assert "=" not in token


def test_s5_audience_is_sorted_and_deduplicated() -> None:
    servers = ["z.example", LOCAL, "[::1]:8448", "z.example", "a.example:8448"]
    got = _verify(_sign(audience=servers))
    assert got.audience == ("[::1]:8448", "a.example:8448", LOCAL, "z.example")
    assert _unb64(_sign(audience=servers).split(".")[1]).count(b"z.example") == 1
    assert _sign(audience=tuple(reversed(servers))) == _sign(audience=servers)


@pytest.mark.parametrize(
    "audience",
    [LOCAL, "localhost", [], [""], ["bad server"], ["a..b"], [".example.org"], ["ex.org:99999"], ["ünï.org"],
     [7], [MXID], [ROOM], [LOCAL, None], None, b"example.org", "x" * 300],
    ids=lambda a: type(a).__name__ + str(len(a) if hasattr(a, "__len__") else ""),
)
def test_s5_bad_audience_is_refused_by_sign(audience: Any) -> None:
    """A bare ``str`` is refused whole: iterating it would sign single-letter "servers"."""
    with pytest.raises(InvalidIdentity) as info:
        _sign(audience=audience)
    assert info.value.reason == ReasonCode.INVALID_IDENTITY
    assert_content_free(info.value)


def test_s5_audience_too_large_for_a_token_is_refused_by_sign() -> None:
    servers = [f"server-{i:04d}.example.org" for i in range(200)]
    with pytest.raises(InvalidInput) as info:
        _sign(audience=servers)
    assert_content_free(info.value)
    _denied(_forge(_body(aud=sorted(servers))))  # and verify bounds the length anyway


# --- forgery -----------------------------------------------------------------------------------


def test_s6_tampering_any_single_character_is_invalid() -> None:
    token = _sign()
    head, payload, mac = token.split(".")
    tried = 0
    for seg_index, seg in ((1, payload), (2, mac)):
        for i, orig in enumerate(seg):
            for ch in B64_ALPHABET + "=+/ .":
                if ch == orig:
                    continue
                parts = [head, payload, mac]
                parts[seg_index] = seg[:i] + ch + seg[i + 1:]
                try:
                    _verify(".".join(parts))
                except ScopeDenied as err:
                    assert err.reason == INVALID
                    assert err.__context__ is None and err.__cause__ is None
                else:
                    pytest.fail(f"tampered token accepted at segment {seg_index} index {i}")
                tried += 1
    assert tried > 60 * (len(payload) + len(mac))


def test_s6_flipping_any_bit_of_payload_or_mac_bytes_is_invalid() -> None:
    token = _sign()
    head, payload, mac = token.split(".")
    for seg_index, raw in ((1, _unb64(payload)), (2, _unb64(mac))):
        for i in range(len(raw)):
            for bit in range(8):
                flipped = bytearray(raw)
                flipped[i] ^= 1 << bit
                parts = [head, payload, mac]
                parts[seg_index] = _b64(bytes(flipped))
                _denied(".".join(parts))


def test_s6_token_signed_with_another_secret_is_invalid() -> None:
    assert _verify(_sign(secret=OTHER_SECRET), secret=OTHER_SECRET).key == _key()
    _denied(_sign(secret=OTHER_SECRET))
    _denied(_forge(_body(), secret=OTHER_SECRET))


@pytest.mark.parametrize(
    "reencode",
    [
        lambda b: json.dumps(b).encode(),  # default ", " / ": " separators
        lambda b: json.dumps(b, separators=(",", ":"), sort_keys=True).encode(),
        lambda b: json.dumps(b, indent=1).encode(),
        lambda b: json.dumps(dict(reversed(list(b.items()))), separators=(",", ":")).encode(),
        lambda b: _canon(b).replace(b'"@', b'"\\u0040'),  # same string, other escape
        lambda b: _canon(b) + b" ",
        lambda b: b" " + _canon(b),
        lambda b: _canon(b).replace(b'"v":1', b'"v":1.0'),
        lambda b: _canon(b).replace(b'"sub"', b'"sub":"@x:example.org","sub"'),  # duplicate key
        lambda b: _canon(b).replace(b'"iat":', b'"iat":0'),  # leading zero: not JSON
    ],
    ids=["spaces", "sorted", "indent", "reversed", "escape", "trailing", "leading", "float",
         "dupkey", "leading-zero"],
)
def test_s6_reencoded_payload_is_invalid_with_old_or_new_mac(
    reencode: Callable[[dict[str, Any]], bytes],
) -> None:
    """Only the canonical spelling verifies: with the original MAC (forgery) or even with a
    valid MAC over the new spelling (a second token for one assertion)."""
    token = _sign()
    head, _, mac = token.split(".")
    other = reencode(_body())
    assert other != _canon(_body())
    _denied(f"{head}.{_b64(other)}.{mac}")
    _denied(_forge(other))


def test_s6_mac_is_checked_before_json_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[bytes] = []
    real = assertion_mod._parse
    monkeypatch.setattr(assertion_mod, "_parse", lambda raw: parsed.append(raw) or real(raw))
    _denied(_forge(b"{not json", secret=OTHER_SECRET))
    _denied(_sign(secret=OTHER_SECRET))
    assert parsed == []
    _verify(_sign())
    assert len(parsed) == 1


def test_s6_length_is_bounded_before_any_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    decoded: list[str] = []
    real = assertion_mod._unb64
    monkeypatch.setattr(assertion_mod, "_unb64", lambda s: decoded.append(s) or real(s))
    token = _sign()
    _denied(token + "A" * (MAX_TOKEN_CHARS - len(token) + 1))
    _denied("v1." + "A" * 10**6 + "." + "A" * 43)
    assert decoded == []
    _verify(token)
    assert decoded


# --- lifetime and clock ------------------------------------------------------------------------


def test_s6_expired_exactly_at_exp_plus_skew_and_valid_just_before() -> None:
    token = _sign(lifetime=timedelta(seconds=60))
    exp = T0 + timedelta(seconds=60)
    assert _verify(token, now=exp + SKEW - timedelta(microseconds=1)).key == _key()
    _denied(token, EXPIRED, now=exp + SKEW)
    _denied(token, EXPIRED, now=exp + timedelta(days=3650))
    assert _verify(token, now=exp - timedelta(microseconds=1), max_skew=timedelta(0))
    _denied(token, EXPIRED, now=exp, max_skew=timedelta(0))


def test_s6_issued_too_far_in_the_future_is_invalid() -> None:
    token = _sign()
    assert _verify(token, now=T0 - SKEW).key == _key()
    _denied(token, INVALID, now=T0 - SKEW - timedelta(microseconds=1))
    _denied(token, INVALID, now=T0 - timedelta(seconds=1), max_skew=timedelta(0))


def test_s6_verify_clock_in_another_timezone_is_the_same_instant() -> None:
    tz = timezone(timedelta(hours=-7))
    _denied(_sign(), EXPIRED, now=(T0 + timedelta(seconds=90)).astimezone(tz))
    assert _verify(_sign(), now=T0.astimezone(tz)).issued_at == T0


@pytest.mark.parametrize(
    "lifetime",
    [MAX_LIFETIME + timedelta(seconds=1), timedelta(hours=1), timedelta(0),
     timedelta(seconds=-60), timedelta(milliseconds=500), timedelta(seconds=1.5), 60, None],
    ids=str,
)
def test_s6_sign_refuses_lifetime_outside_1s_to_5min(lifetime: Any) -> None:
    with pytest.raises(InvalidInput) as info:
        _sign(lifetime=lifetime)
    assert info.value.reason == ReasonCode.INVALID_ARGUMENT
    assert_content_free(info.value)


def test_s6_lifetime_bounds_themselves_are_accepted() -> None:
    for lifetime in (timedelta(seconds=1), MAX_LIFETIME):
        assert _verify(_sign(lifetime=lifetime)).expires_at == T0 + lifetime


def test_s6_hand_made_token_with_valid_mac_but_bad_lifetime_is_invalid() -> None:
    max_s = int(MAX_LIFETIME.total_seconds())
    assert _verify(_forge(_body(exp=IAT + max_s))).expires_at == T0 + MAX_LIFETIME
    _denied(_forge(_body(exp=IAT + max_s + 1)))
    _denied(_forge(_body(exp=IAT + 86400 * 365)))
    _denied(_forge(_body(exp=IAT)))
    _denied(_forge(_body(exp=IAT - 1)))


# --- malformed tokens --------------------------------------------------------------------------


def _swap_version(token: str, version: str) -> str:
    return _forge(_unb64(token.split(".")[1]), version=version)


MALFORMED: list[tuple[str, Callable[[str], Any]]] = [
    ("empty", lambda t: ""),
    ("version-only", lambda t: "v1"),
    ("dots", lambda t: "v1.."),
    ("short", lambda t: "v1.a.b"),
    ("none", lambda t: None),
    ("int", lambda t: 1234567),
    ("bytes", lambda t: t.encode()),
    ("bytearray", lambda t: bytearray(t.encode())),
    ("list", lambda t: t.split(".")),
    ("trailing-dot", lambda t: t + "."),
    ("four-parts", lambda t: t + ".AAAA"),
    ("two-parts", lambda t: t.rsplit(".", 1)[0]),
    ("no-version", lambda t: t.split(".", 1)[1]),
    ("upper-version", lambda t: "V" + t[1:]),
    ("v2-with-valid-mac", lambda t: _swap_version(t, "v2")),
    ("v0-with-valid-mac", lambda t: _swap_version(t, "v0")),
    ("padded-payload", lambda t: t.replace(".", "==.", 2).replace("v1==.", "v1.", 1)),
    ("padded-mac", lambda t: t + "="),
    ("std-base64-mac", lambda t: t[:-1] + "+"),
    ("trailing-newline", lambda t: t + "\n"),
    ("leading-space", lambda t: " " + t),
    ("inner-space", lambda t: t[:20] + " " + t[21:]),
    ("unicode-letter", lambda t: t[:10] + "é" + t[11:]),
    ("fullwidth-letter", lambda t: t[:10] + "Ａ" + t[11:]),
    ("nul", lambda t: t[:10] + "\x00" + t[11:]),
    ("surrogate", lambda t: t[:10] + "\ud800" + t[11:]),
    ("huge", lambda t: t * 100),
    ("huge-unicode", lambda t: "é" * (MAX_TOKEN_CHARS + 1)),
    ("mac-cut", lambda t: t[:-4]),
    ("mac-extended", lambda t: t + "AAAA"),
    ("payload-mod4-is-1", lambda t: _swap_payload(t, "AAAAA")),
    ("empty-payload", lambda t: _swap_payload(t, "")),
]


def _swap_payload(token: str, seg: str) -> str:
    head, _, mac = token.split(".")
    return f"{head}.{seg}.{mac}"


@pytest.mark.parametrize("mutate", [m for _, m in MALFORMED], ids=[n for n, _ in MALFORMED])
def test_s6_malformed_or_non_str_token_is_invalid(mutate: Callable[[str], Any]) -> None:
    token = _sign()
    bad = mutate(token)
    assert bad != token
    _denied(bad)


# --- secrets -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "secret", [b"", b"x" * 31, SECRET.decode(), bytearray(SECRET), None, 12345678], ids=repr,
)
def test_s6_short_or_non_bytes_secret_is_refused_on_both_sides(secret: Any) -> None:
    with pytest.raises(InvalidInput) as info:
        _sign(secret=secret)
    assert info.value.reason == ReasonCode.INVALID_ARGUMENT
    assert_content_free(info.value)
    with pytest.raises(InvalidInput) as info:
        _verify(_sign(), secret=secret)
    assert not isinstance(info.value, ScopeDenied)  # a deployment error, not a bad token
    assert_content_free(info.value, _sign())


def test_s6_a_32_byte_secret_is_enough() -> None:
    secret = b"k" * 32
    assert _verify(_sign(secret=secret), secret=secret).key == _key()


@pytest.mark.parametrize(
    "kw",
    [{"now": datetime(2030, 1, 2, 3, 4, 5)}, {"now": "2030-01-02T03:04:05Z"}, {"now": 0},
     {"max_skew": timedelta(seconds=-1)}, {"max_skew": MAX_LIFETIME + timedelta(seconds=1)},
     {"max_skew": 30}],
    ids=str,
)
def test_s6_verify_refuses_naive_clock_or_unbounded_skew(kw: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput) as info:
        _verify(_sign(), **kw)
    assert_content_free(info.value, _sign())


def test_s6_sign_refuses_naive_or_out_of_range_clock() -> None:
    for now in (datetime(2030, 1, 2), datetime(1969, 12, 31, tzinfo=UTC),
                datetime.max.replace(tzinfo=UTC), "now"):
        with pytest.raises(InvalidInput):
            _sign(now=now)


# --- identities --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mxid", "origin", "reason"),
    [
        ("@telegram_123:example.org", OriginKind.EXTERNAL_APPSERVICE, ReasonCode.FEDERATION_DENIED),
        ("@bob:remote.example", OriginKind.REMOTE_FEDERATED, ReasonCode.FEDERATION_DENIED),
        (MXID, OriginKind.OAUTH_CLIENT, ReasonCode.FEDERATION_DENIED),
        ("@carol:social.example", OriginKind.FEDIVERSE_ACTOR, ReasonCode.FEDERATION_DENIED),
        ("@dave:remote.example", OriginKind.NATIVE_LOCAL, ReasonCode.REMOTE_SERVER_DENIED),
    ],
)
def test_s5_bridged_and_federated_principals_are_representable_and_refused_later(
    mxid: str, origin: OriginKind, reason: ReasonCode,
) -> None:
    """The assertion states the truth; the store's ``require_servable`` is what refuses (S5)."""
    key = _key(mxid=mxid, origin=origin)
    got = _verify(_sign(key, audience=[LOCAL, "remote.example"]))
    assert got.key == key and got.principal.origin is origin
    assert got.key != _key()
    with pytest.raises(ScopeDenied) as info:
        got.key.require_servable(LOCAL)
    assert info.value.reason == reason


def test_s3_sign_refuses_a_cross_room_or_non_key() -> None:
    with pytest.raises(ScopeDenied) as info:
        _sign(_key(kind=ScopeKind.CROSS_ROOM))
    assert info.value.reason == ReasonCode.SCOPE_KIND_RESERVED
    assert_content_free(info.value)
    for not_a_key in ({"principal": MXID}, MXID, None):
        with pytest.raises(InvalidInput) as info2:
            sign_scope_assertion(not_a_key, secret=SECRET, audience=[LOCAL], now=T0)
        assert_content_free(info2.value)


BAD_BODIES: list[tuple[str, Any]] = [
    ("bare-localpart", _body(sub=LOCALPART)),
    ("no-server", _body(sub="@" + LOCALPART)),
    ("empty-server", _body(sub=MXID.split(":")[0] + ":")),
    ("mxid-space", _body(sub=MXID.replace("-", " "))),
    ("mxid-too-long", _body(sub="@" + "a" * 300 + ":" + LOCAL)),
    ("room-malformed", _body(room=ROOM_OPAQUE)),
    ("room-is-mxid", _body(room=MXID)),
    ("room-bad-server", _body(room=f"!{ROOM_OPAQUE}:bad server")),
    ("origin-unknown", _body(org="admin")),
    ("namespace-upper", _body(ns="Kagent")),
    ("agent-underscore", _body(agt="my_agent")),
    ("aud-empty", _body(aud=[])),
    ("aud-str", _body(aud=LOCAL)),
    ("aud-bad-server", _body(aud=["bad server"])),
    ("aud-unsorted", _body(aud=["z.example", LOCAL])),
    ("aud-duplicate", _body(aud=[LOCAL, LOCAL])),
    ("aud-non-str", _body(aud=[1])),
    ("extra-key", {**_body(), "admin": True}),
    ("missing-key", {k: v for k, v in _body().items() if k != "room"}),
    ("v-2", _body(v=2)),
    ("v-str", _body(v="1")),
    ("v-true", _body(v=True)),
    ("iat-str", _body(iat=str(IAT))),
    ("iat-float", _body(iat=float(IAT))),
    ("iat-negative", _body(iat=-1, exp=59)),
    ("iat-huge", _body(iat=10**20, exp=10**20 + 60)),
    ("exp-null", _body(exp=None)),
    ("sub-null", _body(sub=None)),
    ("sub-list", _body(sub=[MXID])),
    ("array", list(_body().values())),
    ("string", MXID),
    ("null", None),
]
BAD_RAW: list[tuple[str, bytes]] = [
    ("not-json", b"{not json"),
    ("empty", b""),
    ("latin1", _canon(_body()).replace(b"native_local", b"native_l\xe9cal")),
    ("utf8-bom", b"\xef\xbb\xbf" + _canon(_body())),
    ("utf16", json.dumps(_body(), separators=(",", ":")).encode("utf-16")),
    ("deep", b"[" * 2000 + b"]" * 2000),
    ("big-int", _canon(_body()).replace(b'"iat":', b'"iat":' + b"9" * 2000)),
    ("nan", _canon(_body()).replace(str(IAT).encode(), b"NaN")),
]


@pytest.mark.parametrize(
    "payload", [b for _, b in BAD_BODIES] + [r for _, r in BAD_RAW],
    ids=[n for n, _ in BAD_BODIES] + [n for n, _ in BAD_RAW],
)
def test_s1_s3_bad_content_under_a_valid_mac_is_invalid(payload: Any) -> None:
    """A leaked or buggy signer still cannot get a malformed identity or room admitted."""
    assert _verify(_forge(_body())).key == _key()  # the forge itself is sound
    raw = payload if isinstance(payload, bytes) else _canon(payload)
    _denied(_forge(raw))


# --- fuzz --------------------------------------------------------------------------------------


def _mutate(rng: random.Random, token: str) -> str:
    chars = list(token)
    pool = B64_ALPHABET + ".=+/ \n\x00é"
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        op = rng.randrange(7)
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
        elif op == 5:
            j = rng.randrange(i, len(chars) + 1)
            chars[i:i] = chars[i:j]
        elif chars:
            chars[i] = chars[i].swapcase()
    return "".join(chars)


def test_s6_fuzz_mutations_only_ever_raise_scope_denied() -> None:
    """2,000 seeded mutations: nothing but ``ScopeDenied``, and nothing but the original token
    is ever accepted (so no mutation can yield another key)."""
    token, key = _sign(), _key()
    rng = random.Random(20260523)
    denied = 0
    for n in range(2000):
        bad = _mutate(rng, token)
        try:
            got = _verify(bad)
        except ScopeDenied as err:
            denied += 1
            assert err.reason in (INVALID, EXPIRED)
            assert err.__context__ is None and err.__cause__ is None
            if n % 50 == 0:
                assert_content_free(err, token, bad)
        else:
            assert bad == token and got.key == key
    assert denied > 1900


# --- content-free errors and reprs -------------------------------------------------------------


def test_b6_every_error_is_content_free_even_in_tracebacks() -> None:
    token = _sign()
    head, payload, mac = token.split(".")
    errors: list[tuple[BaseException, str]] = []

    def collect(fn: Callable[[], Any], tok: str = "") -> None:
        try:
            fn()
        except GovernanceError as err:
            errors.append((err, tok))
        else:
            pytest.fail("expected a refusal")

    bad_tokens = [token[:-2] + "AA", f"{head}.{payload}X.{mac}", _forge(_body(sub=LOCALPART)),
                  _forge(_body(room=ROOM_OPAQUE)), _forge(_body(aud=[MXID])),
                  _forge(b"{" + MXID.encode()), _forge(_body(exp=IAT + 3600)),
                  _sign(secret=OTHER_SECRET), f"{MXID}.{ROOM}.{SECRET.decode()}"]
    for bad in bad_tokens:
        collect(lambda bad=bad: _verify(bad), bad)
    collect(lambda: _verify(token, now=T0 + timedelta(hours=1)), token)
    collect(lambda: _verify(token, now=T0 - timedelta(hours=1)), token)
    collect(lambda: _verify(token, secret=SECRET[:31]), token)
    collect(lambda: _sign(audience=[MXID]))
    collect(lambda: _sign(audience=ROOM))
    collect(lambda: _sign(secret=SECRET[:31]))
    collect(lambda: _sign(_key(kind=ScopeKind.CROSS_ROOM)))
    collect(lambda: ScopeAssertion(principal=MXID, agent=None, room_id=ROOM, audience=[LOCAL],
                                   issued_at=T0, expires_at=T0))
    assert len(errors) == 17
    for err, tok in errors:
        assert_content_free(err, tok)


def test_b6_scope_assertion_repr_has_no_mxid_or_room() -> None:
    got = _verify(_sign())
    texts = [repr(got), str(got), f"{got}", f"{got!r}", repr(list(got.__repr_args__())),
             got.__repr_str__(", "), repr(got.key), repr([got]), repr({"a": got})]
    for text in texts:
        for needle in (MXID, LOCALPART, ROOM, ROOM_OPAQUE):
            assert needle not in text, (needle, text)
    assert got.key.opaque_id in repr(got)


# --- the model itself --------------------------------------------------------------------------


def _assertion(**overrides: Any) -> ScopeAssertion:
    fields: dict[str, Any] = {"principal": _key().principal, "agent": _key().agent,
                              "room_id": ROOM, "audience": [LOCAL], "issued_at": T0,
                              "expires_at": T0 + timedelta(seconds=60)}
    fields.update(overrides)
    return ScopeAssertion(**fields)


def test_s6_scope_assertion_model_normalises_and_is_frozen() -> None:
    tz = timezone(timedelta(hours=2))
    got = _assertion(audience={"b.example", LOCAL}, issued_at=T0.astimezone(tz),
                     principal={"mxid": MXID, "origin": "native_local"})
    assert got.audience == ("b.example", LOCAL)
    assert got.issued_at == T0 and got.issued_at.utcoffset() == timedelta(0)
    assert got.key == _key()
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error type varies
        got.room_id = "!other:example.org"  # type: ignore[misc]
    assert got.room_id == ROOM
    end = datetime.max.replace(microsecond=0, tzinfo=UTC)  # lifetime check cannot overflow
    assert _assertion(issued_at=end - timedelta(seconds=60), expires_at=end).expires_at == end


@pytest.mark.parametrize(
    "overrides",
    [{"extra": 1}, {"room_id": ROOM_OPAQUE}, {"room_id": None}, {"principal": MXID},
     {"agent": "kagent/my-agent"}, {"audience": LOCAL}, {"audience": []},
     {"issued_at": datetime(2030, 1, 2)}, {"issued_at": T0 + timedelta(microseconds=1)},
     {"issued_at": IAT}, {"expires_at": T0}, {"expires_at": T0 - timedelta(seconds=1)},
     {"expires_at": T0 + MAX_LIFETIME + timedelta(seconds=1)}],
    ids=str,
)
def test_s6_scope_assertion_model_refuses_invalid_fields(overrides: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput) as info:
        _assertion(**overrides)
    assert_content_free(info.value)
