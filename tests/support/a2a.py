"""An ASGI app served by a real uvicorn on loopback (adk/test_a2a.py, the Matrix world)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """``app`` served by a real uvicorn on loopback; yields its base URL."""
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="on"))
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(600):
            if server.started:
                break
            if task.done():
                task.result()
            await asyncio.sleep(0.05)
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=60)
