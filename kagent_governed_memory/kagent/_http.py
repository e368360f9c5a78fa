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
import os
import stat
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from ..errors import GovernanceError, InvalidInput, ReasonCode, StoreUnavailable
from ._answers import RETRY_STATUS as _RETRY_STATUS
from ._answers import error_for, settle

__all__ = ["BASE_PATH", "DEFAULT_DEADLINE", "DEFAULT_TIMEOUT", "GOVERNED_MEMORY_TOKEN_FILE_ENV",
           "GOVERNED_MEMORY_TOKEN_PATH", "KAGENT_TOKEN_PATH",
           "MAX_ANSWER_BYTES", "Transport"]

_log = logging.getLogger("kagent_governed_memory.controller")

BASE_PATH = "/api/memories/governed"
# Where kagent mounts the agent pod's projected ServiceAccount token (audience "kagent"): the
# token for kagent's A2A endpoint, never sent to the governed listener by default.
KAGENT_TOKEN_PATH = "/var/run/secrets/tokens/kagent-token"
# The projected token with the audience "kagent-governed-memory", the only one the governed
# listener accepts: kagent mounts it here in governed agent pods; the bridge's Deployment mounts
# its own at the same path (docs/architecture.md, "Tokens for the governed listener").
# KAGENT_MEMORY_TOKEN_FILE overrides it.
GOVERNED_MEMORY_TOKEN_PATH = "/var/run/secrets/kagent-governed-memory/token"
GOVERNED_MEMORY_TOKEN_FILE_ENV = "KAGENT_MEMORY_TOKEN_FILE"
DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=3.0, pool=3.0)
DEFAULT_DEADLINE = 15.0  # seconds for a whole call, retries included
# The largest legitimate answer is a batched search: 8 x 50 records of at most a few KiB each.
MAX_ANSWER_BYTES = 4 * 1024 * 1024
_ATTEMPTS = 3
_MAX_TOKEN_BYTES = 16384

def default_token_file() -> str:
    """The governed memory token file: ``$KAGENT_MEMORY_TOKEN_FILE``, else the governed mount."""
    return os.environ.get(GOVERNED_MEMORY_TOKEN_FILE_ENV, "").strip() or GOVERNED_MEMORY_TOKEN_PATH


class TokenSource:
    """A bearer token: a callable's, or a file's (re-read when the kubelet rotates it).

    A token must be printable ASCII and at most 16 KiB; anything else (a corrupt file, a FIFO,
    a directory) counts as no token at all, so it never reaches a header, an error or a log."""

    def __init__(self, token: str | Callable[[], str] | None, token_file: str | Path | None
                 ) -> None:
        if token is not None and not (isinstance(token, str) or callable(token)):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="token")
        self._token = token
        self._file = None if token is not None else Path(token_file or default_token_file())
        self._cached: tuple[tuple[int, int, int], str] | None = None

    @property
    def source(self) -> str:
        """Where the token comes from: ``token_file`` or ``token`` (an error's ``field``)."""
        return "token_file" if self._file is not None else "token"

    def get(self) -> str:
        if isinstance(self._token, str):
            return _usable(self._token)
        if self._token is not None:
            try:
                value = self._token()
            except Exception:  # noqa: BLE001 - a failing provider is no token, never its text
                return ""
            return _usable(value)
        assert self._file is not None
        try:
            st = os.stat(self._file)
            if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_TOKEN_BYTES:
                return ""
            version = (st.st_ino, st.st_mtime_ns, st.st_size)
            if self._cached is None or self._cached[0] != version:
                with open(self._file, "rb") as f:
                    raw = f.read(_MAX_TOKEN_BYTES + 1)
                text = raw.decode("ascii", "replace").strip() if len(raw) <= _MAX_TOKEN_BYTES \
                    else ""
                self._cached = (version, _usable(text))
        except OSError:
            return ""
        return self._cached[1]


def _usable(token: object) -> str:
    if (not isinstance(token, str) or len(token) > _MAX_TOKEN_BYTES or not token.isascii()
            or not token.isprintable() or " " in token):
        return ""
    return token


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


def grpc_transport(url: str, *, runtime: bool, token: object, token_file: object,
                    timeout: httpx.Timeout | float, deadline: float, client: object) -> Any:
    """kagent main's gRPC transport (the ``kagent-main`` extra).  The runtime presents the
    request's grant, never a token: a token given to it is refused, not ignored."""
    if client is not None:
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="http_client")
    if runtime and (token is not None or token_file is not None):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="token")
    try:
        from ._grpc import GrpcTransport
    except ImportError:
        raise ModuleNotFoundError(
            "grpc:// and grpcs:// controller URLs need the kagent-main extra: "
            "pip install -e '.[kagent-main]' in a clone (docs/install.md)") from None
    tokens = None if runtime else TokenSource(token, token_file)  # type: ignore[arg-type]
    return GrpcTransport(url, tokens=tokens, runtime=runtime, timeout=timeout,
                         deadline=deadline)
