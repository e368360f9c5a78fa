"""The long-running store's sweep: physical deletion of expired rows at start and every
``every`` seconds (ADR decision 27: within 24 hours; default hourly).

Expired rows are already unreadable (every read filters ``expires_at > now()``); the sweep
removes them from disk.  ``memory_sweep()`` takes an advisory lock, so when several replicas
run it at once one sweeps and the others return at once.  A failed sweep is logged with its
reason code only and retried at the next tick; the task never dies of an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from ..errors import GovernanceError

__all__ = ["Sweeper"]

_log = logging.getLogger("kagent_governed_memory.store")


class Sweeper:
    """Runs ``sweep()`` now and then every ``every`` seconds until ``stop()``."""

    def __init__(self, sweep: Callable[[], Awaitable[int]], *, every: float) -> None:
        self._sweep = sweep
        self._every = every
        self.runs = 0
        self._stopping = False
        self._task: asyncio.Task[None] = asyncio.get_running_loop().create_task(
            self._loop(), name="kagent-governed-memory-sweep")

    async def _loop(self) -> None:
        while True:
            try:
                deleted = await self._sweep()
            except GovernanceError as exc:
                _log.warning("sweep failed reason=%s", exc.reason.value)
            except Exception as exc:  # noqa: BLE001 - never let the task die; type only
                _log.warning("sweep failed error=%s", type(exc).__name__)
            else:
                _log.info("sweep deleted=%d", deleted)
            self.runs += 1
            if self._stopping:  # a driver may turn the cancellation into a query error
                return
            await asyncio.sleep(self._every)

    async def stop(self) -> None:
        self._stopping = True
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
