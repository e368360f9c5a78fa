"""The patched kagent controller, compiled from the Go patch series, serving the governed API.

``build(tag)`` clones kagent (``$KGM_KAGENT_SRC``: a clone or git directory holding the tags
in ``TAGS``; default: this workplace's mirror when present) at ``tag`` (default v0.9.11), applies the Go patches with ``git am``,
adds the verification overlays ``tests/support/go_overlay/*_test.go`` (never part
of the series) and compiles ``go test -c`` of ``core/internal/httpserver``: the controller's own
governed memory listener (handlers, authenticator, database client, middleware).  The binary is
cached per hash of (the Go patches, the overlay, ``go version``, the tag) under
``$KGM_GO_CONTROLLER_CACHE`` (default ``~/.cache/kagent-governed-memory/go-controller``); Go's own
module and build caches make a rebuild fast.

``$KGM_KAGENT_TREE`` (for iterating on the Go series before its patches are regenerated): a
kagent work tree whose HEAD is v0.9.11 + the series as commits; its HEAD commit (committed state
only) is cloned instead of applying the patches, and the cache key is that commit.  Give it the
autosquashed series (``git rebase -i --autosquash``) when ``test_go_series`` should pass: its
per-commit ``sqlc``/``clean`` checks hold for each squashed commit, not for a ``fixup!`` alone.

``serve(dsn, local_server)`` starts it on a loopback port and yields the base URL.  With
``sessions_dsn`` (kagent's database login for its core tables, e.g. the database owner: kagent's
core migrations create them) the same process also serves kagent's main API router -- its real
``/api/sessions`` and ``/api/tasks`` handlers on kagent's database client, unsecure
authentication, from the overlay ``tests/support/go_overlay/kagent_sessions_testserver_test.go`` -- on
a second loopback port: ``serve_sessions(dsn, sessions_dsn)`` yields ``(governed_url,
sessions_url)``.  Missing Go or
missing kagent source raises ``Unavailable`` with the reason, which the tests report loudly.

Callers authenticate as the controller requires (projected ServiceAccount tokens, verified by a
TokenReview): the controller's real ``KubeTokenReviewer`` (its audience check included) reviews
them against the overlay's fake TokenReview API, which accepts the fixed test tokens
``service_account_token(namespace, name)`` (governed audience) and
``audience_token(audience, namespace, name)``; ``agent_headers`` and ``bridge_headers`` give the
headers of an agent runtime (its ServiceAccount's token and kagent's ``X-Agent-Name``) and of the
bridge (``BRIDGE_SERVICE_ACCOUNT``).  The Agents the server knows are ``AGENTS``; those in
``AGENT_EMBEDDING_DIMENSIONS`` are governed with that ``memory.embeddingDimension``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PATCHES = REPO / "patches" / "kagent-v0.9.11"
OVERLAY = REPO / "tests" / "support" / "go_overlay" / "governed_memory_testserver_test.go"
# kagent's own session and task routes beside it (KGM_TESTSERVER_SESSIONS_ADDR_FILE)
SESSIONS_OVERLAY = REPO / "tests" / "support" / "go_overlay" / "kagent_sessions_testserver_test.go"
# the token replay test through kagent's A2A proxy (KGM_REPLAY_TEST; tests/kagent/test_token_replay.py)
REPLAY_OVERLAY = REPO / "tests" / "support" / "go_overlay" / "governed_memory_replay_test.go"
OVERLAYS = (OVERLAY, SESSIONS_OVERLAY, REPLAY_OVERLAY)
DEFAULT_SRC = Path("/work/.mirror/kagent-dev+kagent/repo")
TAG = "v0.9.11"
# The kagent tags the series is carried on: TAG (the main target, used by every test that
# serves the controller) and the tip of release/v0.9.x, on which the series must also apply and
# pass the Go checks (tests/series/test_go_series.py, scripts/series verify).
TAGS = (TAG, "v0.9.12")

# The overlay's fake TokenReview API and Kubernetes objects (see
# governed_memory_testserver_test.go): TOKEN_PREFIX tokens have the governed listener's audience
# ("kagent-governed-memory"); AUDIENCE_TOKEN_PREFIX + "<audience>:<ns>:<name>" another audience.
TOKEN_PREFIX = "kgm-test-sa:"
AUDIENCE_TOKEN_PREFIX = "kgm-test-aud:"
BRIDGE_SERVICE_ACCOUNT = ("kagent", "matrix-bridge")
AGENTS = (("kagent", "my-agent"), ("kagent", "agent-a"), ("kagent", "agent-b"),
          ("kagent", "other-agent"), ("kagent", "bge-agent"))
# Agents whose spec.declarative.memory has mode governed and this embeddingDimension.
AGENT_EMBEDDING_DIMENSIONS = {("kagent", "bge-agent"): 1024}


def service_account_token(namespace: str, name: str) -> str:
    """The fixed test token that the overlay's TokenReview maps to ServiceAccount ns/name."""
    return f"{TOKEN_PREFIX}{namespace}:{name}"


