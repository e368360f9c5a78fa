"""Sentinels and the span router the content-free tests share (adk/test_sentinels.py,
kagent/test_kagent_mode.py, kagent/test_kagent_main_runner.py, the Matrix sinks).

``ROUTER`` is added once to the process-wide SDK tracer provider; each test points its
``target`` at the pipeline it set up (a tracer provider can only be installed once).  A sentinel
is found in a sink in any of its forms: raw, hex, base64 or JSON-escaped.
"""

from __future__ import annotations

import base64
import json
import secrets


class _Router:
    """The process-wide tracer provider routes to whichever pipeline the running test set."""

    target = None

    def on_start(self, span, parent_context=None):
        if self.target is not None:
            self.target.on_start(span, parent_context=parent_context)

    def _on_ending(self, span):
        pass

    def on_end(self, span):
        if self.target is not None:
            self.target.on_end(span)

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


ROUTER = _Router()


def make_sentinels() -> dict[str, str]:
    # the quote and the é make the JSON-escaped form differ from the raw one
    return {name: f'Z{secrets.token_hex(8)}é"' for name in (
        "prefetch_query", "load_query", "embed_query", "embed_body", "fact", "db", "summary",
        "model")}


def sentinel_forms(sentinel: str) -> list[str]:
    raw = sentinel.encode()
    core = sentinel[1:17]
    return [core, raw.hex(), base64.b64encode(raw).decode(), json.dumps(sentinel)[1:-1],
            base64.b64encode(core.encode()).decode()[:20]]


def leaks(haystack: str, sentinels: dict[str, str]) -> list[str]:
    return [name for name, s in sentinels.items() if any(f in haystack for f in sentinel_forms(s))]
