"""Run kagent's own Go database tests on a patched tree against the embedded PostgreSQL.

kagent's Go DB tests start ``pgvector/pgvector:pg18`` through testcontainers, which needs a
container engine.  The series' ``test(dbtest)`` commit adds a seam: when
``KAGENT_TEST_DATABASE_URL`` names a PostgreSQL server, every test database is created there
(random name, dropped on cleanup) instead.  This script starts the library's embedded
PostgreSQL 18 + pgvector (``kagent_governed_memory.dev``), points the seam at it as the
superuser (the tests create databases, the vector extension and the schema, as with the
container) and runs ``go test -race -count=1`` package by package in ``TREE/go``, as kagent's
CI does (``go test -race ./...``).

Roles.  ``EmbeddedPostgres`` prepares the roles of docs/database-roles.md, among them the
NOLOGIN groups ``kagent_memory_runtime``, ``kagent_memory_bridge``, ``kagent_memory_operator``
and ``kagent_memory_service`` (deprecated, the union of runtime and bridge plus the unbound
runtime calls); the script makes sure all four exist before the tests' concurrent migrations
run.  The governed tests (``database`` and ``httpserver/handlers``) do not run as the superuser:
through ``dbtest.MemberLoginT`` each creates throwaway logins that are members of those groups
only -- ``kagent_memory_service`` for the database client's unbound calls,
``kagent_memory_runtime`` + ``kagent_memory_bridge`` + ``kagent_memory_operator`` (the
controller's serving login) for the policies, the verifier registration and the controller's
HTTP handlers, a runtime-only login to check that offboarding, granting and registering are
refused to it.  The superuser only creates the databases, migrates and
resets tables.  The script turns on ``log_connections`` and DDL logging for its private server
and prints, per package pattern, which logins connected and what each ``kagent_test_*`` login
was made a member of, so the report shows what actually ran as what.  Afterwards it checks
that no test database or login was left behind.

Stdlib only (plus the library's ``_embedded`` module, which brings the server and ``psql``).
Usage::

    scripts/series go-db-tests --tree /path/to/kagent [--package ./core/...]... [-v]

Exit status: 0 all passed, 1 a package failed, 2 bad tree (no ``go/go.mod`` or no seam),
3 no ``go`` binary ("GO DB TESTS NOT RUN: go not found"), 4 the embedded server is unavailable.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

SEAM_ENV = "KAGENT_TEST_DATABASE_URL"
SEAM_FILE = "core/internal/dbtest/pgserver/pgserver.go"
SERVICE_ROLE = "kagent_memory_service"
OPERATOR_GROUP = "kagent_memory_operator"
RUNTIME_GROUP = "kagent_memory_runtime"
BRIDGE_GROUP = "kagent_memory_bridge"
GRANTS_GROUP = "kagent_memory_grants"
GROUPS = (SERVICE_ROLE, OPERATOR_GROUP, RUNTIME_GROUP, BRIDGE_GROUP, GRANTS_GROUP)
TEST_PREFIX = "kagent_test_"

# The packages the series touches, plus the two that only host DB tests through dbtest: the
# seam's own unit test and the controller reconciler test (dbtest.StartT).
DEFAULT_PACKAGES = [
    "./core/internal/dbtest/...",
    "./core/pkg/migrations/...",
    "./core/internal/database/...",
    "./core/internal/httpserver/...",
    "./core/internal/controller/reconciler/...",
    "./adk/pkg/memory/...",
    "./core/internal/memoryscope/...",
    "./core/internal/a2a/...",
]

_AUTHORIZED = re.compile(r"connection authorized: user=(\S+) database=(\S+)")
_CREATE_LOGIN = re.compile(
    r'CREATE ROLE "?(' + TEST_PREFIX + r'\w+)"? LOGIN\b.*?(?:\bIN ROLE (.*))?$',
    re.IGNORECASE | re.MULTILINE)
_IDENTIFIER = re.compile(r'"?(\w+)"?')


def _dsn_parts(dsn: str) -> dict[str, str]:
    """``host=/x port=5432 user=postgres dbname=kgm`` -> dict (the embedded DSNs have no spaces)."""
    return dict(part.split("=", 1) for part in dsn.split())



class Psql:
    """The embedded wheel's psql, as the superuser, on the server's Unix socket."""

    def __init__(self, admin_dsn: str) -> None:
        from kagent_governed_memory.dev import pg_bin_dir

        parts = _dsn_parts(admin_dsn)
        parts["dbname"] = "postgres"
        self.dsn = " ".join(f"{k}={v}" for k, v in parts.items())
        self.exe = str(pg_bin_dir() / "psql")

    def __call__(self, sql: str) -> list[str]:
        done = subprocess.run(
            [self.exe, self.dsn, "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql],
            capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"psql failed: {done.stderr.strip()}")
        return [line for line in done.stdout.splitlines() if line]


def server_url(admin_dsn: str) -> str:
    """A postgres:// URL for the seam: the superuser on the Unix socket, database postgres."""
    parts = _dsn_parts(admin_dsn)
    return (f"postgres://{quote(parts['user'])}@/postgres?host={quote(parts['host'], safe='')}"
            f"&port={parts.get('port', '5432')}&sslmode=disable")


