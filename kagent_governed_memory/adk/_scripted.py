"""A scripted google-adk model for examples, notebooks and tests (the ``adk`` extra).

``ScriptedModel`` is a real ``BaseLlm`` that never touches the network and follows a few
readable rules, so an example can show memory working end to end without an API key:

* a user message that starts with "remember" ("Remember that I prefer green tea.") calls the
  governed ``save_memory`` tool with the fact (``content="I prefer green tea."``);
* a question (ends with "?") is answered "From memory: …" when the request carries recalled
  facts (the ``<memory>`` block the governed prefetch and ``load_memory`` add to that request's
  instructions), otherwise it calls ``load_memory(query=…)``;
* after a tool result it says what happened in one line: "Saved.", "Not saved: <reason>.",
  "From memory: …", "No memory: <reason>.", "Nothing remembered about that.";
* anything else: "From memory: …" when facts were recalled, else ``reply`` ("OK.");
* the auto-save summariser's prompt is answered with the next of ``summaries`` (a JSON array of
  facts, default ``[]``: auto-save stores nothing).

Every request is kept in ``requests`` (this process's memory only), and ``saw(text)`` says
whether any request's instructions or contents held ``text`` — what a test asserts to prove a
recalled fact reached the model.  It is a test double: never use it to serve users.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, Callable
from typing import Any

try:
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types
except ImportError as exc:  # pragma: no cover - exercised by test_packaging
    raise ImportError(
        "kagent_governed_memory.testing needs google-adk: "
        "pip install -e '.[adk]' in a clone (docs/install.md)") from exc
from pydantic import Field, PrivateAttr

from .summariser import PROMPT

__all__ = ["ScriptedModel", "ToolCall"]

ToolCall = tuple[str, dict[str, Any]]
"""A tool call the model makes: (tool name, arguments)."""

_SUMMARY_MARKER = PROMPT.rsplit("\n", 1)[-1]  # the summariser prompt's last line
_REMEMBER = re.compile(r"^\s*remember\b[\s:,]*(?:that\s+)?(?P<fact>.+)$", re.I | re.S)
# google-adk logs a warning for a response without usage metadata: a scripted model uses none
_USAGE = types.GenerateContentResponseUsageMetadata(prompt_token_count=0,
                                                    candidates_token_count=0, total_token_count=0)
_MEMORY = re.compile(r"<memory>\n(?P<lines>.*?)\n</memory>", re.S)


class ScriptedModel(BaseLlm):
    """A deterministic, offline ``BaseLlm`` (see the module docstring for its rules).

    ``plan`` replaces the rules for user messages: ``plan(text)`` returns a ``ToolCall`` to make
    or ``None`` to reply.  ``summaries`` are the auto-save summariser's answers, in order.
    """

    model: str = "scripted"
    reply: str = "OK."
    summaries: list[str] = Field(default_factory=list)
    plan: Callable[[str], ToolCall | None] | None = None
    _requests: list[LlmRequest] = PrivateAttr(default_factory=list)

    @property
    def requests(self) -> list[LlmRequest]:
        """Every request this model was given (chat and summariser), oldest first."""
        return self._requests

    def saw(self, text: str) -> bool:
        """Whether any request's instructions or contents contained ``text``."""
        return any(text in _request_text(r) for r in self._requests)

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        self._requests.append(llm_request)
        last = llm_request.contents[-1] if llm_request.contents else None
        parts = list(last.parts or []) if last is not None else []
        text = " ".join(p.text for p in parts if p.text).strip()
        if _SUMMARY_MARKER in text:
            yield _say(self.summaries.pop(0) if self.summaries else "[]")
            return
        recalled = _recalled(llm_request)
        results = [p.function_response for p in parts if p.function_response]
        if results:
            yield _say(_after_tool(results[0].name or "", results[0].response or {}, recalled))
            return
        call = self.plan(text) if self.plan is not None else _rules(text, recalled)
        if call is not None:
            name, args = call
            yield LlmResponse(content=types.Content(role="model", parts=[
                types.Part(function_call=types.FunctionCall(name=name, args=args))]),
                usage_metadata=_USAGE)
            return
        yield _say("From memory: " + "; ".join(recalled) if recalled else self.reply)


def _rules(text: str, recalled: list[str]) -> ToolCall | None:
    remember = _REMEMBER.match(text)
    if remember:
        return "save_memory", {"content": remember.group("fact").strip()}
    if text.endswith("?") and not recalled:
        return "load_memory", {"query": text}
    return None


def _after_tool(name: str, response: dict[str, Any], recalled: list[str]) -> str:
    status, reason = response.get("status"), response.get("reason")
    if name == "save_memory":
        return "Saved." if status == "saved" else f"Not saved: {reason}."
    if name == "load_memory":
        if status != "ok":
            return f"No memory: {reason}."
        return "From memory: " + "; ".join(recalled) if recalled else \
            "Nothing remembered about that."
    return "Tool said " + json.dumps(response, sort_keys=True, default=str)


def _recalled(request: LlmRequest) -> list[str]:
    """The facts in the request's ``<memory>`` blocks (what the governed tools injected)."""
    found: list[str] = []
    for block in _MEMORY.finditer(_instructions(request)):
        found += [line[2:] for line in block.group("lines").splitlines()
                  if line.startswith("- ")]
    return list(dict.fromkeys(found))


def _instructions(request: LlmRequest) -> str:
    si = request.config.system_instruction if request.config is not None else None
    if si is None:
        return ""
    if isinstance(si, str):
        return si
    if isinstance(si, types.Content):
        return "\n".join(p.text or "" for p in si.parts or [])
    return str(si)


def _request_text(request: LlmRequest) -> str:
    contents = "\n".join(p.text or "" for c in request.contents for p in c.parts or [])
    return _instructions(request) + "\n" + contents


def _say(text: str) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]),
                       usage_metadata=_USAGE)
