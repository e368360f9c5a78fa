"""Reading the controller's answers: every value checked, and a malformed answer becomes
``controller_error`` with no trace of the value that was wrong."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from ..errors import GovernanceError, InvalidInput, ReasonCode, error_for_reason
from ..identity import ScopeKey
from ..models import ForgetReceipt
from ..store import _validate

_FRACTION = re.compile(r"(\.\d{6})\d+")
_R = TypeVar("_R", bound=ForgetReceipt)
_T = TypeVar("_T")
# the answers a transport may repeat for an idempotent operation (HTTP statuses)
RETRY_STATUS = frozenset({502, 503, 504})
# A gRPC status as the HTTP status the v0.9.x listener answers for the same refusal, so that a
# code without a class of its own falls back to the same error over either transport.
GRPC_AS_HTTP = {"INVALID_ARGUMENT": 400, "OUT_OF_RANGE": 400, "UNAUTHENTICATED": 401,
                "PERMISSION_DENIED": 403, "NOT_FOUND": 404, "ALREADY_EXISTS": 409,
                "ABORTED": 409, "FAILED_PRECONDITION": 409, "RESOURCE_EXHAUSTED": 429,
                "UNIMPLEMENTED": 501, "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504}


def scope_body(key: ScopeKey) -> dict[str, Any]:
    # the controller's API names the issuer KIND "issuer" (version 15's key; Matrix principals
    # of its local homeserver only)
    return {"principal": {"issuer": key.principal.issuer_kind, "subject": key.principal.subject},
            "agent_namespace": key.agent.namespace, "agent_name": key.agent.name,
            "kind": key.scope.kind.value, "room_id": key.scope.room_id or ""}


def _time(value: object) -> Any:
    """An RFC 3339 time of the API (Go writes nanoseconds; Python keeps microseconds)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError("not a time")
    return datetime.fromisoformat(_FRACTION.sub(r"\1", value))


def _receipt(cls: type[_R], key: ScopeKey, data: dict[str, Any]) -> _R:
    def build() -> _R:
        generation = data.get("generation")
        return cls(scope_id=key.opaque_id,
                   generation=None if generation is None else _int(generation),
                   deleted=_int(data.get("deleted") or 0), verified=data["verified"] is True,
                   at=datetime.now(UTC))

    return _parsed(build)


def _parsed(build: Callable[[], _T]) -> _T:
    """``build()`` from an answer's values, or ``controller_error`` with no trace of them (the
    parse error, which may quote a value, is dropped, not chained)."""
    failed = False
    try:
        return build()
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError):
        failed = True
    assert failed
    raise _malformed()


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ValueError("not an integer")
    return int(value)


def _opaque(value: object) -> str:
    if not isinstance(value, str) or len(value) > 80 or not value.isascii():
        raise ValueError("not an opaque id")
    return value


def _reason(value: object) -> ReasonCode | None:
    return _validate._reason(value, ReasonCode.CONTROLLER_ERROR)


def _malformed() -> GovernanceError:
    return GovernanceError(ReasonCode.CONTROLLER_ERROR)


def error_for(status: int, code: object, operation: str) -> GovernanceError:
    """The error for an API answer: its reason code if it is one of ours, else by status."""
    reason = ReasonCode._value2member_map_.get(code) if isinstance(code, str) else None
    if not isinstance(reason, ReasonCode):
        if status in (401, 403):
            reason = ReasonCode.UNAUTHENTICATED if status == 401 else ReasonCode.FORBIDDEN
        elif status >= 500 or status == 429:
            reason = ReasonCode.STORE_UNAVAILABLE if status in RETRY_STATUS \
                else ReasonCode.CONTROLLER_ERROR
        else:
            reason = ReasonCode.CONTROLLER_ERROR
    return error_for_reason(reason, InvalidInput if 400 <= status < 500 else GovernanceError,
                            operation=operation, status=status)


_log = logging.getLogger("kagent_governed_memory.controller")


def settle(result: _T | None, failed: GovernanceError | None, *, operation: str,
           started: float) -> _T:
    """The end of one controller call, whatever the transport: a failure is raised without
    its chain (a transport's exceptions carry the request) and logged by its reason, status
    and duration; an answer is logged by its duration.  ``started`` is a ``perf_counter``."""
    ms = (time.perf_counter() - started) * 1000
    if failed is not None:
        failed.__context__ = failed.__cause__ = None
        log = _log.info if 400 <= int(failed.ids.get("status", "0") or 0) < 500 \
            else _log.warning
        log("controller call failed operation=%s reason=%s status=%s ms=%.1f", operation,
            failed.reason.value, failed.ids.get("status", "-"), ms)
        raise failed
    assert result is not None
    _log.debug("controller call operation=%s ms=%.1f", operation, ms)
    return result
