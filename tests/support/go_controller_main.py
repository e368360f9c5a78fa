"""kagent MAIN's controller, compiled from ``patches/kagent-main/``, serving GovernedMemoryService.

``build()`` clones kagent (``go_controller.kagent_source()``) at the series' BASE, applies 0001
and the governed Go patches 0010-0019 with ``git am`` (0017's grant store included once it is in
the series), copies the verification overlay ``tests/support/go_overlay_main/*_test.go`` (never part of
the series) into ``go/core/internal/grpcserver`` and compiles that package's test binary with
``go test -c``.  The runtime grants are verified by 0017's ``memorygrant.Store`` when the
series has it, else by the overlay's stand-in over ``memory_grant_resolve`` (one of the two
``governed_memory_main_grants_*_test.go`` is copied; the server logs which).  Package grpcserver imports substrate, which no module proxy here serves, so the
build uses the COMPILE STAND-IN and substitute go.mod of ``scripts/_series/inplace.py``
(``scripts/series standins substrate`` from an agent-substrate source, ``$KGM_SUBSTRATE_SRC``,
default this workplace's mirror; ``scripts/series standins modfile``) with ``GOTOOLCHAIN``
(default go1.27.3).  The
binary is cached per hash of (those patches, the overlay, the two scripts, the stand-in's path,
``go version``) under ``go_controller``'s cache root (``main-`` prefix): built once, reused by
every later session until an input changes.

``serve(...)`` runs the overlay's ``TestGovernedMemoryMainTestServer``: main's real gRPC server
(``grpcserver.New``: its interceptor chain, ``GovernedAuth`` of 0015, ``GovernedMemoryServer`` of
0016) on a loopback port over the governed pool of the controller's login, after main's own
migration runner migrated the database as its owner.  Bridge and operator callers present the
fixed test tokens of ``go_controller.service_account_token`` (a fake TokenReviewer maps them to
ServiceAccounts: ``BRIDGE_SERVICE_ACCOUNT`` is a bridge, ``OPERATOR_SERVICE_ACCOUNT`` an
operator); runtime callers the grant ``mint_grant`` stored through the grants login
(``memory_grant_mint``: the A2A transport's part), resolved as said above.  Missing Go, kagent source or substrate source raises
``go_controller.Unavailable``, which the tests report as NOT RUN.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
from support.go_controller import (
    BRIDGE_SERVICE_ACCOUNT,
    Unavailable,
    _cache_root,
    _run,
    go_binary,
    kagent_source,
)

REPO = Path(__file__).resolve().parents[2]
# $KGM_KAGENT_MAIN_SERIES: another directory of the series (e.g. a helper's patches before merge)
SERIES = Path(os.environ.get("KGM_KAGENT_MAIN_SERIES") or REPO / "patches" / "kagent-main")
OVERLAY_DIR = REPO / "tests" / "support" / "go_overlay_main"
SERVER_OVERLAY = OVERLAY_DIR / "governed_memory_main_testserver_test.go"
# exactly one of these two: 0017's memorygrant.Store once the series has it, else the stand-in
GRANTS_STORE_OVERLAY = OVERLAY_DIR / "governed_memory_main_grants_store_test.go"
GRANTS_STANDIN_OVERLAY = OVERLAY_DIR / "governed_memory_main_grants_db_test.go"
GRANT_STORE_FILE = "go/core/internal/memorygrant/store.go"
SCRIPTS = (REPO / "scripts/_series/standins.py", REPO / "scripts/_series/modfile.py")
SUBSTRATE_MIRROR = Path("/work/.mirror/agent-substrate+substrate/repo")
TOOLCHAIN = "go1.27.3"
OPERATOR_SERVICE_ACCOUNT = ("kagent", "memory-operator")
PACKAGE = "./core/internal/grpcserver/"
SCHEMA = "governed_memory"


def base_commit() -> str:
    return (SERIES / "BASE").read_text().split()[0]


def go_patches() -> list[Path]:
    """0001 (the dbtest seam) and the governed Go series 0010-0019 (0020 is kagent-adk's)."""
    found = sorted([*SERIES.glob("0001-*.patch"), *SERIES.glob("001[0-9]-*.patch")])
    if len(found) < 2:
        raise Unavailable(f"no kagent-main Go patches in {SERIES}")
    return found


def has_grant_store(patches: list[Path]) -> bool:
    """Whether the series adds 0017's ``memorygrant`` store."""
    return any(f"+++ b/{GRANT_STORE_FILE}\n" in p.read_text() for p in patches)


def overlays(patches: list[Path]) -> list[Path]:
    grants = GRANTS_STORE_OVERLAY if has_grant_store(patches) else GRANTS_STANDIN_OVERLAY
    return [SERVER_OVERLAY, grants]


def substrate_source() -> Path:
    given = os.environ.get("KGM_SUBSTRATE_SRC")
    src = Path(given) if given else SUBSTRATE_MIRROR
    if not src.exists():
        raise Unavailable("no agent-substrate source for the compile stand-in: set "
                          "KGM_SUBSTRATE_SRC to an agent-substrate/substrate clone")
    return src


def go_env() -> dict[str, str]:
    return {**os.environ, "GOTOOLCHAIN": os.environ.get("KGM_MAIN_GOTOOLCHAIN", TOOLCHAIN)}


# a terminal control sequence: CSI (e.g. the reset ``ESC[0m`` a tool's colour output can leave
# at the start of the next line), OSC, a character-set designation or a two-byte escape
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]"  # CSI
                   r"|\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC
                   r"|[()*+][0-~]|[0-~])")  # designation, two-byte


