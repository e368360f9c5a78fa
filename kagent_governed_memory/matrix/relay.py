"""Relay one subject message to the agent over A2A, with a freshly signed scope assertion.

Each call signs a new assertion (``sign_scope_assertion``: the exact scope, this request's A2A
context id, a 60 s lifetime, a random ``jti``), records it with the bridge's store when the store
records requests (direct mode: the runtime's login redeems only recorded requests; in kagent
mode the controller verifies the signature itself), and sends an A2A JSON-RPC ``message/send``
with the token in the ``x-kagent-memory-scope`` header.  The context id is the control room's
A2A context (``room_context_id``): one ADK session per room and agent, the id the agent
verifies the assertion for.

The answer is the agent's text parts.  A failed relay is a content-free ``RelayError`` with a
reason code; the agent's error bodies are never read into an error or a log line.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..errors import GovernanceError, InvalidInput, ReasonCode
from ..identity import AgentIdentity, ScopeKey
from ..repository import RequestRecorder
from ..scope._assertion import sign_scope_assertion, verify_scope_assertion
from ..scope._keys import key_id
from ..scope._request import ASSERTION_HEADER

__all__ = ["A2ARelay", "RelayAnswer", "RelayError", "RequestRecorder", "room_context_id"]

REQUEST_LIFETIME = timedelta(seconds=60)
_MAX_TEXTS = 64


class RelayError(GovernanceError):
    """The agent could not be reached (``agent_unreachable``), answered with an HTTP error
    (``agent_http_error``) or with something that is not an answer (``agent_answer_invalid``),
    or the request could not be recorded (the recorder's reason)."""

    default_reason = ReasonCode.AGENT_UNREACHABLE


@dataclass(frozen=True)
class RelayAnswer:
    texts: tuple[str, ...]
    state: str

    def __repr__(self) -> str:  # never the texts
        return f"RelayAnswer(texts={len(self.texts)}, state={self.state!r})"


def room_context_id(room_id: str, agent: AgentIdentity) -> str:
    """The A2A context (= ADK session) of one control room with one agent: opaque, stable."""
    digest = hashlib.sha256(f"{agent.app_name}\x00{room_id}".encode()).hexdigest()[:32]
    return f"kgm-room-{digest}"


class A2ARelay:
    """Relays to one agent's A2A endpoint (google-adk's ``to_a2a`` app or kagent's).

    ``recorder`` records each request before it is sent (direct mode: the bridge's store); an
    object that is not a ``RequestRecorder`` is refused here (``invalid_argument``,
    ``field=recorder``), not discovered later as every request refused ``request_not_recorded``.
    """

    def __init__(self, url: str, *, agent: AgentIdentity, private_key: Ed25519PrivateKey,
                 issuer: str, audience: Sequence[str], recorder: RequestRecorder | None = None,
                 client: httpx.AsyncClient | None = None, timeout: float = 120.0) -> None:
        if recorder is not None and not isinstance(recorder, RequestRecorder):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="recorder")
        self.url = url.rstrip("/") + "/"
        self.agent = agent
        self._private = private_key
        self._kid = key_id(private_key)
        self._public = {self._kid: private_key.public_key()}
        self._issuer = issuer
        self._audience = list(audience)
        self._recorder = recorder
        self._client = client or httpx.AsyncClient(trust_env=False)
        self._owns_client = client is None
        self._timeout = timeout

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    def sign(self, key: ScopeKey, context_id: str) -> str:
        return sign_scope_assertion(key, private_key=self._private, issuer=self._issuer,
                                    audience=self._audience, context_id=context_id,
                                    lifetime=REQUEST_LIFETIME, kid=self._kid)

    async def ask(self, key: ScopeKey, text: str, *, context_id: str) -> RelayAnswer:
        """One request: sign, record, send; the agent's answer."""
        token = self.sign(key, context_id)
        if self._recorder is not None:
            assertion = verify_scope_assertion(token, public_keys=self._public,
                                               issuer=self._issuer, agent=self.agent,
                                               context_id=context_id)
            try:
                await self._recorder.record_request(assertion)
            except GovernanceError as exc:
                raise RelayError(exc.reason) from None
        body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": "message/send",
                "params": {"message": {"kind": "message", "role": "user",
                                       "messageId": uuid.uuid4().hex, "contextId": context_id,
                                       "parts": [{"kind": "text", "text": text}]}}}
        try:
            answer = await self._client.post(self.url, json=body,
                                              headers={ASSERTION_HEADER: token},
                                              timeout=self._timeout)
        except httpx.HTTPError:
            raise RelayError(ReasonCode.AGENT_UNREACHABLE) from None
        if answer.status_code != 200:
            raise RelayError(ReasonCode.AGENT_HTTP_ERROR)
        try:
            data = answer.json()
        except ValueError:
            raise RelayError(ReasonCode.AGENT_ANSWER_INVALID) from None
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, dict) or result.get("contextId") != context_id:
            raise RelayError(ReasonCode.AGENT_ANSWER_INVALID)
        status = result.get("status")
        state = status.get("state") if isinstance(status, dict) else None
        return RelayAnswer(texts=tuple(_answer_texts(result))[:_MAX_TEXTS],
                           state=state if isinstance(state, str) else "unknown")


def _parts_texts(parts: Any) -> list[str]:
    if not isinstance(parts, list):
        return []
    return [p["text"] for p in parts
            if isinstance(p, dict) and p.get("kind") == "text" and isinstance(p.get("text"), str)]


def _answer_texts(result: dict[str, Any]) -> list[str]:
    """The agent's reply: a task's artifacts' text parts, else its status message's; a
    message answer's parts."""
    if result.get("kind") == "message":
        return _parts_texts(result.get("parts"))
    texts: list[str] = []
    artifacts = result.get("artifacts")
    for artifact in artifacts if isinstance(artifacts, list) else []:
        if isinstance(artifact, dict):
            texts += _parts_texts(artifact.get("parts"))
    if not texts:
        status = result.get("status")
        message = status.get("message") if isinstance(status, dict) else None
        if isinstance(message, dict):
            texts = _parts_texts(message.get("parts"))
    return texts
