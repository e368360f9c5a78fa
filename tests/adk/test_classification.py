"""ADR decision 6: consent is given for a classification and an output audience; a request
whose signed classification or audience differs gets no memory (fail closed)."""

from __future__ import annotations

import pytest
from support.adk import build, save_plan, sign
from support.db import save
from support.scopes import make_key

from kagent_governed_memory import InvalidInput

PURPOSE = "personal_preferences"


async def test_consent_is_for_one_classification_and_output_audience(store):
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation  # personal, local server only
    assert await store.generation(key, classification="personal",
                                  output_audience=["example.org"]) == g
    assert await store.generation(key, classification="confidential") is None
    assert await store.generation(key, output_audience=["example.org", "partner.example"]) is None
    # renewing for another classification is a conflict, not a silent change
    with pytest.raises(Exception) as err:
        await store.grant(key, purpose=PURPOSE, classification="work")
    assert getattr(err.value, "reason", None) is not None
    assert err.value.reason.value == "consent_conflict"
    with pytest.raises(InvalidInput):
        await store.grant(key, purpose=PURPOSE, classification="Not A Code")


async def test_a_request_of_another_classification_gets_no_memory(store, database):
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    await save(store, key, "prefers green tea")
    h = build(store, plan=save_plan)
    await h.turn("hello", key=key)
    before = h.embedder.calls
    token = sign(key, classification="confidential")
    out = await h.turn("recall: tea", key=None, token=token)
    assert any('"consent_required"' in t for t in out), out
    assert h.embedder.calls == before  # no embedding work for a mismatched request
    out = await h.turn("recall: tea", key=key)  # the consented classification: memory
    assert any('"count": 1' in t for t in out), out
