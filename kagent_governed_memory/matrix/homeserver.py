"""A throwaway Synapse homeserver for the tests and ``demo --matrix``: loopback only.

``LocalHomeserver.start(workdir, server_name=...)`` writes a minimal Synapse configuration
(SQLite, one client listener on ``127.0.0.1`` and a free port, no federation listener, an empty
``federation_domain_whitelist``, no trusted key servers, room version 12 by default, rate limits
lifted) with a registration shared secret and one application-service registration (the
``bridged_`` user namespace, for the "a bridged user is refused" case), starts
``python -m synapse.app.homeserver`` and waits for ``/_matrix/client/versions``.
``register(localpart)`` creates a user through Synapse's shared-secret admin API and returns an
access token; ``register_bridged(localpart)`` creates one through the application service.

Nothing here is for production: the configuration is the smallest one that starts, and its
secrets are random per start.  It needs the ``matrix-synapse`` package (the ``test`` and
``matrix-demo`` extras).
"""

from __future__ import annotations

import asyncio
import importlib.util
import hashlib
import hmac
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from mautrix.api import HTTPAPI, Method, Path as MatrixPath, SynapseAdminPath

from ._logs import quiet_logger

__all__ = ["BRIDGED_PREFIX", "HomeserverUnavailable", "LocalHomeserver", "synapse_available"]

BRIDGED_PREFIX = "bridged_"  # the application service's exclusive user namespace
_START_TIMEOUT = 120.0


class HomeserverUnavailable(RuntimeError):
    """Synapse is not installed or did not start (the message says which, content-free)."""


def synapse_available() -> str | None:
    """``None`` when Synapse can be started here, else why not (for a NOT RUN reason)."""
    try:
        if importlib.util.find_spec("synapse.app.homeserver") is None:
            return "the matrix-synapse package is not installed"
    except Exception as exc:  # an ImportError, or a broken install
        return f"the matrix-synapse package cannot be imported ({type(exc).__name__})"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(workdir: Path, server_name: str, port: int, secret: str,
            appservice: Path) -> dict[str, object]:
    unlimited = {"per_second": 10_000, "burst_count": 10_000}
    return {
        "server_name": server_name,
        "pid_file": str(workdir / "homeserver.pid"),
        "listeners": [{"port": port, "bind_addresses": ["127.0.0.1"], "type": "http",
                       "tls": False, "x_forwarded": False,
                       "resources": [{"names": ["client"], "compress": False}]}],
        "database": {"name": "sqlite3", "args": {"database": str(workdir / "homeserver.db")}},
        "log_config": str(workdir / "log.config.json"),
        "media_store_path": str(workdir / "media"),
        "signing_key_path": str(workdir / "signing.key"),
        "registration_shared_secret": secret,
        "macaroon_secret_key": secrets.token_hex(32),
        "form_secret": secrets.token_hex(32),
        "report_stats": False,
        "enable_metrics": False,
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        "federation_domain_whitelist": [],  # federation denied (ADR §29)
        "allow_public_rooms_over_federation": False,
        "default_room_version": "12",
        "enable_registration": False,
        "presence": {"enabled": False},
        "app_service_config_files": [str(appservice)],
        "rc_message": unlimited, "rc_registration": unlimited, "rc_joins":
            {"local": unlimited, "remote": unlimited},
        "rc_login": {"address": unlimited, "account": unlimited, "failed_attempts": unlimited},
        "rc_invites": {"per_room": unlimited, "per_user": unlimited, "per_issuer": unlimited},
        "rc_joins_per_room": unlimited,
        "rc_room_creation": unlimited,
    }


def _log_config(workdir: Path) -> dict[str, object]:
    return {
        "version": 1,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
        "handlers": {"file": {"class": "logging.FileHandler", "formatter": "plain",
                              "filename": str(workdir / "homeserver.log")}},
        "root": {"level": "INFO", "handlers": ["file"]},
        "disable_existing_loggers": False,
    }