def _printed_path(stdout: str) -> Path:
    """The path ``--print-path`` printed: the last line that is an absolute path once terminal
    control sequences and carriage returns are removed (the line can start with ``ESC[0m``)."""
    lines = [_ANSI.sub("", line).replace("\r", "").strip() for line in stdout.splitlines()]
    paths = [line for line in lines if line.startswith("/")]
    if not paths:
        raise RuntimeError("series standins substrate --print-path printed no path:\n"
                           + stdout[-3000:])
    return Path(paths[-1])


def _standin(env: dict[str, str]) -> Path:
    done = subprocess.run([sys.executable, str(REPO / "scripts/series"), "standins", "substrate",
                           "--src", str(substrate_source()), "--print-path"],
                          capture_output=True, text=True, env=env, check=False)
    if done.returncode == 3:
        raise Unavailable("the substrate compile stand-in cannot be built here: "
                          + (done.stdout + done.stderr).strip().splitlines()[-1:][0])
    if done.returncode != 0:
        raise RuntimeError(f"series standins substrate failed:\n{done.stderr[-3000:]}")
    return _printed_path(done.stdout)


def build() -> tuple[Path, bool, float]:
    """(the server binary, built now?, seconds it took)."""
    started = time.monotonic()
    go = go_binary()
    src = kagent_source()
    env = go_env()
    standin = _standin(env)
    version = subprocess.run([go, "version"], capture_output=True, text=True, env=env,
                             check=False)
    if version.returncode != 0:
        raise Unavailable(f"{env['GOTOOLCHAIN']} cannot be had: {version.stderr.strip()[-300:]}")
    h = hashlib.sha256(b"kagent-main\0" + version.stdout.strip().encode()
                       + b"\0" + str(standin).encode() + b"\0" + base_commit().encode())
    patches = go_patches()
    for path in [*patches, *overlays(patches), *SCRIPTS]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    root = _cache_root()
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"main-{h.hexdigest()[:16]}"
    binary = final / "governed-memory-main-testserver"
    with open(root / ".lock-main", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return binary, False, time.monotonic() - started
        work = Path(tempfile.mkdtemp(dir=root, prefix="build-main-"))
        try:
            tree = work / "kagent"
            _run(["git", "clone", "-q", "--no-checkout", str(src), str(tree)], work)
            _run(["git", "checkout", "-q", base_commit()], tree)
            _run(["git", "-c", "user.name=verify", "-c", "user.email=verify@localhost", "am",
                  "-q", *map(str, patches)], tree)
            for overlay in overlays(patches):
                shutil.copy(overlay, tree / "go" / "core" / "internal" / "grpcserver"
                            / overlay.name)
            _run([sys.executable, str(REPO / "scripts/series"), "standins", "modfile",
                  "--tree", str(tree), "--out", str(work / "modfile"), "--substrate",
                  str(standin)], work, env=env)
            env = {**env, "GOFLAGS": f"-modfile={work / 'modfile' / 'go.mod'} -mod=mod"}
            _run([go, "test", "-c", "-o", str(work / binary.name), PACKAGE], tree / "go",
                 env=env)
            shutil.rmtree(tree, ignore_errors=True)  # only the binary is kept
            if final.exists():
                shutil.rmtree(final)
            work.rename(final)
        finally:
            if work.exists():
                shutil.rmtree(work, ignore_errors=True)
    return binary, True, time.monotonic() - started


def pg_url(conninfo: str) -> str:
    """A libpq conninfo as the postgres:// URL main's migration runner requires."""
    from urllib.parse import quote

    from psycopg.conninfo import conninfo_to_dict

    d = conninfo_to_dict(conninfo)
    host = str(d.get("host") or "127.0.0.1")
    auth = quote(str(d["user"])) + (f":{quote(str(d['password']))}" if d.get("password") else "")
    where = f"@/{d['dbname']}?host={quote(host, safe='')}&" if host.startswith("/") \
        else f"@{host}:{d.get('port', 5432)}/{d['dbname']}?"
    return f"postgres://{auth}{where}port={d.get('port', 5432)}&sslmode=disable" \
        if host.startswith("/") else f"postgres://{auth}{where}sslmode=disable"


def new_grant() -> str:
    """A runtime grant as the A2A transport makes one: 32 random bytes, unpadded base64url."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def mint_grant(grants_dsn: str, *, namespace: str, name: str, assertion: str,
               actor_id: str = "actor-test") -> str:
    """Store a grant for one forwarded request of Agent namespace/name bound to ``assertion``
    (the grants login; ``memory_grant_mint``) and return it."""
    grant = new_grant()
    with psycopg.connect(grants_dsn, autocommit=True) as conn:
        conn.execute(f"SELECT {SCHEMA}.memory_grant_mint(%s, %s, %s, %s, %s, %s)",
                     [_digest(grant), namespace, name, str(uuid.uuid4()), actor_id,
                      _digest(assertion)])
    return grant


def revoke_grant(grants_dsn: str, grant: str) -> bool:
    """The end of the request's response (``memory_grant_revoke``)."""
    with psycopg.connect(grants_dsn, autocommit=True) as conn:
        row = conn.execute(f"SELECT {SCHEMA}.memory_grant_revoke(%s)", [_digest(grant)]).fetchone()
    return bool(row and row[0])


class MainControllerProcess:
    """One compiled main controller: ``url`` is ``grpc://127.0.0.1:PORT``; ``log`` its output."""

    def __init__(self, dsn: str, *, migrate_dsn: str | None, local_server: str,
                 env: dict[str, str] | None, tmp: Path) -> None:
        self.binary, self.built, self.build_seconds = build()
        self.tmp, self.log = tmp, tmp / "server.log"
        self.env = {**os.environ, **(env or {}), "KGM_MAIN_DSN": pg_url(dsn),
                    "KGM_MAIN_LOCAL_SERVER": local_server,
                    "KGM_MAIN_BRIDGES": "/".join(BRIDGE_SERVICE_ACCOUNT),
                    "KGM_MAIN_OPERATORS": "/".join(OPERATOR_SERVICE_ACCOUNT)}
        if migrate_dsn:
            self.env["KGM_MAIN_MIGRATE_DSN"] = pg_url(migrate_dsn)
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> str:
        addr = self.tmp / "addr"
        addr.unlink(missing_ok=True)
        out = open(self.log, "a")  # noqa: SIM115
        self.proc = proc = subprocess.Popen(
            [str(self.binary), "-test.run", "^TestGovernedMemoryMainTestServer$", "-test.v"],
            stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
            env={**self.env, "KGM_MAIN_ADDR_FILE": str(addr)})
        out.close()
        deadline = time.monotonic() + 180
        while not (addr.exists() and addr.read_text()):
            if proc.poll() is not None:
                raise RuntimeError(f"the main controller exited ({proc.returncode}):\n"
                                   f"{self.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("the main controller did not start within 180 s")
            time.sleep(0.05)
        self.url = f"grpc://{addr.read_text()}"
        return self.url

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def rpcs(self) -> list[str]:
        """The GovernedMemoryService methods the controller completed, in order (its log)."""
        import re

        return re.findall(r"RPC completed.*?GovernedMemoryService/(\w+)", self.log.read_text())


@contextlib.contextmanager
def serve(dsn: str, *, migrate_dsn: str | None = None, local_server: str = "example.org",
          env: dict[str, str] | None = None) -> Iterator[MainControllerProcess]:
    """A started ``MainControllerProcess`` (stopped on exit)."""
    with tempfile.TemporaryDirectory() as tmp:
        process = MainControllerProcess(dsn, migrate_dsn=migrate_dsn, local_server=local_server,
                                        env=env, tmp=Path(tmp))
        try:
            process.start()
            yield process
        finally:
            process.stop()
