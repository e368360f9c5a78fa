"""Every refusal reason the code can raise has an entry in ``docs/refusals.md`` (issue 46).

A reader who meets a reason code in an answer, an error or a log line finds what it means and
what to do: every ``ReasonCode`` member, the development bridge's causes (``field=``), the
Matrix relay's failure reasons, and every ``docs/*.md`` the package's own messages point at
exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import kagent_governed_memory
from kagent_governed_memory import ReasonCode

REPO = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
REFUSALS = (REPO / "docs" / "refusals.md").read_text()
PACKAGE = Path(kagent_governed_memory.__file__).resolve().parent
SOURCES = {p: p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def _documented(code: str) -> bool:
    return f"`{code}`" in REFUSALS


@pytest.mark.parametrize("reason", list(ReasonCode), ids=lambda r: r.value)
def test_every_reason_code_has_an_entry(reason: ReasonCode) -> None:
    assert _documented(reason.value), f"docs/refusals.md has no entry for `{reason.value}`"


def test_every_relay_failure_reason_has_an_entry() -> None:
    # the Matrix relay's failures, as free strings (RelayError("...")) or as reason codes
    found = {m for text in SOURCES.values()
             for m in re.findall(r"RelayError\(\s*\"([a-z_]+)\"", text)}
    found |= {"agent_unreachable", "agent_http_error", "agent_answer_invalid"}
    missing = sorted(r for r in found if not _documented(r))
    assert not missing, f"docs/refusals.md has no entry for {missing}"


def test_every_development_bridge_cause_is_explained() -> None:
    causes = {m for text in SOURCES.values() for m in re.findall(r"\"(dev_bridge_[a-z]+)\"", text)}
    assert {"dev_bridge_enable", "dev_bridge_kagent", "dev_bridge_dsn",
            "dev_bridge_database", "dev_bridge_user"} <= causes
    missing = sorted(c for c in causes if not _documented(c))
    assert not missing, f"docs/refusals.md does not explain {missing}"


def test_every_document_the_package_points_at_exists() -> None:
    named = {(m, path.relative_to(PACKAGE.parent).as_posix()) for path, text in SOURCES.items()
             for m in re.findall(r"\bdocs/[\w.-]+\.md\b", text)}
    missing = sorted((doc, where) for doc, where in named if not (REPO / doc).is_file())
    assert not missing, f"documents named in the package but not shipped: {missing}"
