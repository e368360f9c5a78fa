"""Summariser bounds (A2, C6 input; ADR §42 output): pure functions, no model."""

from __future__ import annotations

import json

import pytest

from kagent_governed_memory import PROTOTYPE_POLICY, ReasonCode
from kagent_governed_memory.adk.summariser import cap_transcript, parse_facts


def test_cap_keeps_newest_turns_within_16_kib():
    lines = [f"user: turn {i} " + "x" * 1000 for i in range(40)]
    capped = cap_transcript(lines, 16 * 1024)
    assert len(capped.encode()) <= 16 * 1024
    assert capped.endswith(lines[-1]) and "turn 39" in capped and "turn 0 " not in capped
    assert capped.count("user: turn") <= 16


@pytest.mark.parametrize("char", ["é", "€", "𝄞", "a"])
def test_cap_cuts_on_a_utf8_boundary(char):
    line = "user: " + char * 5000
    for budget in range(1, 40):
        capped = cap_transcript([line], budget)
        raw = capped.encode("utf-8")
        assert len(raw) <= budget
        assert raw.decode("utf-8") == capped  # valid UTF-8, nothing replaced
        assert line.endswith(capped)  # the newest bytes, never the oldest


def test_cap_passes_short_input_unchanged():
    assert cap_transcript(["user: hi", "assistant: hello"], 16 * 1024) == \
        "user: hi\nassistant: hello"


@pytest.mark.parametrize("output, facts, dropped, reason", [
    ('["a", "b"]', ["a", "b"], 0, None),
    ('```json\n["a"]\n```', ["a"], 0, None),
    ('["a", "a", " a "]', ["a"], 0, None),
    ("[]", [], 0, ReasonCode.NOTHING_TO_SAVE),
    (json.dumps(["ok", "x" * 513]), ["ok"], 1, None),
    (json.dumps(["é" * 257]), [], 1, ReasonCode.NOTHING_TO_SAVE),
    (json.dumps(["nul\x00byte", "fine"]), ["fine"], 1, None),
    (json.dumps(["", "  "]), [], 2, ReasonCode.NOTHING_TO_SAVE),
    (json.dumps([f"f{i}" for i in range(10)]), [f"f{i}" for i in range(10)], 0, None),
    (json.dumps([f"f{i}" for i in range(11)]), [], 0, ReasonCode.SUMMARY_TOO_MANY_FACTS),
    ('{"a": 1}', [], 0, ReasonCode.SUMMARY_MALFORMED),
    ('["a", 1]', [], 0, ReasonCode.SUMMARY_MALFORMED),
    ("The user likes tea.", [], 0, ReasonCode.SUMMARY_MALFORMED),
    ("[" * 100_000, [], 0, ReasonCode.SUMMARY_MALFORMED),
    ("", [], 0, ReasonCode.SUMMARY_MALFORMED),
])
def test_parse_facts(output, facts, dropped, reason):
    summary = parse_facts(output, PROTOTYPE_POLICY)
    assert (summary.facts, summary.dropped, summary.reason) == (facts, dropped, reason)
