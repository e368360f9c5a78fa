"""The repository stands alone: every document it references is in it.

* every relative Markdown link (and its ``#anchor``) in the repo's own Markdown resolves;
* nothing points at design inputs that are not shipped (``SPEC.md``, ``CONTRACT.md``,
  ``ARCHITECTURE.md``, ``../shared``, ``research/``);
* every requirement id (``C2``, ``B7``, ``T1`` …) and every design-decision number ("ADR 0023 §42",
  "decision 6", "decisions 19-20") used in code, SQL, tests and docs is explained in
  ``docs/requirements.md``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "docs" / "requirements.md"
SKIP_DIRS = {".venv", ".git", "node_modules", ".mypy_cache", ".pytest_cache", "__pycache__"}
UNSHIPPED = re.compile(r"\b(?:SPEC|CONTRACT|ARCHITECTURE)\.md\b|\.\./shared\b|\bresearch/")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
REQUIREMENT_ID = re.compile(r"\b([SCUBALDRT][0-9])\b")
# Tokens of that shape that are not requirement ids, and what they are.
NOT_IDS = {"L6": "all-MiniLM-L6-v2, a model's name", "T0": "a test's reference time"}
DECISION = re.compile(r"(?:ADR(?: 0023)?\s*(?:§|decisions?\s*)|\bdecisions?\s+)(\d+)(?:\s*[-–]\s*(\d+))?")


def _files(*suffixes: str) -> list[Path]:
    out = []
    for path in REPO.rglob("*"):
        if path.is_file() and path.suffix in suffixes and not SKIP_DIRS & set(path.parts):
            rel = path.relative_to(REPO)
            if rel.parts[0] == "patches":  # upstream's text as patch context, not ours
                continue
            out.append(path)
    return sorted(out)


def _anchor(heading: str) -> str:
    """GitHub's heading slug: lower-case, punctuation dropped, spaces to hyphens."""
    slug = heading.strip().lower()
    slug = re.sub(r"[^\w\- ]", "", slug)
    return slug.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_anchor(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", path.read_text(), re.M)}


MARKDOWN = _files(".md")
SOURCES = _files(".py", ".sql", ".md", ".toml")


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(path: Path) -> None:
    broken = []
    for target in LINK.findall(path.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{path.relative_to(REPO)}: unresolved links {broken}"


def test_nothing_points_outside_the_repository() -> None:
    offenders = [f"{p.relative_to(REPO)}:{n}" for p in SOURCES
                 for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
                 if UNSHIPPED.search(line) and p != Path(__file__).resolve()]
    assert not offenders, f"references to documents this repository does not ship: {offenders}"


def test_every_requirement_id_and_decision_is_explained() -> None:
    text = REQUIREMENTS.read_text()
    explained_ids = set(re.findall(r"\*\*([SCUBALDRT][0-9])\b", text))
    explained_decisions: set[int] = set()
    for row in re.finditer(r"^\| (\d+)(?:–(\d+))? \|", text, re.M):
        lo, hi = int(row.group(1)), int(row.group(2) or row.group(1))
        explained_decisions.update(range(lo, hi + 1))
    missing_ids: dict[str, str] = {}
    missing_decisions: dict[int, str] = {}
    for path in SOURCES:
        if path == REQUIREMENTS or path == Path(__file__).resolve():
            continue
        body = path.read_text(errors="replace")
        for word in REQUIREMENT_ID.findall(body):
            if word not in explained_ids and word not in NOT_IDS:
                missing_ids.setdefault(word, str(path.relative_to(REPO)))
        for m in DECISION.finditer(body):
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            if lo == 23 and hi == 23:  # "ADR 0023" itself read as a number
                continue
            for number in range(lo, hi + 1):
                if number not in explained_decisions:
                    missing_decisions.setdefault(number, str(path.relative_to(REPO)))
    assert not missing_ids, f"requirement ids used but not in docs/requirements.md: {missing_ids}"
    assert not missing_decisions, (
        f"design decisions cited but not in docs/requirements.md: {missing_decisions}")


PR_TEXTS = sorted((REPO / "upstream-pr").glob("0[1-9]-*.md")) + sorted(
    (REPO / "upstream-pr" / "kagent-main").glob("[0-9][0-9]-*.md"))
PR_SECTIONS = ("## Problem", "## Change", "## How to test", "## Migration and rollback",
               "## User-visible changes and release note", "## Risks")


@pytest.mark.parametrize("path", PR_TEXTS, ids=lambda p: p.name)
def test_pr_texts_are_short_and_complete(path: Path) -> None:
    """What a kagent maintainer reads: at most ~600 words (under 500 for a PR on main), every
    section, no DCO placeholder."""
    text = path.read_text()
    limit = 499 if path.parent.name == "kagent-main" else 600
    assert len(text.split()) <= limit, f"{path.name}: {len(text.split())} words"
    missing = [s for s in PR_SECTIONS if s not in text]
    assert not missing, f"{path.name}: missing {missing}"
    assert "Signed-off-by" not in text


def test_cover_letter_names_target_main_and_sign_off() -> None:
    text = (REPO / "upstream-pr" / "00-cover-letter.md").read_text()
    assert len(text.split()) <= 600
    for needed in ("release/v0.9.x", "memory.proto", "Signed-off-by", "legacy"):
        assert needed in text, needed
