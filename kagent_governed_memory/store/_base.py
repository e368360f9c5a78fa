"""What the store's mixins (``_runtime_ops``, ``_policies``, ``_erasure``) need of
``GovernedMemoryStore``: its policy, local server and statement runners."""

from __future__ import annotations

from typing import Any

from ..identity import ScopeKey
from ..policy import MemoryPolicy

__all__: list[str] = []


class _Statements:
    policy: MemoryPolicy
    _local_server: str
    _bound: bool  # a runtime login: the bound statements (see _runtime_ops)

    def _servable(self, key: ScopeKey) -> None:
        raise NotImplementedError

    async def _one(self, op: str, name: str, params: list[Any]) -> tuple[Any, ...] | None:
        raise NotImplementedError

    async def _all(self, op: str, name: str, params: list[Any]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _request(self, op: str, key: ScopeKey) -> list[Any]:
        raise NotImplementedError
