"""The transport to the kagent controller's governed API: credentials, bounded timeouts,
retries only where they are safe, and errors mapped from reason codes alone.

* Every request carries a Kubernetes ServiceAccount token (``Authorization: Bearer``), read
  from a projected-token file (re-read when the kubelet rotates it) or given by a callable.
* Timeouts are bounded (connect, read, write and pool); nothing waits forever.
* A request that never reached the controller (connection refused or reset before sending) may
  be sent again whatever it does.  Anything else is retried only for idempotent operations
  (reads, per-entry forget, withdraw, offboard): a timeout or a 502/503/504 on an admission, a
  save, a grant or a redemption may have taken effect, so it is reported, not repeated.
* An answer of the API is ``{"error": "<reason_code>"}``; only that code is read (never any other
  text of the body), and it becomes the library's ``GovernanceError`` subclass for that code.
  Transport failures become ``store_unavailable`` with no chained exception (httpx's carry the
  request).  Logs carry the operation, the status, the reason and the duration, nothing else.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from .errors import (
    AdmissionDenied,
    ConsentConflict,
    ConsentRequired,
    EntryCapReached,
    ErasureFailed,
    FactTooLarge,
    GovernanceError,
    InvalidInput,
    ReasonCode,
    ScopeDenied,
    StaleGeneration,
    StoreUnavailable,
)

__all__ = ["BASE_PATH", "DEFAULT_TIMEOUT", "KAGENT_TOKEN_PATH", "Transport"]

_log = logging.getLogger("kagent_governed_memory.controller")

BASE_PATH = "/api/memories/governed"
# Where kagent mounts the agent pod's projected ServiceAccount token (audience "kagent").
KAGENT_TOKEN_PATH = "/var/run/secrets/tokens/kagent-token"
DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=3.0, pool=3.0)
_ATTEMPTS = 3
_RETRY_STATUS = frozenset({502, 503, 504})
_MAX_TOKEN_BYTES = 16384

_CLASS_OF: dict[ReasonCode, type[GovernanceError]] = {
    ReasonCode.CONSENT_REQUIRED: ConsentRequired,
    ReasonCode.CONSENT_POLICY_CHANGED: ConsentRequired,
    ReasonCode.ERASURE_PENDING: ConsentRequired,
    ReasonCode.CONSENT_CONFLICT: ConsentConflict,
    ReasonCode.STALE_GENERATION: StaleGeneration,
    ReasonCode.ENTRY_CAP_REACHED: EntryCapReached,
    ReasonCode.FACT_TOO_LARGE: FactTooLarge,
    ReasonCode.BUDGET_EXHAUSTED: AdmissionDenied,
    ReasonCode.RATE_LIMITED: AdmissionDenied,
    ReasonCode.ERASURE_FAILED: ErasureFailed,
    ReasonCode.VERIFICATION_FAILED: ErasureFailed,
    ReasonCode.STORE_UNAVAILABLE: StoreUnavailable,
    ReasonCode.SERVICE_ROLE_MISSING: StoreUnavailable,
    ReasonCode.OPERATOR_ROLE_MISSING: StoreUnavailable,
    ReasonCode.PERMISSION_DENIED: StoreUnavailable,
    ReasonCode.SCHEMA_OUTDATED: StoreUnavailable,
}
_DENIED = frozenset({
    ReasonCode.UNAUTHENTICATED, ReasonCode.FORBIDDEN, ReasonCode.AGENT_MISMATCH,
    ReasonCode.SCOPE_MISMATCH, ReasonCode.FEDERATION_DENIED, ReasonCode.REMOTE_SERVER_DENIED,
    ReasonCode.SCOPE_KIND_RESERVED, ReasonCode.PRINCIPAL_OFFBOARDED,
    ReasonCode.ASSERTION_MISSING, ReasonCode.ASSERTION_INVALID, ReasonCode.ASSERTION_EXPIRED,
    ReasonCode.ASSERTION_UNKNOWN_KEY, ReasonCode.ASSERTION_REPLAYED, ReasonCode.CONTEXT_MISMATCH,
})


def error_for(status: int, code: object, operation: str) -> GovernanceError:
    """The error for an API answer: its reason code if it is one of ours, else by status."""
    reason = ReasonCode._value2member_map_.get(code) if isinstance(code, str) else None
    if not isinstance(reason, ReasonCode):
        if status in (401, 403):
            reason = ReasonCode.UNAUTHENTICATED if status == 401 else ReasonCode.FORBIDDEN
        elif status >= 500 or status == 429:
            reason = ReasonCode.STORE_UNAVAILABLE if status in _RETRY_STATUS \
                else ReasonCode.CONTROLLER_ERROR
        else:
            reason = ReasonCode.CONTROLLER_ERROR
    cls = _CLASS_OF.get(reason) or (ScopeDenied if reason in _DENIED else None)
    if cls is None:
        cls = InvalidInput if 400 <= status < 500 else GovernanceError
    return cls(reason, operation=operation, status=status)


class TokenSource:
    """A bearer token: a callable's, or a file's (re-read when it changes)."""

    def __init__(self, token: str | Callable[[], str] | None, token_file: str | Path | None
                 ) -> None:
        if token is not None and not (isinstance(token, str) or callable(token)):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="token")
        self._token = token
        self._file = None if token is not None else Path(token_file or KAGENT_TOKEN_PATH)
        self._cached: tuple[float, str] | None = None

    def get(self) -> str:
        if isinstance(self._token, str):
            return self._token
        if self._token is not None:
            value = self._token()
            return value if isinstance(value, str) else ""
        assert self._file is not None
        try:
            mtime = os.stat(self._file).st_mtime
            if self._cached is None or self._cached[0] != mtime:
                raw = self._file.read_bytes()[:_MAX_TOKEN_BYTES]
                self._cached = (mtime, raw.decode("ascii", "replace").strip())
        except OSError:
            return ""
        return self._cached[1]


class Transport:
    """One controller, one kind of caller (agent runtime or bridge), one ``httpx`` client."""

    def __init__(self, url: str, *, tokens: TokenSource, headers: Mapping[str, str] | None = None,
                 timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
                 client: httpx.AsyncClient | None = None) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="controller_url")
        self._base = url.rstrip("/") + BASE_PATH
        self._tokens = tokens
        self._headers = dict(headers or {})
        self._own = client is None
        # no redirects (a redirect would carry the token elsewhere), no proxies from the
        # environment for a cluster-internal call unless the caller brings its own client
        self._client = client or httpx.AsyncClient(timeout=timeout, follow_redirects=False,
                                                   trust_env=False)

    async def aclose(self) -> None:
        if self._own:
            await self._client.aclose()

    async def post(self, route: str, body: dict[str, Any], *, operation: str, idempotent: bool,
                   headers: Mapping[str, str] | None = None) -> dict[str, Any]:
        """POST ``body`` to ``route`` and return the answer's JSON object, or raise."""
        token = self._tokens.get()
        if not token:
            raise InvalidInput(ReasonCode.UNAUTHENTICATED, operation=operation, field="token")
        sent = {**self._headers, **(headers or {}), "Authorization": f"Bearer {token}"}
        started = time.perf_counter()
        failed: GovernanceError | None = None
        answer: httpx.Response | None = None
        for attempt in range(_ATTEMPTS):
            failed, answer = None, None
            retry = False
            try:
                answer = await self._client.post(f"{self._base}/{route}", json=body,
                                                 headers=sent)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout):
                failed = StoreUnavailable(ReasonCode.STORE_UNAVAILABLE, operation=operation)
                retry = True  # never reached the controller: safe for any operation
            except httpx.TransportError:  # read/write timeouts, resets mid-request
                failed = StoreUnavailable(ReasonCode.STORE_UNAVAILABLE, operation=operation)
                retry = idempotent
            if answer is not None and answer.status_code in _RETRY_STATUS:
                retry = idempotent
            if not retry or attempt + 1 == _ATTEMPTS:
                break
            await asyncio.sleep(0.1 * 2**attempt)
        ms = (time.perf_counter() - started) * 1000
        if answer is None:
            assert failed is not None
            _log.warning("controller call failed operation=%s reason=%s ms=%.1f", operation,
                         failed.reason.value, ms)
            raise failed
        return self._decode(answer, operation, ms)

    @staticmethod
    def _decode(answer: httpx.Response, operation: str, ms: float) -> dict[str, Any]:
        status = answer.status_code
        data: object = None
        try:
            data = answer.json() if answer.content else None
        except ValueError:
            data = None
        if 200 <= status < 300 and isinstance(data, dict):
            _log.debug("controller call operation=%s status=%d ms=%.1f", operation, status, ms)
            return data
        code = data.get("error") if isinstance(data, dict) else None
        error = error_for(status, code if 200 > status or status >= 300 else None, operation)
        _log.info("controller refused operation=%s status=%d reason=%s ms=%.1f", operation,
                  status, error.reason.value, ms)
        raise error
