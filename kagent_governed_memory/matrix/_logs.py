"""Loggers for the libraries the bridge drives: silent.

mautrix logs request bodies (message text, room state) at DEBUG and exception text at WARNING;
the bridge hands every mautrix object a logger that is disabled and does not propagate, so
nothing it would say reaches a handler.  The bridge's own log lines are reason codes and
opaque ids only (``kagent_governed_memory.matrix``).
"""

from __future__ import annotations

import logging

__all__ = ["quiet_logger"]

_QUIET = "kagent_governed_memory.matrix.quiet"


def quiet_logger() -> logging.Logger:
    log = logging.getLogger(_QUIET)
    log.disabled = True
    log.propagate = False
    log.setLevel(logging.CRITICAL + 1)
    return log
