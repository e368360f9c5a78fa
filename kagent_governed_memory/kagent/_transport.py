"""What both transports to the kagent controller share (``_http`` for the v0.9.x carry series'
listener, ``_grpc`` for kagent main's GovernedMemoryService): the token files and the bearer
token source, the bounds on timeouts, whole calls and answers.  Neither transport imports the
other; ``_stores`` picks one by the controller URL's scheme."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import httpx

from ..errors import InvalidInput, ReasonCode

__all__ = ["DEFAULT_DEADLINE", "DEFAULT_TIMEOUT", "GOVERNED_MEMORY_TOKEN_FILE_ENV",
           "GOVERNED_MEMORY_TOKEN_PATH", "KAGENT_TOKEN_PATH", "MAX_ANSWER_BYTES", "TokenSource",
           "default_token_file"]

# Where kagent mounts the agent pod's projected ServiceAccount token (audience "kagent"): the
# token for kagent's A2A endpoint, never sent to the governed listener by default.
KAGENT_TOKEN_PATH = "/var/run/secrets/tokens/kagent-token"
# The projected token with the audience "kagent-governed-memory", the only one the governed
# listener accepts: kagent mounts it here in governed agent pods; the bridge's Deployment mounts
# its own at the same path (docs/architecture.md, "Tokens for the governed listener").
# KAGENT_MEMORY_TOKEN_FILE overrides it.
GOVERNED_MEMORY_TOKEN_PATH = "/var/run/secrets/kagent-governed-memory/token"
GOVERNED_MEMORY_TOKEN_FILE_ENV = "KAGENT_MEMORY_TOKEN_FILE"
DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=3.0, pool=3.0)
DEFAULT_DEADLINE = 15.0  # seconds for a whole call, retries included
# The largest legitimate answer is a batched search: 8 x 50 records of at most a few KiB each.
MAX_ANSWER_BYTES = 4 * 1024 * 1024
_MAX_TOKEN_BYTES = 16384

def default_token_file() -> str:
    """The governed memory token file: ``$KAGENT_MEMORY_TOKEN_FILE``, else the governed mount."""
    return os.environ.get(GOVERNED_MEMORY_TOKEN_FILE_ENV, "").strip() or GOVERNED_MEMORY_TOKEN_PATH


class TokenSource:
    """A bearer token: a callable's, or a file's (re-read when the kubelet rotates it).

    A token must be printable ASCII and at most 16 KiB; anything else (a corrupt file, a FIFO,
    a directory) counts as no token at all, so it never reaches a header, an error or a log."""

    def __init__(self, token: str | Callable[[], str] | None, token_file: str | Path | None
                 ) -> None:
        if token is not None and not (isinstance(token, str) or callable(token)):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="token")
        self._token = token
        self._file = None if token is not None else Path(token_file or default_token_file())
        self._cached: tuple[tuple[int, int, int], str] | None = None

    @property
    def source(self) -> str:
        """Where the token comes from: ``token_file`` or ``token`` (an error's ``field``)."""
        return "token_file" if self._file is not None else "token"

    def get(self) -> str:
        if isinstance(self._token, str):
            return _usable(self._token)
        if self._token is not None:
            try:
                value = self._token()
            except Exception:  # noqa: BLE001 - a failing provider is no token, never its text
                return ""
            return _usable(value)
        assert self._file is not None
        try:
            st = os.stat(self._file)
            if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_TOKEN_BYTES:
                return ""
            version = (st.st_ino, st.st_mtime_ns, st.st_size)
            if self._cached is None or self._cached[0] != version:
                with open(self._file, "rb") as f:
                    raw = f.read(_MAX_TOKEN_BYTES + 1)
                text = raw.decode("ascii", "replace").strip() if len(raw) <= _MAX_TOKEN_BYTES \
                    else ""
                self._cached = (version, _usable(text))
        except OSError:
            return ""
        return self._cached[1]


def _usable(token: object) -> str:
    if (not isinstance(token, str) or len(token) > _MAX_TOKEN_BYTES or not token.isascii()
            or not token.isprintable() or " " in token):
        return ""
    return token
