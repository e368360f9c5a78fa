#!/usr/bin/env python3
"""Keep the SQL carried by the kagent v0.9.11 patch series identical to the library's SQL.

``kagent_governed_memory/sql/`` is the one source of truth.  The Go patches carry it as
*new files* (verbatim copies):

* ``kagent_governed_memory/sql/migrations/NNNNNN_*.sql``
  -> ``go/core/pkg/migrations/vector/NNNNNN_*.sql`` (the migrations patch);
* ``kagent_governed_memory/sql/queries.sql``
  -> ``go/core/internal/database/governed_memory.sql`` (the database-client patch);
* ``tests/vectors/scope_assertion_v1.json`` (the shared scope-assertion test vectors)
  -> ``go/core/internal/memoryscope/testdata/scope_assertion_v1.json`` (the verifier patch).

Default mode rewrites those file sections of the ``git format-patch`` files in place (hunk
header line counts, ``index`` blob ids, "No newline" markers), adds or removes migration
sections when the library gains or loses a file, and recomputes each touched patch's diffstat
exactly as ``git format-patch`` prints it (72 columns).  Commit messages, the other files of a
patch and every other patch are left byte-for-byte alone.

``--check`` changes nothing: it parses the patches (no git, no mirror needed) and exits 1 with
one line per difference if any carried file differs from the library, is missing or is
stale, or if a touched patch's diffstat no longer matches its hunks.

Stdlib only.  Usage::

    python scripts/sync_patch_sql.py [--check] [--sql-dir DIR] [--patches-dir DIR] [--vectors F]

``--sql-dir`` (or ``KGM_SQL_DIR``) defaults to ``kagent_governed_memory/sql``;
``--patches-dir`` (or ``KGM_PATCHES_DIR``) defaults to ``patches/kagent-v0.9.11``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SQL_DIR = ROOT / "kagent_governed_memory" / "sql"
DEFAULT_PATCHES_DIR = ROOT / "patches" / "kagent-v0.9.11"

MIGRATIONS_PREFIX = "go/core/pkg/migrations/vector/"
QUERIES_PATH = "go/core/internal/database/governed_memory.sql"
VECTORS_PATH = "go/core/internal/memoryscope/testdata/scope_assertion_v1.json"
DEFAULT_VECTORS = ROOT / "tests" / "vectors" / "scope_assertion_v1.json"
MIGRATION_NAME = re.compile(r"^\d{6}_[a-z0-9_]+\.(up|down)\.sql$")
NO_NEWLINE = "\\ No newline at end of file"
STAT_WIDTH = 72  # git format-patch: MAIL_DEFAULT_WRAP
HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
SECTION_HEADER_PREFIXES = (
    "diff --git ", "index ", "new file mode ", "deleted file mode ", "old mode ", "new mode ",
    "similarity index ", "dissimilarity index ", "rename from ", "rename to ", "copy from ",
    "copy to ", "--- ", "+++ ",
)


class PatchError(Exception):
    """A patch file this script cannot read or rewrite safely."""


@dataclass
class Section:
    """One file of a patch: its header lines and hunks (each a header and its lines)."""

    path: str
    header: list[str]
    hunks: list[tuple[str, list[str]]] = field(default_factory=list)

    @property
    def is_new(self) -> bool:
        return any(line.startswith("new file mode ") for line in self.header)

    @property
    def is_deleted(self) -> bool:
        return any(line.startswith("deleted file mode ") for line in self.header)

    def mode(self) -> str:
        for line in self.header:
            if line.startswith(("new file mode ", "deleted file mode ")):
                return line.rsplit(" ", 1)[1]
        return "100644"

    def counts(self) -> tuple[int, int]:
        added = sum(1 for _, lines in self.hunks for ln in lines if ln.startswith("+"))
        deleted = sum(1 for _, lines in self.hunks for ln in lines if ln.startswith("-"))
        return added, deleted

    def lines(self) -> list[str]:
        out = list(self.header)
        for head, body in self.hunks:
            out.append(head)
            out.extend(body)
        return out

    def new_file_text(self) -> str:
        """The content a new-file section creates."""
        if not self.is_new:
            raise PatchError(f"{self.path}: not a new-file section")
        if not self.hunks:
            return ""
        if len(self.hunks) != 1:
            raise PatchError(f"{self.path}: a new file must have exactly one hunk")
        body = self.hunks[0][1]
        missing_newline = bool(body) and body[-1] == NO_NEWLINE
        lines = [ln[1:] for ln in body if ln != NO_NEWLINE]
        return "\n".join(lines) + ("" if missing_newline else "\n")


@dataclass
class Patch:
    """A ``git format-patch`` file split into its parts; ``render()`` is byte-exact."""

    path: Path
    preamble: list[str]  # mail headers and message, up to and including the "---" line
    stat: list[str]  # diffstat, summary and the blank line before the first section
    sections: list[Section]
    trailer: list[str]  # everything after the last hunk ("-- ", git version, ...)

    def render(self) -> str:
        out = [*self.preamble, *self.stat]
        for section in self.sections:
            out.extend(section.lines())
        out.extend(self.trailer)
        return "\n".join(out)

    def section(self, path: str) -> Section | None:
        return next((s for s in self.sections if s.path == path), None)


def parse_patch(path: Path) -> Patch:
    lines = path.read_bytes().decode("utf-8").split("\n")
    try:
        sep = lines.index("---")
    except ValueError:
        raise PatchError(f"{path.name}: no '---' line after the commit message") from None
    first = next((i for i in range(sep, len(lines)) if lines[i].startswith("diff --git ")), None)
    if first is None:
        raise PatchError(f"{path.name}: no 'diff --git' section")
    preamble, stat = lines[: sep + 1], lines[sep + 1 : first]
    sections: list[Section] = []
    i = first
    while i < len(lines) and lines[i].startswith("diff --git "):
        m = re.match(r"^diff --git a/(\S+) b/(\S+)$", lines[i])
        if not m or m.group(1) != m.group(2):
            raise PatchError(f"{path.name}: unsupported section header {lines[i]!r}")
        section = Section(path=m.group(2), header=[lines[i]])
        i += 1
        while i < len(lines) and lines[i].startswith(SECTION_HEADER_PREFIXES) \
                and not lines[i].startswith("diff --git "):
            section.header.append(lines[i])
            i += 1
        while i < len(lines) and lines[i].startswith("@@ "):
            hm = HUNK_HEADER.match(lines[i])
            if not hm:
                raise PatchError(f"{path.name}: bad hunk header {lines[i]!r}")
            old = int(hm.group(2) if hm.group(2) is not None else 1)
            new = int(hm.group(4) if hm.group(4) is not None else 1)
            head, body = lines[i], []
            i += 1
            while old > 0 or new > 0:
                if i >= len(lines):
                    raise PatchError(f"{path.name}: {section.path}: hunk ends early")
                ln = lines[i]
                tag = ln[:1]
                if tag in (" ", ""):
                    old, new = old - 1, new - 1
                elif tag == "-":
                    old -= 1
                elif tag == "+":
                    new -= 1
                elif ln != NO_NEWLINE:
                    raise PatchError(f"{path.name}: {section.path}: bad hunk line {ln!r}")
                if old < 0 or new < 0:
                    raise PatchError(f"{path.name}: {section.path}: hunk longer than its header")
                body.append(ln)
                i += 1
            if i < len(lines) and lines[i] == NO_NEWLINE:
                body.append(lines[i])
                i += 1
            section.hunks.append((head, body))
        sections.append(section)
    return Patch(path, preamble, stat, sections, lines[i:])


# -- diffstat, as git's diff.c show_stats() prints it for format-patch ---------------------


def _scale(it: int, width: int, max_change: int) -> int:
    return 0 if not it else 1 + (it * (width - 1) // max_change)


def render_stat(sections: list[Section]) -> list[str]:
    counts = [s.counts() for s in sections]
    max_change = max((a + d for a, d in counts), default=0)
    max_len = max((len(s.path) for s in sections), default=0)
    number_width = len(str(max_change))
    width = max(STAT_WIDTH, 16 + 6 + number_width)
    graph_width, name_width = max_change, max_len
    if name_width + number_width + 6 + graph_width > width:
        if graph_width > width * 3 // 8 - number_width - 6:
            graph_width = max(6, width * 3 // 8 - number_width - 6)
        if name_width > width - number_width - 6 - graph_width:
            name_width = width - number_width - 6 - graph_width
        else:
            graph_width = width - number_width - 6 - name_width
    out = []
    for section, (added, deleted) in zip(sections, counts, strict=True):
        name, prefix, room = section.path, "", name_width
        if name_width < len(name):
            prefix, room = "...", max(0, name_width - 3)
            name = name[len(name) - room :]
            slash = name.find("/")
            if slash >= 0:
                name = name[slash:]
        padding = max(0, room - len(name))
        add, dele = added, deleted
        if graph_width <= max_change:
            total = _scale(add + dele, graph_width, max_change)
            if total < 2 and add and dele:
                total = 2
            if add < dele:
                add = _scale(add, graph_width, max_change)
                dele = total - add
            else:
                dele = _scale(dele, graph_width, max_change)
                add = total - dele
        changed = added + deleted
        out.append(f" {prefix}{name}{' ' * padding} | {changed:>{number_width}}"
                   f"{' ' if changed else ''}{'+' * add}{'-' * dele}")
    files = len(sections)
    inserted = sum(a for a, _ in counts)
    removed = sum(d for _, d in counts)
    summary = f" {files} file changed" if files == 1 else f" {files} files changed"
    if inserted or not removed:
        summary += f", {inserted} insertion(+)" if inserted == 1 else f", {inserted} insertions(+)"
    if removed or not inserted:
        summary += f", {removed} deletion(-)" if removed == 1 else f", {removed} deletions(-)"
    out.append(summary)
    for section in sections:
        if section.is_new:
            out.append(f" create mode {section.mode()} {section.path}")
        elif section.is_deleted:
            out.append(f" delete mode {section.mode()} {section.path}")
        elif any(ln.startswith(("old mode ", "similarity index ", "copy from "))
                 for ln in section.header):
            raise PatchError(f"{section.path}: mode changes, renames and copies are not supported")
    out.append("")
    return out


# -- the library side ----------------------------------------------------------------------


def library_files(sql_dir: Path, vectors: Path = DEFAULT_VECTORS) -> dict[str, bytes]:
    """Patch path -> the bytes the patch must carry for it."""
    migrations = sql_dir / "migrations"
    queries = sql_dir / "queries.sql"
    if not migrations.is_dir() or not queries.is_file():
        raise PatchError(f"{sql_dir}: not a library sql/ directory (migrations/, queries.sql)")
    if not vectors.is_file():
        raise PatchError(f"{vectors}: the shared scope-assertion vectors are missing")
    out = {QUERIES_PATH: queries.read_bytes(), VECTORS_PATH: vectors.read_bytes()}
    for item in sorted(migrations.iterdir()):
        if MIGRATION_NAME.match(item.name):
            out[MIGRATIONS_PREFIX + item.name] = item.read_bytes()
    return out


def is_managed(section: Section) -> bool:
    """Carried library files: the governed queries and every migration the series adds."""
    return section.path in (QUERIES_PATH, VECTORS_PATH) or (
        section.path.startswith(MIGRATIONS_PREFIX) and section.is_new)


def new_file_section(path: str, data: bytes, old: Section | None) -> Section:
    text = data.decode("utf-8")
    if not text:
        raise PatchError(f"{path}: an empty file cannot be carried as a hunk")
    abbrev = 9
    mode = "100644"
    if old is not None:
        index = next((ln for ln in old.header if ln.startswith("index ")), None)
        m = re.match(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)", index or "")
        if m:
            abbrev = len(m.group(2))
        mode = old.mode()
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()[:abbrev]
    if text.endswith("\n"):
        body, marker = text[:-1].split("\n"), []
    else:
        body, marker = text.split("\n"), [NO_NEWLINE]
    count = len(body)
    head = "@@ -0,0 +1 @@" if count == 1 else f"@@ -0,0 +1,{count} @@"
    header = [f"diff --git a/{path} b/{path}", f"new file mode {mode}",
              f"index {'0' * abbrev}..{blob}", "--- /dev/null", f"+++ b/{path}"]
    return Section(path, header, [(head, ["+" + ln for ln in body] + marker)])


def load_patches(patches_dir: Path) -> list[Patch]:
    files = sorted(p for p in patches_dir.glob("*.patch") if p.is_file())
    if not files:
        raise PatchError(f"{patches_dir}: no *.patch files")
    return [parse_patch(p) for p in files]


def sync(sql_dir: Path, patches_dir: Path, *, check: bool,
         vectors: Path = DEFAULT_VECTORS) -> list[str]:
    """Returns the differences found (check) or the files rewritten (write)."""
    wanted = library_files(sql_dir, vectors)
    patches = load_patches(patches_dir)
    problems: list[str] = []
    homes: dict[str, Patch] = {}
    for patch in patches:
        for section in patch.sections:
            if is_managed(section):
                if section.path in homes:
                    problems.append(f"{section.path}: carried by more than one patch")
                homes[section.path] = patch
    queries_home, vectors_home = homes.get(QUERIES_PATH), homes.get(VECTORS_PATH)
    migration_homes = {id(p): p for path, p in homes.items()
                       if path not in (QUERIES_PATH, VECTORS_PATH)}
    for path, home in ((QUERIES_PATH, queries_home), (VECTORS_PATH, vectors_home)):
        if home is None:
            problems.append(f"{path}: no patch carries it")
    if len(migration_homes) != 1:
        problems.append(f"{MIGRATIONS_PREFIX}: the migrations must be carried by exactly one "
                        f"patch (found {len(migration_homes)})")
    if problems:
        raise PatchError("; ".join(problems))
    migrations_home = next(iter(migration_homes.values()))

    changed: list[str] = []
    for patch in patches:
        homes_of = {QUERIES_PATH: queries_home, VECTORS_PATH: vectors_home}
        target = {path: data for path, data in wanted.items()
                  if patch is homes_of.get(path, migrations_home)}
        if not target and not any(is_managed(s) for s in patch.sections):
            continue
        sections: list[Section] = []
        for section in patch.sections:
            if not is_managed(section):
                sections.append(section)
            elif section.path in target:
                fresh = new_file_section(section.path, target.pop(section.path), section)
                if check and fresh.lines() != section.lines():
                    what = ("differs from the library"
                            if fresh.new_file_text() != _text(section) else "hunk or index stale")
                    problems.append(f"{patch.path.name}: {section.path}: {what}")
                sections.append(fresh)
            else:
                problems.append(f"{patch.path.name}: {section.path}: not in the library (stale)")
        for path, data in target.items():
            problems.append(f"{patch.path.name}: {path}: missing from the patch")
            sections.append(new_file_section(path, data, None))
        if target:  # git orders a patch's files by path
            sections.sort(key=lambda s: s.path.encode())
        stat = render_stat(sections)
        if check and stat != patch.stat and not problems:
            problems.append(f"{patch.path.name}: diffstat does not match its hunks")
        if not check:
            rendered = Patch(patch.path, patch.preamble, stat, sections, patch.trailer).render()
            if rendered != patch.render():
                patch.path.write_bytes(rendered.encode("utf-8"))
                changed.append(str(patch.path))
    return problems if check else changed


def _text(section: Section) -> str | None:
    try:
        return section.new_file_text()
    except PatchError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if the patches' SQL differs from the library")
    parser.add_argument("--sql-dir", type=Path,
                        default=Path(os.environ.get("KGM_SQL_DIR", DEFAULT_SQL_DIR)))
    parser.add_argument("--patches-dir", type=Path,
                        default=Path(os.environ.get("KGM_PATCHES_DIR", DEFAULT_PATCHES_DIR)))
    parser.add_argument("--vectors", type=Path,
                        default=Path(os.environ.get("KGM_VECTORS", DEFAULT_VECTORS)),
                        help="the shared scope-assertion vectors (tests/vectors/...)")
    args = parser.parse_args(argv)
    try:
        result = sync(args.sql_dir, args.patches_dir, check=args.check, vectors=args.vectors)
    except (PatchError, OSError, UnicodeDecodeError) as exc:
        print(f"sync_patch_sql: {exc}", file=sys.stderr)
        return 2
    if args.check:
        for line in result:
            print(f"sync_patch_sql: {line}", file=sys.stderr)
        if result:
            print("sync_patch_sql: the patch series' SQL differs from "
                  f"{args.sql_dir}; run: python scripts/sync_patch_sql.py", file=sys.stderr)
            return 1
        print(f"sync_patch_sql: patch SQL matches {args.sql_dir}")
        return 0
    for path in result:
        print(f"sync_patch_sql: rewrote {path}")
    if not result:
        print("sync_patch_sql: patches already match the library")
    return 0


if __name__ == "__main__":
    sys.exit(main())