def audience_token(audience: str, namespace: str, name: str) -> str:
    """A fixed test token of ServiceAccount ns/name for ``audience`` only (e.g. "kagent")."""
    return f"{AUDIENCE_TOKEN_PREFIX}{audience}:{namespace}:{name}"


def agent_headers(namespace: str, name: str) -> dict[str, str]:
    """An agent runtime's headers: its (per-agent) ServiceAccount token and kagent's app name."""
    return {"Authorization": f"Bearer {service_account_token(namespace, name)}",
            "X-Agent-Name": f"{namespace.replace('-', '_')}__NS__{name.replace('-', '_')}"}


def bridge_headers() -> dict[str, str]:
    """The bridge's headers: the token of a --governed-memory-bridge-service-accounts entry."""
    return {"Authorization": f"Bearer {service_account_token(*BRIDGE_SERVICE_ACCOUNT)}"}


class Unavailable(RuntimeError):
    pass


def kagent_source() -> Path:
    given = os.environ.get("KGM_KAGENT_SRC")
    src = Path(given) if given else DEFAULT_SRC
    if not src.exists():
        raise Unavailable("no kagent source: set KGM_KAGENT_SRC to a kagent clone (tags "
                          + ", ".join(TAGS) + ")")
    return src


def go_binary() -> str:
    go = shutil.which("go")
    if go is None:
        raise Unavailable("go not found on PATH")
    return go


def kagent_tree() -> tuple[Path, str] | None:
    """``$KGM_KAGENT_TREE`` and its HEAD commit, or None."""
    given = os.environ.get("KGM_KAGENT_TREE")
    if not given:
        return None
    tree = Path(given)
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise Unavailable(f"KGM_KAGENT_TREE={given} is not a git work tree")
    return tree, done.stdout.strip()


def go_patches() -> list[Path]:
    # the controller/CRD/chart series is 0001-0099; 0101+ is the Python runtime's
    found = sorted(p for p in PATCHES.glob("00[0-9][0-9]-*.patch"))
    if not found:
        raise Unavailable(f"no Go patches in {PATCHES}")
    return found


def _cache_root() -> Path:
    given = os.environ.get("KGM_GO_CONTROLLER_CACHE")
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(given) if given else base / "kagent-governed-memory" / "go-controller"


def _run(cmd: list[str], cwd: Path, **kw: object) -> None:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False,
                          **kw)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed in {cwd}:\n{done.stderr[-4000:]}")


def build(tag: str = TAG) -> tuple[Path, Path, bool]:
    """(the kagent tree at ``tag`` with the Go series applied, the server binary, built now?).

    ``$KGM_KAGENT_TREE`` (a v0.9.11 work tree) replaces the clone only for ``TAG``; any other
    tag is always cloned from ``$KGM_KAGENT_SRC`` and the patches applied."""
    if tag not in TAGS:
        raise ValueError(f"unknown carry target {tag!r}; expected one of {TAGS}")
    go = go_binary()
    override = kagent_tree() if tag == TAG else None
    src, commit = override if override else (kagent_source(), tag)
    version = subprocess.run([go, "version"], capture_output=True, text=True,
                             check=True).stdout.strip()
    h = hashlib.sha256(version.encode())
    if tag != TAG:
        # keyed by tag; TAG's key is unchanged so existing caches stay valid
        h.update(b"tag\0" + tag.encode())
    sources = [*OVERLAYS] if override else [*go_patches(), *OVERLAYS]
    if override:
        h.update(b"tree\0" + commit.encode())
    for path in sources:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    root = _cache_root()
    root.mkdir(parents=True, exist_ok=True)
    final = root / h.hexdigest()[:16]
    binary = final / "governed-memory-testserver"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return final / "kagent", binary, False
        work = Path(tempfile.mkdtemp(dir=root, prefix="build-"))
        try:
            tree = work / "kagent"
            _run(["git", "clone", "-q", "--no-checkout", str(src), str(tree)], work)
            _run(["git", "checkout", "-q", commit], tree)
            if not override:
                _run(["git", "-c", "user.name=verify", "-c", "user.email=verify@localhost",
                      "am", "-q", *map(str, go_patches())], tree)
            for overlay in OVERLAYS:
                shutil.copy(overlay, tree / "go" / "core" / "internal" / "httpserver"
                            / overlay.name)
            _run([go, "test", "-c", "-o", str(work / binary.name), "./core/internal/httpserver/"],
                 tree / "go")
            if final.exists():
                shutil.rmtree(final)
            work.rename(final)
        finally:
            if work.exists():
                shutil.rmtree(work, ignore_errors=True)
    return final / "kagent", binary, True


