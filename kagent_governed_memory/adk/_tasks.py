"""This process's background auto-saves, tracked by scope so a withdrawal can cancel them.

A courtesy, not the guarantee: the database's generation fence refuses whatever a task still
tries to store after consent changed.  Every task's exception is retrieved here (so asyncio
never reports it, with its text, as "never retrieved") and logged by type only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

_log = logging.getLogger("kagent_governed_memory.adk")

_T = TypeVar("_T")


class AutosaveTasks:
    def __init__(self) -> None:
        self._scope_of: dict[asyncio.Task[Any], str] = {}

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(list(self._scope_of))

    def __len__(self) -> int:
        return len(self._scope_of)

    def start(self, work: Coroutine[Any, Any, _T], scope_id: str) -> asyncio.Task[_T]:
        task = asyncio.get_running_loop().create_task(work)
        self._scope_of[task] = scope_id
        task.add_done_callback(self._scope_of.pop)
        task.add_done_callback(_retrieve_outcome)
        return task

    async def drain(self) -> None:
        """Wait for every task (tests, graceful shutdown)."""
        while self._scope_of:
            await asyncio.gather(*list(self._scope_of), return_exceptions=True)

    async def cancel(self, scope_id: str) -> int:
        """Cancel this scope's tasks and wait for them; returns how many were cancelled."""
        pending = [t for t, s in list(self._scope_of.items()) if s == scope_id]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return len(pending)

    async def close(self) -> None:
        for task in list(self._scope_of):
            task.cancel()
        await asyncio.gather(*list(self._scope_of), return_exceptions=True)


def _retrieve_outcome(task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        _log.warning("autosave failed error=%s", _type_name(type(exc).__name__))


def _type_name(name: str) -> str:
    return name if name.isidentifier() and len(name) <= 64 else "Exception"