class ServerLog:
    """Incremental reader of the embedded server's log (``pg_ctl -l``, beside the data dir)."""

    def __init__(self, data_directory: str) -> None:
        self.path = Path(data_directory).parent / "server.log"
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def read_new(self) -> str:
        if not self.path.exists():
            return ""
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        return data.decode("utf-8", "replace")


def describe_roles(log_text: str, superuser: str) -> list[str]:
    """Which logins connected, and what each throwaway test login was a member of.

    Never prints a log line: the CREATE ROLE statements carry the throwaway passwords.
    """
    users: dict[str, set[str]] = {}
    for user, database in _AUTHORIZED.findall(log_text):
        users.setdefault(user, set()).add(database)
    member_of = {login: " + ".join(_IDENTIFIER.findall(roles)) or "no role"
                 for login, roles in _CREATE_LOGIN.findall(log_text)}
    out = []
    if superuser in users:
        dbs = {d for d in users.pop(superuser) if d.startswith(TEST_PREFIX)}
        out.append(f"{superuser} (superuser) on {len(dbs)} test database(s): creates them, "
                   "migrates, resets tables")
    by_role: dict[str, int] = {}
    for user in sorted(users):
        if user in member_of:
            by_role[member_of[user]] = by_role.get(member_of[user], 0) + 1
        else:
            out.append(f"{user} (not created by the tests)")
    for role, count in sorted(by_role.items()):
        out.append(f"{count} throwaway login(s) {TEST_PREFIX}*, members of {role} only")
    unused = [login for login in member_of if login not in users]
    if unused:
        out.append(f"{len(unused)} login(s) created but never connected")
    return out or ["no database connections"]


class PackageRun:
    """One ``go test -json`` invocation: package results, failed and skipped tests."""

    def __init__(self) -> None:
        self.code = 0
        self.elapsed = 0.0
        self.packages: list[tuple[str, str, float | None]] = []  # (pass|fail, package, seconds)
        self.failed: dict[str, list[str]] = {}  # "pkg.Test" -> its output
        self.skipped: dict[str, str] = {}  # "pkg.Test" -> the skip reason
        self.other_output: list[str] = []  # build errors, anything not JSON

    def failure_report(self, shown: int = 5) -> str:
        """The output of the first ``shown`` failed tests, then the names of the others."""
        names = list(self.failed)
        out = [f"--- FAIL: {name}\n" + "".join(self.failed[name]) for name in names[:shown]]
        if len(names) > shown:
            out.append(f"... and {len(names) - shown} more failed test(s):\n")
            out.extend(f"    {name}\n" for name in names[shown:])
        return "".join(out) + "".join(self.other_output)


