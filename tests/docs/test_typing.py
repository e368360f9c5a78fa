"""The public API is typed: ``mypy --strict`` (pyproject.toml's [tool.mypy]) passes on the
package, on every ```python block of the README, and on a probe that fails if a public name
degrades to ``Any`` (the lazily imported ADK names, methods under ``@traced``)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import get_args

from kagent_governed_memory import OriginKind, OriginName, ScopeKind, ScopeKindName

ROOT = Path(__file__).resolve().parents[2]

# Each line fails type-checking if the name it probes is Any or has lost its signature: a
# variable annotated with an Any-typed name is an error ("not valid as a type"), and
# ``assert_type`` compares exactly.
PROBE = textwrap.dedent('''
    from typing import assert_type

    from google.adk.agents import LlmAgent

    import kagent_governed_memory as kgm
    from kagent_governed_memory import GovernedMemoryService, configure_governed_memory
    from kagent_governed_memory.adk import service


    def lazy_names(svc: GovernedMemoryService, agent: LlmAgent) -> None:
        assert_type(svc, service.GovernedMemoryService)
        assert_type(configure_governed_memory(agent, svc), LlmAgent)


    async def traced_methods_keep_signatures(svc: kgm.GovernedMemoryService) -> None:
        assert_type(await svc.recall("q", explicit=False),
                    list[kgm.MemoryRecord] | kgm.ReasonCode)
        assert_type(await svc.save_facts(["fact"]), service.SaveOutcome)
        await svc.recall(b"not a str")  # type: ignore[arg-type]  # (an unused ignore fails)


    def origin_as_enum_or_literal() -> None:
        kgm.Principal(mxid="@a:example.org", origin=kgm.OriginKind.NATIVE_LOCAL)
        kgm.Principal(mxid="@a:example.org", origin="native_local")
        kgm.Principal(mxid="@a:example.org", origin="nativelocal")  # type: ignore[call-overload]
        kgm.MemoryScope(kind="control_room", room_id="!r:example.org")
        kgm.MemoryScope(kind="principal")
        assert_type(kgm.Principal(mxid="@a:example.org", origin="native_local").origin,
                    kgm.OriginKind | None)  # None for a principal of another issuer kind
        assert_type(kgm.Principal.oidc("https://idp.example.org", "sub").issuer_kind, str)
''')


DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def readme_snippets() -> list[tuple[str, str]]:
    """(``file:N``, code) of every ```python block in the README and in docs/: those are
    complete programs or notebook cells a reader pastes; reference fragments (docs/api.md) are
    fenced ```py and not checked."""
    out = []
    for doc in DOCUMENTS:
        blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), re.DOTALL)
        out += [(f"{doc.relative_to(ROOT)}:{n}", b) for n, b in enumerate(blocks, 1)]
    return out


def as_module(snippet: str) -> str:
    """A notebook-style snippet (top-level ``await``/``async with``) is checked as the body of
    an async function; its line numbers in mypy's report are then one more than in the block."""
    try:
        compile(snippet, "<readme>", "exec")  # compiled, not run
    except SyntaxError:
        return "async def _readme_snippet() -> None:\n" + textwrap.indent(snippet, "    ")
    return snippet


def test_string_literals_match_the_enums() -> None:
    assert get_args(OriginName) == tuple(o.value for o in OriginKind)
    assert get_args(ScopeKindName) == tuple(k.value for k in ScopeKind)


def test_mypy_strict_on_the_package_and_the_readme(tmp_path: Path) -> None:
    snippets = readme_snippets()
    assert len(snippets) >= 2, "README.md, docs/: the ```python blocks were not found"
    files, names = [], []
    for i, (where, snippet) in enumerate(snippets, 1):
        path = tmp_path / f"doc_snippet_{i}.py"
        path.write_text(as_module(snippet))
        files.append(str(path))
        names.append(f"doc_snippet_{i}.py = {where}")
    (tmp_path / "typing_probe.py").write_text(PROBE)
    files.append(str(tmp_path / "typing_probe.py"))
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(ROOT / ".mypy_cache"), "--no-error-summary", "--hide-error-context",
         str(ROOT / "kagent_governed_memory"), *files],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert done.returncode == 0 and not errors, (
        f"mypy --strict (exit {done.returncode}): {len(errors)} error(s); snippets: "
        + "; ".join(names) + "\n" + (done.stdout + done.stderr)[-6000:]
    )