@dataclass
class LocalHomeserver:
    workdir: Path
    server_name: str
    port: int
    shared_secret: str
    as_token: str
    process: subprocess.Popen[bytes] | None = None
    _http: list[HTTPAPI] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "homeserver.log"

    @property
    def bridged_prefix(self) -> str:
        return f"@{BRIDGED_PREFIX}"

    @classmethod
    async def start(cls, workdir: Path, *, server_name: str = "example.org") -> LocalHomeserver:
        reason = synapse_available()
        if reason is not None:
            raise HomeserverUnavailable(reason)
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "media").mkdir(exist_ok=True)
        hs = cls(workdir=workdir, server_name=server_name, port=_free_port(),
                 shared_secret=secrets.token_hex(32), as_token=secrets.token_hex(32))
        registration = workdir / "appservice.json"  # YAML is a superset of JSON
        registration.write_text(json.dumps({
            "id": "kgm-test-bridged", "url": None, "as_token": hs.as_token,
            "hs_token": secrets.token_hex(32), "sender_localpart": f"{BRIDGED_PREFIX}bot",
            "rate_limited": False,
            "namespaces": {"users": [{"exclusive": True,
                                      "regex": f"@{BRIDGED_PREFIX}.*:{server_name}"}],
                           "aliases": [], "rooms": []}}))
        config = workdir / "homeserver.json"
        config.write_text(json.dumps(_config(workdir, server_name, hs.port, hs.shared_secret,
                                             registration)))
        (workdir / "log.config.json").write_text(json.dumps(_log_config(workdir)))
        # a YAML loader reads the JSON log config too; Synapse picks the loader by content
        python = sys.executable
        subprocess.run([python, "-m", "synapse.app.homeserver", "--config-path", str(config),
                        "--generate-keys"], check=True, capture_output=True, timeout=120,
                       cwd=workdir)
        hs.process = subprocess.Popen(
            [python, "-m", "synapse.app.homeserver", "--config-path", str(config)],
            cwd=workdir, stdout=subprocess.DEVNULL, stderr=(workdir / "stderr.log").open("wb"),
            env={**os.environ, "SYNAPSE_ASYNC_IO_REACTOR": "0"})
        try:
            await hs._wait_ready()
        except BaseException:
            await hs.stop()
            raise
        return hs

    async def _wait_ready(self) -> None:
        api = self.api()
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise HomeserverUnavailable(
                    f"Synapse exited with status {self.process.returncode}; see "
                    f"{self.workdir / 'stderr.log'}")
            try:
                await api.request(Method.GET, MatrixPath.versions)
                return
            except Exception:
                await asyncio.sleep(0.2)
        raise HomeserverUnavailable("Synapse did not answer within "
                                    f"{_START_TIMEOUT:.0f} s; see {self.log_path}")

    def api(self, token: str = "", *, as_user: str | None = None) -> HTTPAPI:
        api = HTTPAPI(self.url, token, log=quiet_logger(), as_user_id=as_user)  # type: ignore[arg-type]
        self._http.append(api)
        return api

    async def register(self, localpart: str, *, admin: bool = False) -> tuple[str, str]:
        """Create ``@localpart:server`` (shared-secret registration); (user id, access token)."""
        api = self.api()
        nonce = (await api.request(Method.GET, SynapseAdminPath.v1.register))["nonce"]
        password = secrets.token_hex(16)
        kind = "admin" if admin else "notadmin"
        mac = hmac.new(self.shared_secret.encode(), digestmod=hashlib.sha1)
        mac.update(b"\x00".join(p.encode() for p in (nonce, localpart, password, kind)))
        body = {"nonce": nonce, "username": localpart, "password": password, "admin": admin,
                "mac": mac.hexdigest()}
        answer = await api.request(Method.POST, SynapseAdminPath.v1.register, body,
                                   sensitive=True)
        return str(answer["user_id"]), str(answer["access_token"])

    async def register_bridged(self, localpart: str) -> tuple[str, HTTPAPI]:
        """Create ``@bridged_<localpart>:server`` through the application service; returns its
        id and an API that acts as it (the AS token with ``user_id``)."""
        user = f"@{BRIDGED_PREFIX}{localpart}:{self.server_name}"
        await self.api(self.as_token).request(
            Method.POST, MatrixPath.v3.register,
            {"type": "m.login.application_service", "username": f"{BRIDGED_PREFIX}{localpart}",
             "inhibit_login": True})
        return user, self.api(self.as_token, as_user=user)

    async def stop(self) -> None:
        for api in self._http:
            await api.session.close()
        self._http.clear()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                await asyncio.to_thread(self.process.wait, 30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                await asyncio.to_thread(self.process.wait, 30)
        self.process = None
