"""Loads the packaged SQL: migrations and the named queries of ``sql/queries.sql``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

__all__ = ["Migration", "function_of", "migrations", "query"]

_MIGRATION_NAME = re.compile(r"^(\d{6})_([a-z0-9_]+)\.(up|down)\.sql$")
_FUNCTION = re.compile(r"\b(memory_[a-z_]+)\(")
_QUERY_HEADER = re.compile(r"^-- name: (\w+) :(one|many|exec)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    up: str
    down: str


def _sql_dir() -> Traversable:
    return resources.files("kagent_governed_memory").joinpath("sql")


@cache
def migrations() -> tuple[Migration, ...]:
    found: dict[int, dict[str, str]] = {}
    for item in _sql_dir().joinpath("migrations").iterdir():
        m = _MIGRATION_NAME.match(item.name)
        if m:
            entry = found.setdefault(int(m.group(1)), {"name": m.group(2)})
            entry[m.group(3)] = item.read_text(encoding="utf-8")
    out = []
    for version in sorted(found):
        entry = found[version]
        if "up" not in entry or "down" not in entry:
            raise RuntimeError(f"migration {version:06d} lacks its up or down file")
        out.append(Migration(version, entry["name"], entry["up"], entry["down"]))
    return tuple(out)


@cache
def _queries() -> dict[str, str]:
    text = _sql_dir().joinpath("queries.sql").read_text(encoding="utf-8")
    parts = _QUERY_HEADER.split(text)
    # parts = [preamble, name, kind, body, name, kind, body, ...]
    out: dict[str, str] = {}
    for i in range(1, len(parts), 3):
        body = "\n".join(
            line for line in parts[i + 2].strip().splitlines() if not line.startswith("--")
        ).strip().rstrip(";")
        out[parts[i]] = body
    return out


def query(name: str) -> str:
    return _queries()[name]


@cache
def function_of(name: str) -> str:
    """The governed entry point the named statement calls."""
    m = _FUNCTION.search(query(name))
    assert m is not None, name
    return m.group(1)
