"""The transport to the kagent controller's governed API: credentials, bounded timeouts,
retries only where they are safe, and errors mapped from reason codes alone.

* Every request carries a Kubernetes ServiceAccount token (``Authorization: Bearer``), read
  from a projected-token file (re-read when the kubelet rotates it) or given by a callable.
* Timeouts are bounded (connect, read, write and pool), and a whole call — retries included —
  ends within its ``deadline`` (default 15 s), whatever a slow peer trickles.  An answer larger
  than ``MAX_ANSWER_BYTES`` is cut off and refused.  Redirects are never followed (they would
  carry the assertion and the facts elsewhere).
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
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import httpx

from ..errors import GovernanceError, InvalidInput, ReasonCode, StoreUnavailable
from ._answers import RETRY_STATUS as _RETRY_STATUS
from ._answers import error_for, settle
from ._transport import DEFAULT_DEADLINE, DEFAULT_TIMEOUT, MAX_ANSWER_BYTES, TokenSource

__all__ = ["BASE_PATH", "Transport"]

_log = logging.getLogger("kagent_governed_memory.controller")

BASE_PATH = "/api/memories/governed"
_ATTEMPTS = 3


class Transport:
    """One controller, one kind of caller (agent runtime or bridge), one ``httpx`` client.

    A client passed in is used as given, except that redirects are never followed; it must not
    take proxies from the environment (``trust_env=False``): they would see every fact."""

    sends_grant = False  # the v0.9.x listener authenticates the runtime by its token

    def __init__(self, url: str, *, tokens: TokenSource, headers: Mapping[str, str] | None = None,
                 timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
                 deadline: float = DEFAULT_DEADLINE,
                 client: httpx.AsyncClient | None = None) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="controller_url")
        if client is not None and (not isinstance(client, httpx.AsyncClient)
                                   or client.trust_env):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="http_client")
        if (isinstance(deadline, bool) or not isinstance(deadline, int | float)
                or not 0 < deadline <= 300):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="deadline")
        self._base = url.rstrip("/") + BASE_PATH
        self._tokens = tokens
        self._headers = dict(headers or {})
        self._deadline = float(deadline)
        self._own = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout, follow_redirects=False,
                                                   trust_env=False)

    async def aclose(self) -> None:
        if self._own:
            await self._client.aclose()

    async def post(self, route: str, body: dict[str, Any], *, operation: str, idempotent: bool,
                   headers: Mapping[str, str] | None = None) -> dict[str, Any]:
        """POST ``body`` to ``route`` and return the answer's JSON object, or raise.

        Nothing raised here keeps the request (its token, assertion or facts) in its message,
        its chain or this frame's locals."""
        token = self._tokens.get()
        if not token:  # nothing to send: say which source failed (the file, or token=)
            raise InvalidInput(ReasonCode.UNAUTHENTICATED, operation=operation,
                               field=self._tokens.source)
        sent = {**self._headers, **(headers or {}), "Authorization": f"Bearer {token}"}
        content = _json(body)
        del token, body
        started = time.perf_counter()
        result: dict[str, Any] | None = None
        failed: GovernanceError | None = None
        if content is None:
            failed = InvalidInput(ReasonCode.INVALID_ARGUMENT, operation=operation)
        else:
            try:
                async with asyncio.timeout(self._deadline):
                    result = await self._attempts(route, sent, content, operation, idempotent)
            except GovernanceError as exc:
                failed = exc
            except Exception:  # noqa: BLE001 - a timeout, or anything httpx raised: its text stays
                failed = StoreUnavailable(ReasonCode.STORE_UNAVAILABLE, operation=operation,
                                          field="controller")
        del sent, content
        return settle(result, failed, operation=operation, started=started)

    async def _attempts(self, route: str, sent: dict[str, str], content: bytes, operation: str,
                        idempotent: bool) -> dict[str, Any]:
        url = f"{self._base}/{route}"
        headers = {**sent, "Content-Type": "application/json"}
        for attempt in range(_ATTEMPTS):
            retry = False
            try:
                status, raw = await self._exchange(url, headers, content)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout):
                retry = True  # never reached the controller: safe for any operation
            except (httpx.TransportError, _TooLarge):  # timeouts, resets, an oversized answer
                retry = idempotent
            else:
                if status in _RETRY_STATUS and idempotent and attempt + 1 < _ATTEMPTS:
                    retry = True
                else:
                    return _decode(status, raw, operation)
            if not retry or attempt + 1 == _ATTEMPTS:
                break
            await asyncio.sleep(0.1 * 2**attempt)
        raise StoreUnavailable(ReasonCode.STORE_UNAVAILABLE, operation=operation,
                               field="controller")

    async def _exchange(self, url: str, headers: dict[str, str], content: bytes
                        ) -> tuple[int, bytes]:
        """One request; the answer read up to ``MAX_ANSWER_BYTES``."""
        request = self._client.build_request("POST", url, headers=headers, content=content)
        answer = await self._client.send(request, stream=True, follow_redirects=False)
        try:
            chunks, size = [], 0
            async for chunk in answer.aiter_bytes():  # decoded: bounds a compressed bomb too
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise _TooLarge
                chunks.append(chunk)
        finally:
            await answer.aclose()
        return answer.status_code, b"".join(chunks)


class _TooLarge(Exception):
    pass


def _json(body: object) -> bytes | None:
    try:
        return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError, RecursionError):
        return None


def _decode(status: int, raw: bytes, operation: str) -> dict[str, Any]:
    """The answer's JSON object on a 2xx without an ``error`` member; otherwise the error its
    reason code names (never any other part of the body)."""
    data: object = None
    try:
        data = json.loads(raw) if raw else None
    except (ValueError, RecursionError):
        data = None
    if 200 <= status < 300 and isinstance(data, dict) and "error" not in data:
        return data
    code = data.get("error") if isinstance(data, dict) else None
    # a 2xx carrying an error, or no object at all, is not an answer we know how to trust
    raise error_for(status, code, operation)
