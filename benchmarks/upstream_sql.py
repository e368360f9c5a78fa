"""Upstream kagent v0.9.11's memory SQL, read at run time from a kagent source.

This repository never carries upstream's DDL or query text: the benchmark reads it from a
kagent checkout or git directory given by ``--kagent-src PATH`` or ``$KAGENT_SRC``:

* a checkout directory (its working tree is read as it is; the tree's version is reported);
* a git directory or checkout read at a ref: ``PATH@REF`` (``git show REF:<path>``), or a
  bare/mirror git directory alone, read at ``v0.9.11``.

What is read: the vector-track migrations ``go/core/pkg/migrations/vector/000001..000003*.up.sql``
and the sqlc queries ``SearchAgentMemory``, ``InsertMemory``, ``IncrementMemoryAccessCount`` and
``DeleteAgentMemory`` from ``go/core/internal/database/queries/memory.sql``.  sqlc's ``$n``
placeholders are kept: psycopg's ``RawCursor``/``AsyncRawCursor`` send them to PostgreSQL
as they are (server-side parameters, so ``$1`` used twice is one value, as with pgx).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_REF",
    "HOW_TO_GET",
    "QUERY_NAMES",
    "UpstreamSQL",
    "UpstreamSourceError",
    "load",
    "parse_queries",
    "to_psycopg",
]

DEFAULT_REF = "v0.9.11"
MIGRATIONS_DIR = "go/core/pkg/migrations/vector"
MIGRATION_VERSIONS = ("000001", "000002", "000003")
QUERIES_FILE = "go/core/internal/database/queries/memory.sql"
QUERY_NAMES = ("SearchAgentMemory", "InsertMemory", "IncrementMemoryAccessCount",
               "DeleteAgentMemory")
HOW_TO_GET = (
    "git clone https://github.com/kagent-dev/kagent && git -C kagent checkout v0.9.11\n"
    "then pass --kagent-src kagent (or set KAGENT_SRC=kagent); a git directory can be read at a "
    "ref as --kagent-src PATH@v0.9.11"
)

_HEADER = re.compile(r"^-- name: (\w+) :(one|many|exec|execrows|execresult|copyfrom|batch\w*)\s*$",
                     re.MULTILINE)
_PLACEHOLDER = re.compile(r"\$(\d+)")
_SQLC_MACRO = re.compile(r"\bsqlc\.\w+\s*\(|(?<![:@\w])@\w+")


class UpstreamSourceError(RuntimeError):
    """No usable kagent source; the message says how to get one."""


@dataclass(frozen=True)
class UpstreamSQL:
    """The upstream statements the benchmark runs, as parameters of its measuring functions.

    ``migrations``: (name, text) in order.  The first creates the table; the later ones (the
    ANN index, the id default) are run after the data is loaded — the order an upgrade of a
    GORM-era database takes, and much faster than growing an HNSW graph row by row.
    Query parameters (sqlc order): ``search`` ($1 vector, $2 agent_name, $3 user_id,
    $4 limit), ``insert`` ($1 agent_name, $2 user_id, $3 content, $4 embedding, $5 metadata,
    $6 expires_at, $7 access_count), ``increment`` ($1 text[] of ids), ``delete``
    ($1 agent_name, $2 user_id).
    """

    migrations: tuple[tuple[str, str], ...]
    search: str
    insert: str
    increment: str
    delete: str
    source: str = "given"


def parse_queries(text: str) -> dict[str, str]:
    """sqlc ``-- name: Name :kind`` blocks → statement text (comment lines and ``;`` dropped)."""
    parts = _HEADER.split(text)
    out: dict[str, str] = {}
    for i in range(1, len(parts), 3):
        lines = [ln for ln in parts[i + 2].strip().splitlines() if not ln.lstrip().startswith("--")]
        out[parts[i]] = "\n".join(lines).strip().rstrip(";").strip()
    return out


def to_psycopg(sql: str) -> str:
    """A sqlc statement made ready for psycopg's raw cursors.

    ``$n`` placeholders are what ``RawCursor`` expects, so they are kept; sqlc macros
    (``sqlc.arg``, ``@name``) have no psycopg equivalent and are refused, as are gaps in the
    numbering (psycopg passes parameters by position).
    """
    if _SQLC_MACRO.search(sql):
        raise UpstreamSourceError("upstream query uses sqlc macros this benchmark cannot run")
    numbers = {int(n) for n in _PLACEHOLDER.findall(sql)}
    if numbers and numbers != set(range(1, max(numbers) + 1)):
        raise UpstreamSourceError("upstream query has gaps in its $n parameters")
    return sql


class _Checkout:
    def __init__(self, root: Path) -> None:
        self.root = root

    def names(self, folder: str) -> list[str]:
        return sorted(p.name for p in (self.root / folder).iterdir())

    def read(self, path: str) -> str:
        return (self.root / path).read_text(encoding="utf-8")

    def describe(self) -> str:
        version = _git(self.root, "describe", "--tags", "--always", "--dirty", check=False)
        return f"checkout {self.root} ({version.strip() or 'no git metadata'})"


class _GitRef:
    def __init__(self, git_dir: Path, ref: str) -> None:
        self.git_dir, self.ref = git_dir, ref
        try:
            self.commit = _git(git_dir, "rev-parse", "--verify", f"{ref}^{{commit}}").strip()
        except UpstreamSourceError:
            raise UpstreamSourceError(
                f"{git_dir} has no ref {ref!r}; fetch the tags or use a checkout.\n{HOW_TO_GET}"
            ) from None

    def names(self, folder: str) -> list[str]:
        out = _git(self.git_dir, "ls-tree", "--name-only", f"{self.ref}:{folder}")
        return sorted(out.split())

    def read(self, path: str) -> str:
        return _git(self.git_dir, "show", f"{self.ref}:{path}")

    def describe(self) -> str:
        return f"git {self.git_dir} at {self.ref} ({self.commit[:12]})"


def _git(where: Path, *args: str, check: bool = True) -> str:
    try:
        done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        done = None
    if done is None or done.returncode != 0:
        if check:
            raise UpstreamSourceError(f"git {args[0]} failed in {where}")
        return ""
    return done.stdout


def _reader(spec: str) -> _Checkout | _GitRef:
    path, ref = spec, None
    if "@" in spec and not Path(spec).exists():
        path, ref = spec.rsplit("@", 1)
    root = Path(path).expanduser()
    if not root.exists():
        raise UpstreamSourceError(f"kagent source {root} does not exist.\n{HOW_TO_GET}")
    if ref is None and (root / MIGRATIONS_DIR).is_dir():
        return _Checkout(root)
    if _git(root, "rev-parse", "--git-dir", check=False):
        return _GitRef(root, ref or DEFAULT_REF)
    raise UpstreamSourceError(
        f"{root} is neither a kagent checkout (no {MIGRATIONS_DIR}) nor a git directory.\n"
        f"{HOW_TO_GET}")


def load(spec: str | None = None) -> UpstreamSQL:
    """Read upstream's memory schema and queries from ``spec`` (or ``$KAGENT_SRC``)."""
    spec = spec or os.environ.get("KAGENT_SRC") or ""
    if not spec:
        raise UpstreamSourceError(
            "upstream kagent's SQL is not part of this repository and no source was given.\n"
            + HOW_TO_GET)
    reader = _reader(spec)
    try:
        names = reader.names(MIGRATIONS_DIR)
        migrations: list[tuple[str, str]] = []
        for version in MIGRATION_VERSIONS:
            found = [n for n in names if n.startswith(version + "_") and n.endswith(".up.sql")]
            if len(found) != 1:
                raise UpstreamSourceError(
                    f"expected one {version}_*.up.sql in {MIGRATIONS_DIR}, found {found}")
            migrations.append((found[0], reader.read(f"{MIGRATIONS_DIR}/{found[0]}")))
        queries = parse_queries(reader.read(QUERIES_FILE))
    except OSError as exc:
        raise UpstreamSourceError(f"cannot read the kagent source: {exc}.\n{HOW_TO_GET}") from None
    missing = [n for n in QUERY_NAMES if n not in queries]
    if missing:
        raise UpstreamSourceError(f"{QUERIES_FILE} lacks {', '.join(missing)}")
    return UpstreamSQL(
        migrations=tuple(migrations),
        search=to_psycopg(queries["SearchAgentMemory"]),
        insert=to_psycopg(queries["InsertMemory"]),
        increment=to_psycopg(queries["IncrementMemoryAccessCount"]),
        delete=to_psycopg(queries["DeleteAgentMemory"]),
        source=reader.describe(),
    )
