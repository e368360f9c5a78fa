"""Reason codes and the error hierarchy: the one place a database error becomes ours.

Every error carries a stable ``ReasonCode`` and, at most, bounded opaque ids.  Its ``str()``,
``repr()`` and ``args`` never contain memory content, identities or database text: PostgreSQL's
``DETAIL`` ("Failing row contains (...)") and trigger messages echo row values, so database
errors are mapped by SQLSTATE alone and re-raised with the original chain cut.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "AdmissionDenied",
    "ConsentConflict",
    "ConsentRequired",
    "EntryCapReached",
    "ErasureFailed",
    "FactTooLarge",
    "GovernanceError",
    "InvalidIdentity",
    "InvalidInput",
    "ProviderError",
    "ReasonCode",
    "ScopeDenied",
    "StaleGeneration",
    "StoreUnavailable",
    "from_database_error",
]

from ._hints import hint_for
from ._reasons import ReasonCode

_ID_VALUE = re.compile(r"^[A-Za-z0-9_.:-]{1,80}$")


class GovernanceError(Exception):
    """Base of every error the library raises; content-free by construction.

    ``ids`` may only hold bounded opaque identifiers (scope ids, SQLSTATEs, operation names);
    anything else is dropped rather than risk echoing content.
    """

    default_reason: ReasonCode = ReasonCode.DATABASE_ERROR

    def __init__(self, reason: ReasonCode | None = None, **ids: str | int) -> None:
        # An unknown reason (e.g. a message passed the usual way) is dropped, never echoed.
        code = ReasonCode._value2member_map_.get(reason) if isinstance(reason, str) else None
        self.reason: ReasonCode = code or self.default_reason  # type: ignore[assignment]
        self.ids: Mapping[str, str] = {
            k: str(v)
            for k, v in ids.items()
            if _ID_VALUE.fullmatch(str(v)) and _ID_VALUE.fullmatch(k)
        }
        super().__init__(self._render())

    def _render(self) -> str:
        text = self.reason.value
        field = self.ids.get("field", "")
        hint = hint_for(self.reason, field)
        if hint:
            text += f": {hint}"
        if self.ids:
            text += " (" + ", ".join(f"{k}={v}" for k, v in sorted(self.ids.items())) + ")"
        return text

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._render()!r})"

    def __reduce__(self) -> tuple[Any, tuple[type[GovernanceError], str, dict[str, str]]]:
        # keep pickling content-free and lossless
        return (_rebuild, (type(self), self.reason.value, dict(self.ids)))


def _rebuild(cls: type[GovernanceError], reason: str, ids: dict[str, str]) -> GovernanceError:
    return cls(ReasonCode(reason), **ids)


class InvalidInput(GovernanceError):
    default_reason = ReasonCode.INVALID_ARGUMENT


class InvalidIdentity(InvalidInput):
    default_reason = ReasonCode.INVALID_IDENTITY


class ScopeDenied(GovernanceError):
    default_reason = ReasonCode.SCOPE_MISMATCH


class ConsentRequired(GovernanceError):
    default_reason = ReasonCode.CONSENT_REQUIRED


class ConsentConflict(ConsentRequired):
    default_reason = ReasonCode.CONSENT_CONFLICT


class StaleGeneration(ConsentRequired):
    default_reason = ReasonCode.STALE_GENERATION


class EntryCapReached(GovernanceError):
    default_reason = ReasonCode.ENTRY_CAP_REACHED


class FactTooLarge(GovernanceError):
    default_reason = ReasonCode.FACT_TOO_LARGE


class AdmissionDenied(GovernanceError):
    default_reason = ReasonCode.ADMISSION_DENIED


class ErasureFailed(GovernanceError):
    default_reason = ReasonCode.ERASURE_FAILED


class StoreUnavailable(GovernanceError):
    default_reason = ReasonCode.STORE_UNAVAILABLE


class ProviderError(GovernanceError):
    """A model or embedding provider failed; its response body is never kept."""

    default_reason = ReasonCode.EMBEDDING_FAILED


# SQLSTATEs raised by the governed schema (class "KG"; see sql/migrations) and the standard
# ones worth a specific answer.  Everything else becomes DATABASE_ERROR with its SQLSTATE only.
_SQLSTATE: dict[str, tuple[type[GovernanceError], ReasonCode]] = {
    "KGC01": (ConsentRequired, ReasonCode.CONSENT_REQUIRED),
    "KGC02": (ConsentConflict, ReasonCode.CONSENT_CONFLICT),
    "KGC03": (ConsentRequired, ReasonCode.ERASURE_PENDING),
    "KGS01": (StaleGeneration, ReasonCode.STALE_GENERATION),
    "KGE01": (EntryCapReached, ReasonCode.ENTRY_CAP_REACHED),
    "KGF01": (FactTooLarge, ReasonCode.FACT_TOO_LARGE),
    "KGT01": (InvalidInput, ReasonCode.TTL_EXCEEDS_POLICY),
    "KGI01": (InvalidInput, ReasonCode.IMMUTABLE_ENTRY),
    "KGD01": (ScopeDenied, ReasonCode.SCOPE_KIND_RESERVED),
    "KGC04": (ConsentRequired, ReasonCode.CONSENT_POLICY_CHANGED),
    "KGD02": (ScopeDenied, ReasonCode.REMOTE_SERVER_DENIED),
    "KGD03": (ScopeDenied, ReasonCode.PRINCIPAL_OFFBOARDED),
    "KGD04": (ScopeDenied, ReasonCode.ISSUER_NOT_REGISTERED),
    "KGD05": (ScopeDenied, ReasonCode.SCOPE_REF_DENIED),
    "KGD06": (ScopeDenied, ReasonCode.SUBJECT_DENIED),
    "KGD07": (ScopeDenied, ReasonCode.AUDIENCE_DENIED),
    "KGR05": (StoreUnavailable, ReasonCode.SCHEMA_DATA_UNCONVERTIBLE),
    "KGA01": (InvalidInput, ReasonCode.AUDIT_APPEND_ONLY),
    "KGR01": (StoreUnavailable, ReasonCode.SERVICE_ROLE_MISSING),
    "KGR02": (StoreUnavailable, ReasonCode.OPERATOR_ROLE_MISSING),
    "KGR04": (StoreUnavailable, ReasonCode.SIGNAL_PRIVILEGE_MISSING),
    "KGJ01": (ScopeDenied, ReasonCode.ASSERTION_REPLAYED),
    "KGJ02": (ScopeDenied, ReasonCode.ASSERTION_EXPIRED),
    "KGJ03": (ScopeDenied, ReasonCode.REQUEST_NOT_REDEEMED),
    "KGJ04": (ScopeDenied, ReasonCode.REQUEST_NOT_RECORDED),
    "KGP01": (ScopeDenied, ReasonCode.POLICY_NOT_ALLOWED),
    "KGP02": (InvalidInput, ReasonCode.POLICY_IMMUTABLE),
    "KGR03": (StoreUnavailable, ReasonCode.CALLER_ROLE_MISSING),
    "42501": (StoreUnavailable, ReasonCode.PERMISSION_DENIED),  # insufficient_privilege
    "KGX01": (InvalidInput, ReasonCode.TRANSACTION_REFUSED),
    "22021": (InvalidInput, ReasonCode.INVALID_TEXT),  # character_not_in_repertoire
    "22P05": (InvalidInput, ReasonCode.INVALID_TEXT),  # untranslatable_character
    "22000": (InvalidInput, ReasonCode.INVALID_EMBEDDING),  # pgvector: dimensions / NaN
    "22003": (InvalidInput, ReasonCode.INVALID_EMBEDDING),  # a value beyond float4
    "22023": (InvalidInput, ReasonCode.INVALID_ARGUMENT),  # invalid_parameter_value
    "23514": (InvalidInput, ReasonCode.INVALID_ARGUMENT),  # check_violation
    "42P01": (StoreUnavailable, ReasonCode.SCHEMA_OUTDATED),  # undefined_table
    "42883": (StoreUnavailable, ReasonCode.SCHEMA_OUTDATED),  # undefined_function
}
# The class of every reason code that has one beyond ``GovernanceError``: the SQLSTATE table's,
# plus the codes that reach a caller another way (admission, erasure steps, a request's binding,
# the controller's API).  ``error_for_reason`` is how an API answer's code becomes an error.
_CLASS_OF_REASON: dict[ReasonCode, type[GovernanceError]] = {
    **{reason: cls for cls, reason in _SQLSTATE.values()},
    ReasonCode.BUDGET_EXHAUSTED: AdmissionDenied,
    ReasonCode.RATE_LIMITED: AdmissionDenied,
    ReasonCode.ERASURE_FAILED: ErasureFailed,
    ReasonCode.VERIFICATION_FAILED: ErasureFailed,
    ReasonCode.STORE_UNAVAILABLE: StoreUnavailable,
    **dict.fromkeys((
        ReasonCode.UNAUTHENTICATED, ReasonCode.FORBIDDEN, ReasonCode.AGENT_MISMATCH,
        ReasonCode.SCOPE_MISMATCH, ReasonCode.FEDERATION_DENIED, ReasonCode.ASSERTION_MISSING,
        ReasonCode.ASSERTION_INVALID, ReasonCode.ASSERTION_UNKNOWN_KEY,
        ReasonCode.CONTEXT_MISMATCH), ScopeDenied),
}


def error_for_reason(reason: ReasonCode, fallback: type[GovernanceError] = GovernanceError,
                     **ids: str | int) -> GovernanceError:
    """The error of ``reason``: its class if it has one, else ``fallback``."""
    return _CLASS_OF_REASON.get(reason, fallback)(reason, **ids)


def _admission_refusal(refused: object, sqlstate: object) -> ReasonCode | None:
    """Why a combined redemption's admission (``memory_redeem_admit``) was refused: its
    ``refused`` answer (0 admitted, 1 the scope's budget, 2 the sender's rate) or the SQLSTATE
    it raised (only the code is read)."""
    if isinstance(sqlstate, str) and sqlstate:
        found = _SQLSTATE.get(sqlstate)
        return found[1] if found else ReasonCode.DATABASE_ERROR
    if refused == 0:
        return None
    return ReasonCode.RATE_LIMITED if refused == 2 else ReasonCode.BUDGET_EXHAUSTED


_CONNECTION_CLASSES = ("08", "53", "57", "58")
# libpq reports a login the server refused (SQLSTATE 28000/28P01/3D000 on the wire) with no
# SQLSTATE, only its message; these fixed words of that message are matched -- the message is
# never kept or echoed.  A server with translated messages falls back to store_unavailable.
_LOGIN_REFUSED = re.compile(
    r"FATAL:\s+(?:password authentication failed|role \"[^\"]*\" does not exist"
    r"|database \"[^\"]*\" does not exist|no pg_hba\.conf entry|\w+ authentication failed"
    r"|permission denied for database)|fe_sendauth: no password supplied")


def from_database_error(exc: BaseException, operation: str) -> GovernanceError:
    """Translate any psycopg / pool error into a content-free ``GovernanceError``.

    Only the SQLSTATE is read; message, ``DETAIL``, ``HINT`` and the diagnostic fields that echo
    row values are never touched.  Callers ``raise from_database_error(e, op) from None``.
    """
    sqlstate = getattr(exc, "sqlstate", None) or ""
    if not isinstance(sqlstate, str) or not re.fullmatch(r"[0-9A-Z]{5}", sqlstate):
        sqlstate = ""
    if sqlstate in _SQLSTATE:
        cls, reason = _SQLSTATE[sqlstate]
        return cls(reason, operation=operation)
    if sqlstate in ("28000", "28P01", "3D000") or (not sqlstate and _login_refused(exc)):
        return InvalidInput(ReasonCode.LOGIN_REFUSED, operation=operation)
    if not sqlstate or sqlstate[:2] in _CONNECTION_CLASSES:
        return StoreUnavailable(ReasonCode.STORE_UNAVAILABLE, operation=operation,
                                **({"sqlstate": sqlstate} if sqlstate else {}))
    return GovernanceError(ReasonCode.DATABASE_ERROR, operation=operation, sqlstate=sqlstate)


def _login_refused(exc: BaseException) -> bool:
    try:
        return _LOGIN_REFUSED.search(str(exc)) is not None
    except Exception:  # noqa: BLE001 - a broken __str__ is just not a refused login
        return False
