"""The relay's recorder is a declared protocol: a wrong one is refused when the relay is made
(not found out later as every request refused ``request_not_recorded``), and a failed relay is
a ``GovernanceError`` with a reason code."""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("mautrix")

from kagent_governed_memory import (  # noqa: E402
    AgentIdentity,
    GovernanceError,
    InvalidInput,
    MemoryScope,
    OriginKind,
    Principal,
    ReasonCode,
    ScopeKey,
)
from kagent_governed_memory.matrix import A2ARelay, RelayError  # noqa: E402
from kagent_governed_memory.repository import RequestRecorder  # noqa: E402
from kagent_governed_memory.scope import generate_private_key  # noqa: E402

AGENT = AgentIdentity(namespace="kagent", name="my-agent")
KEY = ScopeKey(principal=Principal(mxid="@alice:example.org", origin=OriginKind.NATIVE_LOCAL),
               agent=AGENT, scope=MemoryScope.control_room("!room:example.org"))


class Recorder:
    def __init__(self) -> None:
        self.recorded: list[str] = []

    async def record_request(self, assertion) -> None:  # noqa: ANN001
        self.recorded.append(assertion.jti)


def relay(recorder: object = None, handler=None) -> A2ARelay:  # noqa: ANN001
    transport = httpx.MockTransport(handler or (lambda request: httpx.Response(503)))
    return A2ARelay("http://agent.invalid/", agent=AGENT, private_key=generate_private_key(),
                    issuer="bridge", audience=["example.org"], recorder=recorder,  # type: ignore[arg-type]
                    client=httpx.AsyncClient(transport=transport))


def test_a_recorder_that_records_nothing_is_refused_when_the_relay_is_made():
    with pytest.raises(InvalidInput) as refused:
        relay(recorder=object())
    assert refused.value.reason is ReasonCode.INVALID_ARGUMENT
    assert refused.value.ids == {"field": "recorder"}
    assert isinstance(Recorder(), RequestRecorder)
    relay(recorder=Recorder())
    relay(recorder=None)


async def test_a_failed_relay_is_a_governance_error_with_a_reason_code():
    recorder = Recorder()
    with pytest.raises(RelayError) as failed:
        await relay(recorder).ask(KEY, "hello", context_id="ctx-1")
    assert isinstance(failed.value, GovernanceError)
    assert failed.value.reason is ReasonCode.AGENT_HTTP_ERROR
    assert len(recorder.recorded) == 1  # recorded before it was sent

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(RelayError) as failed:
        await relay(handler=down).ask(KEY, "hello", context_id="ctx-1")
    assert failed.value.reason is ReasonCode.AGENT_UNREACHABLE
    assert f"({failed.value.reason})" == "(agent_unreachable)"  # as the bridge shows it

    with pytest.raises(RelayError) as failed:
        await relay(handler=lambda request: httpx.Response(200, text="no json")).ask(
            KEY, "hello", context_id="ctx-1")
    assert failed.value.reason is ReasonCode.AGENT_ANSWER_INVALID