class ControllerProcess:
    """One compiled controller process; ``kill()`` crashes it, ``start()`` starts it again on
    the same address (a restart)."""

    def __init__(self, dsn: str, *, local_server: str, env: dict[str, str] | None,
                 tmp: Path, sessions_dsn: str | None = None) -> None:
        _, self.binary, _ = build()
        self.tmp, self.bind = tmp, "127.0.0.1:0"
        self.env = {"KGM_TESTSERVER_BRIDGE_SERVICE_ACCOUNTS": "/".join(BRIDGE_SERVICE_ACCOUNT),
                    "KGM_TESTSERVER_AGENTS": ",".join(
                        f"{ns}/{name}" + (f"@{AGENT_EMBEDDING_DIMENSIONS[ns, name]}"
                                          if (ns, name) in AGENT_EMBEDDING_DIMENSIONS else "")
                        for ns, name in AGENTS),
                    **os.environ, **(env or {}), "KGM_TESTSERVER_DSN": dsn,
                    "KGM_TESTSERVER_LOCAL_SERVER": local_server}
        if sessions_dsn is not None:  # kagent's main API (sessions, tasks) on a second port
            self.env["KGM_TESTSERVER_SESSIONS_DSN"] = sessions_dsn
        self.sessions = sessions_dsn is not None
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.sessions_url = ""
        self.log = tmp / "server.log"

    def start(self) -> str:
        addr, sessions_addr = self.tmp / "addr", self.tmp / "sessions-addr"
        addr.unlink(missing_ok=True)
        sessions_addr.unlink(missing_ok=True)
        out = open(self.log, "a")  # noqa: SIM115
        env = {**self.env, "KGM_TESTSERVER_ADDR_FILE": str(addr), "KGM_TESTSERVER_BIND": self.bind}
        if self.sessions:  # a restart serves the sessions on a new port
            env["KGM_TESTSERVER_SESSIONS_ADDR_FILE"] = str(sessions_addr)
        else:
            env.pop("KGM_TESTSERVER_SESSIONS_ADDR_FILE", None)
        waits = [addr, sessions_addr] if self.sessions else [addr]
        self.proc = proc = subprocess.Popen(
            [str(self.binary), "-test.run", "^TestGovernedMemoryTestServer$", "-test.v"],
            stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, env=env)
        out.close()
        deadline = time.monotonic() + 180  # generous: a loaded machine starts it slowly
        while not all(a.exists() and a.read_text() for a in waits):
            if proc.poll() is not None:
                text = self.log.read_text()[-3000:]
                raise RuntimeError(f"the controller exited ({proc.returncode}):\n{text}")
            if time.monotonic() > deadline:
                raise RuntimeError("the controller did not start within 180 s")
            time.sleep(0.05)
        self.bind = addr.read_text()  # a restart listens on the same address
        self.url = f"http://{self.bind}"
        if self.sessions:
            self.sessions_url = f"http://{sessions_addr.read_text()}"
        return self.url

    def kill(self) -> None:
        """Crash it (SIGKILL): no graceful shutdown, in-flight requests are cut."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

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


@contextlib.contextmanager
def controller(dsn: str, *, local_server: str = "example.org",
               env: dict[str, str] | None = None,
               sessions_dsn: str | None = None) -> Iterator[ControllerProcess]:
    """A started ``ControllerProcess`` (stopped on exit)."""
    with tempfile.TemporaryDirectory() as tmp:
        process = ControllerProcess(dsn, local_server=local_server, env=env, tmp=Path(tmp),
                                    sessions_dsn=sessions_dsn)
        try:
            process.start()
            yield process
        finally:
            process.stop()


@contextlib.contextmanager
def serve(dsn: str, *, local_server: str = "example.org", log: Path | None = None,
          env: dict[str, str] | None = None) -> Iterator[str]:
    """The compiled controller on a loopback port, as ``http://127.0.0.1:PORT``."""
    with controller(dsn, local_server=local_server, env=env) as process:
        try:
            yield process.url
        finally:
            if log is not None:
                log.write_text(process.log.read_text())


@contextlib.contextmanager
def serve_sessions(dsn: str, sessions_dsn: str, *, local_server: str = "example.org",
                   log: Path | None = None,
                   env: dict[str, str] | None = None) -> Iterator[tuple[str, str]]:
    """``serve`` plus kagent's main API (its real session and task routes on kagent's database
    client, through ``sessions_dsn``) in the same process: ``(governed URL, sessions URL)``."""
    with controller(dsn, local_server=local_server, env=env,
                    sessions_dsn=sessions_dsn) as process:
        try:
            yield process.url, process.sessions_url
        finally:
            if log is not None:
                log.write_text(process.log.read_text())
