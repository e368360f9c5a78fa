"""The public testing API: what examples, notebooks, this project's tests and its benchmarks use.

* ``ScriptedModel`` (and its ``ToolCall``): an offline, deterministic google-adk ``BaseLlm``
  for examples and tests (the ``adk`` extra; imported on first use, see
  ``kagent_governed_memory.adk._scripted`` for its rules).  It is a test double: never use it to
  serve users.
* Databases for tests come from ``kagent_governed_memory.dev`` (``EmbeddedPostgres``, the role
  names, ``prepare_app_database``) and the packaged SQL from ``kagent_governed_memory.store``
  (``migrations``, ``query``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # real types for the lazily imported names below
    from .adk._scripted import ScriptedModel, ToolCall

__all__ = ["ScriptedModel", "ToolCall"]

_LAZY = {"ScriptedModel": ".adk._scripted", "ToolCall": ".adk._scripted"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
