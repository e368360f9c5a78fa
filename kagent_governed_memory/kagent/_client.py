"""What both kagent-mode stores share: the transport picked by the controller URL's scheme
(``_http`` for ``http(s)://``, ``_grpc`` for ``grpc(s)://``, imported on first use), the policy
and the local homeserver, and the calls both sides make the same way."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Self

import httpx

from ..errors import InvalidInput, ReasonCode
from ..identity import ScopeKey
from ..models import ForgetReceipt, MemoryRecord
from ..policy import MemoryPolicy
from ..store._validate import _check_local_server, _servable
from ._answers import _parsed, _receipt, _time
from ._http import Transport
from ._transport import TokenSource

__all__: list[str] = []


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


class _Client:
    """What both sides share: the transport, the policy and the local homeserver."""

    def __init__(self, url: str, *, local_server: str, policy: MemoryPolicy,
                 token: str | Callable[[], str] | None, token_file: str | Path | None,
                 headers: Mapping[str, str], timeout: httpx.Timeout | float,
                 deadline: float, client: httpx.AsyncClient | None, runtime: bool) -> None:
        _check_local_server(local_server)
        if not isinstance(policy, MemoryPolicy):
            raise InvalidInput(ReasonCode.INVALID_POLICY)
        self._local_server = local_server
        self._policy = policy
        self._http: Transport | Any
        if isinstance(url, str) and url.startswith(("grpc://", "grpcs://")):
            self._http = grpc_transport(url, runtime=runtime, token=token,
                                        token_file=token_file, timeout=timeout,
                                        deadline=deadline, client=client)
        else:
            self._http = Transport(url, tokens=TokenSource(token, token_file), headers=headers,
                                   timeout=timeout, deadline=deadline, client=client)

    @property
    def policy(self) -> MemoryPolicy:
        return self._policy

    @property
    def local_server(self) -> str:
        return self._local_server

    async def aclose(self) -> None:
        await self._http.aclose()

    async def close(self) -> None:
        await self.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _servable(self, key: ScopeKey) -> None:
        _servable(key, self._local_server)

    async def _call(self, route: str, key: ScopeKey, body: dict[str, Any], *,
                    idempotent: bool) -> dict[str, Any]:
        raise NotImplementedError  # each side sends its own credentials

    async def forget(self, key: ScopeKey, entry_id: str) -> ForgetReceipt:
        """Delete one entry and verify it unreadable (the runtime within a request, or the
        bridge for its subject).  An absent, foreign or malformed id: ``deleted=0``."""
        if not isinstance(entry_id, str):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="entry_id")
        data = await self._call("forget", key, {"entry_id": entry_id}, idempotent=True)
        return _receipt(ForgetReceipt, key, data)

    def _record(self, key: ScopeKey, m: Any) -> MemoryRecord:
        return _parsed(lambda: MemoryRecord(
            id=str(m["id"]), text=str(m["content"]), scope=key,
            created_at=_time(m["created_at"]), expires_at=_time(m["expires_at"]),
            distance=None if m.get("score") is None else 1.0 - float(m["score"])))
