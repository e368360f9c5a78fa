"""The public surface is what docs/api.md says it is.

* Each public module's ``__all__`` equals the names docs/api.md documents for it: a name
  exported but undocumented, or documented but not exported, fails.  docs/api.md names a
  section's module(s) in its heading (``## Title — `kagent_governed_memory.x` ``); a name is
  documented by a row of a ``| name | meaning |`` table in such a section.
* Every name in a public ``__all__`` is importable (the lazily imported ones too).
* Tests and benchmarks use the public API only: no file under ``tests/`` or ``benchmarks/``
  imports a private package module (a module path with a component starting with ``_``, other
  than ``__init__``/``__main__``), except the white-box tests listed in ``WHITE_BOX`` with the
  private modules they patch or call, and why.  The list is exact: a listed import that is no
  longer there fails too, so it cannot grow stale.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "kagent_governed_memory"
API = ROOT / "docs" / "api.md"

# Every public module with a curated __all__; docs/api.md must name exactly these.
PUBLIC_MODULES = {
    "kagent_governed_memory",
    "kagent_governed_memory.adk",
    "kagent_governed_memory.adk.a2a",
    "kagent_governed_memory.adk.dev",
    "kagent_governed_memory.adk.uri",
    "kagent_governed_memory.cli",
    "kagent_governed_memory.configuration",
    "kagent_governed_memory.controls",
    "kagent_governed_memory.dev",
    "kagent_governed_memory.embedding",
    "kagent_governed_memory.errors",
    "kagent_governed_memory.identity",
    "kagent_governed_memory.kagent",
    "kagent_governed_memory.kagent.protos",
    "kagent_governed_memory.matrix",
    "kagent_governed_memory.models",
    "kagent_governed_memory.policy",
    "kagent_governed_memory.repository",
    "kagent_governed_memory.scope",
    "kagent_governed_memory.store",
    "kagent_governed_memory.telemetry",
    "kagent_governed_memory.testing",
}
# a module that needs an extra the environment lacks is skipped, not failed
EXTRAS = {"google", "a2a", "mautrix", "grpc", "opentelemetry"}

_HEADING = re.compile(r"^#{2,3} .*")
_MODULE = re.compile(r"`(kagent_governed_memory(?:\.[a-z][a-z0-9_]*)*)`")
_NAME = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)(?=`|\(|\s)")


def documented() -> dict[str, set[str]]:
    """module -> the names docs/api.md documents for it."""
    out: dict[str, set[str]] = {}
    modules: list[str] = []
    in_names_table = False
    for line in API.read_text(encoding="utf-8").splitlines():
        if _HEADING.match(line):
            tail = line.split(" — ", 1)[1] if " — " in line else ""
            modules = _MODULE.findall(tail)
            for m in modules:
                out.setdefault(m, set())
            in_names_table = False
            continue
        if line.startswith("| name |"):
            in_names_table = True
            continue
        if not line.startswith("|"):
            in_names_table = False
            continue
        if not in_names_table or line.startswith("|---"):
            continue
        first = line.split("|")[1]
        for name in _NAME.findall(first):
            for m in modules:
                out[m].add(name)
    return out


def _import(name: str):  # noqa: ANN202 - a module
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in EXTRAS:
            pytest.skip(f"{name} needs an extra that is not installed ({exc.name})")
        raise


def test_api_md_names_every_public_module():
    assert set(documented()) == PUBLIC_MODULES


def test_every_public_package_and_module_is_pinned():
    """A new public subpackage or root module cannot go undocumented."""
    found = {"kagent_governed_memory"}
    for path in PACKAGE.iterdir():
        if path.name.startswith("_") or path.name in ("sql", "py.typed"):
            continue
        if path.suffix == ".py" or (path / "__init__.py").is_file():
            found.add(f"kagent_governed_memory.{path.stem}")
    assert found <= PUBLIC_MODULES, sorted(found - PUBLIC_MODULES)


@pytest.mark.parametrize("module", sorted(PUBLIC_MODULES))
def test_all_matches_api_md(module: str):
    exported = set(_import(module).__all__)
    docs = documented().get(module, set())
    assert not exported - docs, f"exported by {module} but not in docs/api.md"
    assert not docs - exported, f"documented for {module} in docs/api.md but not exported"


@pytest.mark.parametrize("module", sorted(PUBLIC_MODULES))
def test_every_exported_name_is_importable(module: str):
    mod = _import(module)
    assert len(mod.__all__) == len(set(mod.__all__)), "a name listed twice"
    for name in mod.__all__:
        try:
            getattr(mod, name)
        except ModuleNotFoundError as exc:  # a lazily imported name's extra
            if (exc.name or "").split(".")[0] not in EXTRAS:
                raise


def test_the_root_is_an_agent_authors_surface():
    import kagent_governed_memory as kgm

    assert len(kgm.__all__) <= 50
    root_modules = [p for p in PACKAGE.glob("*.py")]
    assert len(root_modules) <= 20, sorted(p.name for p in root_modules)


def _private(module: str) -> bool:
    return any(part.startswith("_") and part not in ("__init__", "__main__")
               for part in module.split(".")[1:])


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


_IMPORT_TEXT = re.compile(r"(?:from|import)\s+(kagent_governed_memory(?:\.\w+)+)")


def private_imports(path: Path) -> list[str]:
    """``file:line: module`` for each import of a private package module in ``path`` (code,
    and code held in strings: subprocess snippets)."""
    text = path.read_text(encoding="utf-8")
    found: list[str] = []
    for node in ast.walk(ast.parse(text)):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
            modules += [f"{node.module}.{a.name}" for a in node.names
                        if _is_module(f"{node.module}.{a.name}")]
        for module in modules:
            if module.split(".")[0] == "kagent_governed_memory" and _private(module):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {module}")
    for m in _IMPORT_TEXT.finditer(text):
        if _private(m.group(1)):
            line = text.count("\n", 0, m.start()) + 1
            entry = f"{path.relative_to(ROOT)}:{line}: {m.group(1)}"
            if entry not in found:
                found.append(entry)
    return found


# White-box tests: the private modules they patch or call, and why.  Nothing else under tests/
# or benchmarks/ may import a private module; each of these uses only what it names.
_KGM = "kagent_governed_memory"
WHITE_BOX: dict[str, set[str]] = {
    # the server-log probe pins/unpins the log settings and reads the demo's and CLI's plumbing
    "tests/database/test_server_log.py": {
        f"{_KGM}.store._store", f"{_KGM}.cli._demo", f"{_KGM}.cli._main",
        f"{_KGM}.dev._embedded", f"{_KGM}.store._migrations", f"{_KGM}.store._pgtypes"},
    # the embedded server's own failure paths (binary lookup, unshare wrapper)
    "tests/database/test_dev_database.py": {f"{_KGM}.dev._embedded"},
    # the JWS envelope's internals (clock skew, header checks) against crafted tokens
    "tests/unit/test_assertion.py": {f"{_KGM}.scope._assertion"},
    # the token file's re-read and the answer decoders of both transports
    "tests/kagent/test_token_file.py": {f"{_KGM}.kagent._transport"},
    "tests/kagent/test_grpc_transport.py": {f"{_KGM}.kagent._answers", f"{_KGM}.kagent._http"},
    "tests/kagent/test_kagent_main_runner.py": {f"{_KGM}.kagent._grpc"},
    # the sentinel sweep installs the span processor's internals on the bridge's tracer
    "tests/support/matrix_sinks.py": {f"{_KGM}.telemetry._spans"},
    # benchmarks that time one internal step alone (vector packing, key validation, spans)
    "benchmarks/floor.py": {f"{_KGM}.store._pgtypes", f"{_KGM}.store._validate"},
    "benchmarks/run.py": {f"{_KGM}.telemetry._spans"},
}


def test_tests_and_benchmarks_import_no_private_module_but_the_white_box_list():
    files = [*sorted((ROOT / "tests").rglob("*.py")), *sorted((ROOT / "benchmarks").rglob("*.py"))]
    files.remove(Path(__file__).resolve())  # its own probe below holds the forms it looks for
    assert files
    found: dict[str, set[str]] = {}
    for f in files:
        for hit in private_imports(f):
            where, _, module = hit.partition(": ")
            found.setdefault(where.rsplit(":", 1)[0], set()).add(module)
    assert found == WHITE_BOX


def test_the_private_import_check_sees_each_form(tmp_path: Path):
    probe = ROOT / "tests" / "_probe_private_imports.py"
    lines = ["import kagent_governed_memory.dev._embedded",
             "from kagent_governed_memory.store._sql import migrations",
             "from kagent_governed_memory.kagent import _http",
             "CODE = 'from kagent_governed_memory.scope._keys import key_id'",
             "from kagent_governed_memory.store import migrate",
             "from kagent_governed_memory.cli import _parser"]
    probe.write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        hits = private_imports(probe)
    finally:
        probe.unlink()
    assert [h.split(": ", 1)[1] for h in hits] == [
        "kagent_governed_memory.dev._embedded", "kagent_governed_memory.store._sql",
        "kagent_governed_memory.kagent._http", "kagent_governed_memory.scope._keys"]
