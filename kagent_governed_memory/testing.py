"""The public testing API: what examples, notebooks, this project's tests and its benchmarks use.

* ``ScriptedModel`` (and its ``ToolCall``): an offline, deterministic google-adk ``BaseLlm``
  for examples and tests (the ``adk`` extra; imported on first use, see
  ``kagent_governed_memory.adk._scripted`` for its rules).  It is a test double: never use it to
  serve users.
* Databases for tests come from ``kagent_governed_memory.dev`` (``EmbeddedPostgres``, the role
  names, ``prepare_app_database``) and the packaged SQL from ``kagent_governed_memory.store``
  (``migrations``, ``query``).
* White-box handles: the private modules whose internals this project's own tests patch or
  call (``<name>_module``), named here so that tests and benchmarks reach them through one
  public place instead of importing private modules.  They are not a stable API: what they hold
  may change with any release.  The kagent-main transport's module (``grpc_transport_module``)
  is imported on first use (it needs the ``kagent-main`` extra).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from .cli import _demo as cli_demo_module
from .cli import _main as cli_module
from .dev import _embedded as embedded_module
from .kagent import _answers as answers_module
from .kagent import _http as http_transport_module
from .kagent import _transport as transport_module
from .scope import _assertion as assertion_module
from .store import _migrations as migrations_module
from .store import _pgtypes as pgtypes_module
from .store import _store as store_module
from .store import _validate as validate_module
from .telemetry import _spans as telemetry_module

if TYPE_CHECKING:  # real types for the lazily imported names below
    from .adk._scripted import ScriptedModel, ToolCall
    from .kagent import _grpc as grpc_transport_module

__all__ = [
    "ScriptedModel",
    "ToolCall",
    "answers_module",
    "assertion_module",
    "cli_demo_module",
    "cli_module",
    "embedded_module",
    "grpc_transport_module",
    "http_transport_module",
    "migrations_module",
    "pgtypes_module",
    "store_module",
    "telemetry_module",
    "transport_module",
    "validate_module",
]

_LAZY = {"ScriptedModel": ".adk._scripted", "ToolCall": ".adk._scripted"}
_LAZY_MODULES = {"grpc_transport_module": ".kagent._grpc"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __package__), name)
    if name in _LAZY_MODULES:
        module: ModuleType = importlib.import_module(_LAZY_MODULES[name], __package__)
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