def run_package(go: str, workdir: Path, package: str, env: dict[str, str],
                verbose: bool) -> PackageRun:
    """``go test -race -count=1 -json PACKAGE``, parsed (``-json`` is ``-v``, machine-readable)."""
    run = PackageRun()
    outputs: dict[tuple[str, str], list[str]] = {}
    start = time.monotonic()
    proc = subprocess.Popen([go, "test", "-race", "-count=1", "-json", package], cwd=workdir,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        try:
            event = json.loads(line)
        except ValueError:
            run.other_output.append(line)
            if verbose:
                print("    " + line, end="", flush=True)
            continue
        action, pkg, test = event.get("Action"), event.get("Package", ""), event.get("Test", "")
        text = event.get("Output", "")
        if action in ("output", "build-output"):
            if verbose:
                print("    " + text, end="", flush=True)
            if action == "build-output":
                run.other_output.append(text)
            elif test:
                outputs.setdefault((pkg, test), []).append(text)
        elif action in ("pass", "fail") and not test:
            run.packages.append((action, pkg, event.get("Elapsed")))
        elif action == "fail" and test:
            run.failed[f"{pkg}.{test}"] = outputs.get((pkg, test), [])
        elif action == "skip" and test:
            reason = [t.strip() for t in outputs.get((pkg, test), [])
                      if not t.startswith(("=== ", "--- "))]
            run.skipped[f"{pkg}.{test}"] = " ".join(r for r in reason if r)
    run.code = proc.wait()
    run.elapsed = time.monotonic() - start
    return run


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", default=".", help="the kagent checkout (tests run in TREE/go)")
    ap.add_argument("--go", default=None, help="the go binary (default: go on PATH)")
    ap.add_argument("--package", action="append", dest="packages", metavar="PATTERN",
                    help="a package pattern relative to TREE/go (repeatable; default: the "
                         "series' packages and the DB test hosts)")
    ap.add_argument("-v", "--verbose", action="store_true", help="stream the tests' output")
    args = ap.parse_args(argv)

    go = shutil.which(args.go or "go")
    if not go:
        print("GO DB TESTS NOT RUN: go not found")
        return 3
    workdir = Path(args.tree).resolve() / "go"
    if not (workdir / "go.mod").is_file():
        print(f"GO DB TESTS NOT RUN: {workdir}/go.mod not found (--tree is the kagent checkout)")
        return 2
    seam = workdir / SEAM_FILE
    if not seam.is_file() or SEAM_ENV not in seam.read_text():
        print(f"GO DB TESTS NOT RUN: {workdir} lacks the {SEAM_ENV} seam ({SEAM_FILE}); "
              "without it the tests need a container engine")
        return 2
    packages = args.packages or DEFAULT_PACKAGES

    try:
        from kagent_governed_memory.dev import EmbeddedPostgres, EmbeddedUnavailable
    except ImportError as exc:
        print(f"GO DB TESTS NOT RUN: cannot import kagent_governed_memory.dev: {exc}")
        return 4

    go_version = subprocess.run([go, "version"], capture_output=True, text=True,
                                check=False).stdout.strip()
    print(f"tree: {workdir} ({_git_describe(workdir)})")
    print(f"go:   {go_version}")
    try:
        pg = EmbeddedPostgres().start()
    except EmbeddedUnavailable as exc:
        print(f"GO DB TESTS NOT RUN: embedded PostgreSQL unavailable: {exc}")
        return 4
    try:
        return _run(pg, go, workdir, packages, args.verbose)
    finally:
        pg.stop()


def _git_describe(workdir: Path) -> str:
    done = subprocess.run(["git", "-C", str(workdir), "log", "-1", "--format=%h %s"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or "not a git checkout"


def _run(pg, go: str, workdir: Path, packages: list[str], verbose: bool) -> int:
    psql = Psql(pg.admin_dsn)
    superuser = _dsn_parts(pg.admin_dsn)["user"]
    version, data_directory = psql("SELECT version(), current_setting('data_directory')")[0].split("|")
    extension = psql("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")
    # EmbeddedPostgres already made the groups (prepare_app_database); make sure of them, so the
    # tests' concurrent migrations never race to create them.
    for group in GROUPS:
        psql(f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{group}') "
             f"THEN CREATE ROLE {group} NOLOGIN; END IF; END $$")
    psql("ALTER SYSTEM SET log_connections = 'on'")
    psql("ALTER SYSTEM SET log_statement = 'ddl'")
    psql("SELECT pg_reload_conf()")
    log = ServerLog(data_directory)
    print(f"db:   {version.split(' on ')[0]}, pgvector {extension[0] if extension else 'MISSING'}, "
          f"roles: {superuser} (superuser), {', '.join(GROUPS)} (NOLOGIN)")
    print(f"env:  {SEAM_ENV}={server_url(pg.admin_dsn)}")

    env = dict(os.environ)
    env[SEAM_ENV] = server_url(pg.admin_dsn)
    summary: list[tuple[str, str, str]] = []
    skipped: dict[str, str] = {}
    failed = False
    total = time.monotonic()
    for package in packages:
        print(f"\n== go test -race -count=1 {package}", flush=True)
        run = run_package(go, workdir, package, env, verbose)
        for status, pkg, seconds in run.packages:
            shown = "PASS" if status == "pass" else "FAIL"
            detail = f"{seconds:.3f}s" if seconds is not None else ""
            print(f"   {shown}  {pkg}  {detail}")
            summary.append((shown, pkg, detail))
        for name, reason in run.skipped.items():
            print(f"   skipped {name}: {reason}")
            skipped[name] = reason
        if run.code != 0:
            failed = True
            print(f"   {len(run.failed)} test(s) failed")
            if not verbose:
                print(run.failure_report(), end="")
            if not any(status == "fail" for status, _, _ in run.packages):
                summary.append(("FAIL", package, f"go test exit {run.code}"))
                print(f"   FAIL  {package}  go test exit {run.code}")
        print(f"   wall {run.elapsed:.1f}s; connected as:")
        for line in describe_roles(log.read_new(), superuser):
            print(f"     - {line}")

    leftovers = psql(f"SELECT 'database ' || datname FROM pg_database WHERE datname LIKE "
                     f"'{TEST_PREFIX}%' UNION ALL SELECT 'login ' || rolname FROM pg_roles "
                     f"WHERE rolname LIKE '{TEST_PREFIX}%'")
    print(f"\n== summary ({time.monotonic() - total:.1f}s)")
    for status, pkg, detail in summary:
        print(f"{status}  {pkg}  {detail}")
    if skipped:
        print(f"{len(skipped)} test(s) skipped (see above)")
    if leftovers:
        print(f"warning: the tests left {len(leftovers)} object(s) behind: {', '.join(leftovers)}")
    if failed:
        print("GO DB TESTS FAILED")
        return 1
    print("GO DB TESTS PASSED")
    return 0

