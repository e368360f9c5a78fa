"""The documents agree with the code and with each other (issue 46, "docs that agree").

* ``docs/index.md`` links every document in ``docs/``, the README and ``BENCHMARKS.md``;
* ``docs/install.md`` lists every extra ``pyproject.toml`` declares, and no message of the
  package tells a user to install from an index that does not serve it;
* the development database's data directory is one name, ignored by git;
* ``BENCHMARKS.md`` is a reference (at most ~300 lines) and, like its history, names no one
  machine's paths.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import kagent_governed_memory

REPO = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
DOCS = REPO / "docs"
PACKAGE = Path(kagent_governed_memory.__file__).resolve().parent
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|tmp|root|home)/")


def _links(path: Path) -> set[Path]:
    return {(path.parent / target.partition("#")[0]).resolve()
            for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", path.read_text())
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target) and target.partition("#")[0]}


def test_the_index_links_every_document() -> None:
    linked = _links(DOCS / "index.md")
    wanted = {p.resolve() for p in DOCS.glob("*.md") if p.name != "index.md"}
    wanted |= {(REPO / "README.md").resolve(), (REPO / "BENCHMARKS.md").resolve()}
    missing = sorted(str(p.relative_to(REPO)) for p in wanted - linked)
    assert not missing, f"docs/index.md does not link {missing}"
    assert (DOCS / "index.md").resolve() in _links(REPO / "README.md")
    for group in ("## Start", "## Operate", "## Reference", "## Contribute"):
        assert group in (DOCS / "index.md").read_text()


def test_install_lists_every_extra_and_hints_are_true_for_a_clone() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    install = (DOCS / "install.md").read_text()
    missing = sorted(e for e in extras if f"| `{e}` |" not in install)
    assert not missing, f"docs/install.md does not list the extras {missing}"
    assert "pip install -e '.[matrix-demo]'" in install
    wrong = sorted(str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")
                   if "install 'kagent-governed-memory[" in p.read_text()
                   or "\"'kagent-governed-memory[" in p.read_text())
    assert not wrong, f"install hints no index serves (say pip install -e '.[…]'): {wrong}"


def test_one_development_data_directory_ignored_by_git() -> None:
    texts = [REPO / "README.md", *DOCS.glob("*.md")]
    named = {m for p in texts for m in re.findall(r"dev-db --data-dir (\S+)", p.read_text())}
    assert named == {".kgm-dev"}, named
    assert ".kgm-dev/" in (REPO / ".gitignore").read_text().splitlines()


def test_benchmarks_is_a_reference_without_machine_paths() -> None:
    reference = (REPO / "BENCHMARKS.md").read_text()
    assert len(reference.splitlines()) <= 300
    for heading in ("## Method", "## Machine", "## Current results", "## Commands"):
        assert heading in reference, heading
    for path in (REPO / "BENCHMARKS.md", DOCS / "benchmarks-history.md"):
        lines = [n for n, line in enumerate(path.read_text().splitlines(), 1)
                 if MACHINE_PATH.search(line)]
        assert not lines, f"{path.relative_to(REPO)}: machine paths on lines {lines}"


def test_the_architecture_map_names_every_module_and_no_gone_one() -> None:
    """docs/architecture.md's package map follows the layout: every module of the package (but
    ``__init__`` and the generated stubs) is named there, and every subpackage it names exists."""
    arch = (DOCS / "architecture.md").read_text()
    modules = [p for p in PACKAGE.rglob("*.py") if "_proto" not in p.parts
               and p.stem != "__init__"]
    missing = sorted(str(p.relative_to(PACKAGE)) for p in modules
                     if not re.search(rf"`{re.escape(p.stem)}(?:`|[ :(.])|{re.escape(p.name)}",
                                      arch))
    assert not missing, f"docs/architecture.md does not name {missing}"
    named = set(re.findall(r"\*\*`(\w+)/`\*\*", arch))
    assert named == {p.name for p in PACKAGE.iterdir()
                     if (p / "__init__.py").is_file()}, named
