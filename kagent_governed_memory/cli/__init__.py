"""The ``kagent-governed-memory`` command line (``python -m kagent_governed_memory``): the parser
and commands (``_main``), the demos and ``dev-db`` (``_demo``), key and registry commands
(``_keys``, ``_registry``) and the output conventions (``_text``).  ``main`` is the entry point."""

from ._main import _parser, exit_code, main  # noqa: F401  (_parser: the reference's own check)
from ._text import (
    EXIT_CONFIGURATION,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    human_duration,
    timestamp,
)

__all__ = [
    "EXIT_CONFIGURATION",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "exit_code",
    "human_duration",
    "main",
    "timestamp",
]
