"""``kagent_governed_memory.testing.ScriptedModel`` follows its documented rules on the real
google-adk Runner, with the governed tools and the store on the test database."""

from __future__ import annotations

import json

from support.adk import AGENT, PUBLIC_KEYS, ISSUER, context_id, sign
from support.db import migrated, open_store
from google.adk.agents import LlmAgent
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from kagent_governed_memory import (GovernedMemoryService, HashingEmbedder, MemoryScope,
                                    Principal, ScopeKey, configure_governed_memory,
                                    memory_request)
from kagent_governed_memory.testing import ScriptedModel

KEY = ScopeKey(principal=Principal(mxid="@alice:example.org", origin="native_local"),
               agent=AGENT, scope=MemoryScope.control_room("!room:example.org"))


async def _run(runner: Runner, text: str, session: str) -> list[str]:
    out: list[str] = []
    with memory_request(sign(KEY, session=session), public_keys=PUBLIC_KEYS, issuer=ISSUER,
                        agent=AGENT, context_id=context_id(session)):
        async for event in runner.run_async(
                user_id="u", session_id=session,
                new_message=types.Content(role="user", parts=[types.Part(text=text)])):
            for part in event.content.parts if event.content and event.content.parts else []:
                if part.text:
                    out.append(part.text)
    return out


async def test_rules_save_recall_and_refusals(database) -> None:
    await migrated(database)
    async with await open_store(database) as store:
        model = ScriptedModel(summaries=[json.dumps(["a summarised fact"])])
        agent = LlmAgent(name="assistant", model=model, instruction="You help the user.")
        memory = GovernedMemoryService(store, agent=AGENT, embedder=HashingEmbedder(),
                                       summariser=model)
        configure_governed_memory(agent, memory)
        sessions = InMemorySessionService()
        runner = Runner(app_name=AGENT.app_name, agent=agent, session_service=sessions,
                        memory_service=memory)
        for sid in ("s1", "s2", "s3", "s4"):
            await sessions.create_session(app_name=AGENT.app_name, user_id="u", session_id=sid)

        # before consent: the tools answer with the reason, and the model says it
        assert await _run(runner, "Remember that I prefer green tea.", "s1") == [
            "Not saved: consent_required."]
        assert await _run(runner, "What do I drink?", "s1") == ["No memory: consent_required."]
        assert not model.saw("I prefer green tea.\n</memory>")

        await store.grant(KEY, purpose="personal_preferences")
        assert await _run(runner, "remember: I prefer green tea.", "s2") == ["Saved."]
        # a new session: the prefetch put the fact into the model request
        assert await _run(runner, "Anything you know?", "s3") == [
            "From memory: I prefer green tea."]
        assert model.saw("- I prefer green tea.")
        assert await _run(runner, "Hello.", "s4") == ["From memory: I prefer green tea."]
        await memory.aclose()
    # the summariser's prompt is answered from `summaries`, then []
    assert model.summaries == [json.dumps(["a summarised fact"])]  # fewer than 5 turns: unused


async def test_plan_replaces_the_rules_and_requests_are_kept() -> None:
    from google.adk.models.llm_request import LlmRequest

    model = ScriptedModel(plan=lambda text: ("save_memory", {"content": text[::-1]}),
                          reply="fine")
    request = LlmRequest(contents=[types.Content(role="user", parts=[types.Part(text="abc")])])
    [response] = [r async for r in model.generate_content_async(request)]
    assert response.content is not None and response.content.parts
    call = response.content.parts[0].function_call
    assert call is not None and call.name == "save_memory" and call.args == {"content": "cba"}
    assert model.requests == [request] and model.saw("abc") and not model.saw("zzz")
    assert response.usage_metadata is not None  # google-adk warns without it
