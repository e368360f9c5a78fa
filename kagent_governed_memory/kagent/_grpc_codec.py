"""The HTTP API's routes and bodies as ``GovernedMemoryService`` messages, and the messages'
answers in the HTTP API's shape (what ``_stores`` reads).

Where main's proto has less than the HTTP API, the difference is refused here, never dropped
silently: ``GrantConsent`` has no classification or output audience (a consent asking for other
than the default is ``invalid_argument``).  ``Redeem`` admits only implicit work
(``admit_units``) and answers ``admitted`` without a reason: explicit work is admitted by a
separate ``Admit`` (the store's path for a controller without the combined call), and an
admission refused without a reason is ``admission_denied``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from ..errors import ReasonCode
from ._proto import governed_memory_pb2 as pb

__all__ = ["RPCS", "Rpc", "answer"]

_DEFAULT_CLASSIFICATION = "personal"


@dataclass(frozen=True)
class Rpc:
    method: str
    request: Callable[[dict[str, Any], str], Any]  # (body, scope assertion) -> message
    reply: Callable[[Any, Any], dict[str, Any]]  # (request message, answer) -> HTTP shape


def answer(rpc: Rpc, sent: Any, got: Any) -> dict[str, Any]:
    return rpc.reply(sent, got)


def _scope(body: dict[str, Any]) -> Any:
    s = body["scope"]
    p = s["principal"]
    return pb.MemoryScope(principal=pb.MemoryPrincipal(issuer=p["issuer"], subject=p["subject"]),
                          agent_namespace=s["agent_namespace"], agent_name=s["agent_name"],
                          kind=s["kind"], context_id=s["room_id"])


def _time(message: Any, name: str) -> str | None:
    if not message.HasField(name):
        return None
    return str(getattr(message, name).ToDatetime(tzinfo=UTC).isoformat())


def _entry(e: Any) -> dict[str, Any]:
    return {"id": e.id, "content": e.content, "created_at": _time(e, "created_at"),
            "expires_at": _time(e, "expires_at"),
            "score": e.score if e.HasField("score") else None}


def _erasure(_: Any, got: Any) -> dict[str, Any]:
    e = got.erasure
    return {"deleted": e.deleted, "verified": e.verified,
            "generation": e.generation if e.HasField("generation") else None}


def _redeem(body: dict[str, Any], assertion: str) -> Any:
    admit = body.get("admit")
    units = 0
    if admit is not None and not admit["explicit"]:
        units = int(admit["units"])
    return pb.GovernedMemoryServiceRedeemRequest(scope=_scope(body), scope_assertion=assertion,
                                                 admit_units=units)


def _redeemed(sent: Any, got: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"generation": got.generation if got.HasField("generation") else None}
    if sent.admit_units > 0:  # else no "admission": the store admits by a separate Admit
        out["admission"] = "admitted" if got.admitted else ReasonCode.ADMISSION_DENIED.value
    return out


def _search(body: dict[str, Any], assertion: str) -> Any:
    m = pb.GovernedMemoryServiceSearchRequest(scope=_scope(body), scope_assertion=assertion,
                                              generation=body["generation"],
                                              limit=body["limit"])
    if "vectors" in body:
        m.vectors.extend(pb.GovernedMemoryVector(vector=v) for v in body["vectors"])
    else:
        m.vector.extend(body["vector"])
    return m


def _found(sent: Any, got: Any) -> dict[str, Any]:
    if len(sent.vectors):
        return {"results": [[_entry(e) for e in r.memories] for r in got.results]}
    return {"memories": [_entry(e) for e in got.memories]}


def _consent(body: dict[str, Any], _: str) -> Any:
    if body.get("classification", _DEFAULT_CLASSIFICATION) != _DEFAULT_CLASSIFICATION \
            or body.get("output_audience") is not None:
        raise ValueError("main's GrantConsent has no classification or output audience")
    return pb.GovernedMemoryServiceGrantConsentRequest(scope=_scope(body),
                                                       purpose=body["purpose"])


def _consented(_: Any, got: Any) -> dict[str, Any]:
    return {"generation": got.generation, "purpose": got.purpose,
            "policy_version": got.policy_version, "granted_at": _time(got, "granted_at"),
            "expires_at": _time(got, "expires_at")}


def _status(_: Any, got: Any) -> dict[str, Any]:
    return {"enabled": got.enabled, "purpose": got.purpose or None,
            "policy_version": got.policy_version or None, "generation": got.generation,
            "consent_expires_at": _time(got, "consent_expires_at"),
            "max_ttl_seconds": got.max_ttl.seconds if got.HasField("max_ttl") else None,
            "entry_cap": got.entry_cap if got.HasField("entry_cap") else None,
            "entry_count": got.entry_count,
            "last_verified_erasure_at": _time(got, "last_verified_erasure_at"),
            "failure_reason": got.failure_reason or None}


def _forget(body: dict[str, Any], assertion: str) -> Any:
    m = pb.GovernedMemoryServiceForgetRequest(scope=_scope(body), entry_id=body["entry_id"],
                                              scope_assertion=assertion)
    if body.get("generation") is not None:
        m.generation = body["generation"]
    return m


def _inspect(body: dict[str, Any], _: str) -> Any:
    return pb.GovernedMemoryServiceInspectRequest(scope=_scope(body),
                                                  cursor=body.get("cursor") or "",
                                                  page_size=body["page_size"])


RPCS: dict[str, Rpc] = {
    "generation": Rpc("Redeem", _redeem, _redeemed),
    "admit": Rpc("Admit", lambda b, a: pb.GovernedMemoryServiceAdmitRequest(
        scope=_scope(b), scope_assertion=a, generation=b["generation"], units=b["units"],
        explicit=bool(b["explicit"])), lambda _, got: {"admitted": got.admitted}),
    "entries": Rpc("Save", lambda b, a: pb.GovernedMemoryServiceSaveRequest(
        scope=_scope(b), scope_assertion=a, generation=b["generation"],
        items=[pb.GovernedMemoryItem(content=i["content"], vector=i["vector"])
               for i in b["items"]]), lambda _, got: {"ids": list(got.ids)}),
    "search": Rpc("Search", _search, _found),
    "forget": Rpc("Forget", _forget, _erasure),
    "consent": Rpc("GrantConsent", _consent, _consented),
    "current-generation": Rpc("Generation", lambda b, _: pb.GovernedMemoryServiceGenerationRequest(
        scope=_scope(b)), lambda _, got: {
        "generation": got.generation if got.HasField("generation") else None}),
    "status": Rpc("Status", lambda b, _: pb.GovernedMemoryServiceStatusRequest(scope=_scope(b)),
                  _status),
    "inspect": Rpc("Inspect", _inspect, lambda _, got: {
        "entries": [_entry(e) for e in got.entries], "next_cursor": got.next_cursor or None}),
    "forget-all": Rpc("ForgetAll", lambda b, _: pb.GovernedMemoryServiceForgetAllRequest(
        scope=_scope(b)), _erasure),
    "withdraw": Rpc("Withdraw", lambda b, _: pb.GovernedMemoryServiceWithdrawRequest(
        scope=_scope(b)), _erasure),
    "offboard": Rpc("Offboard", lambda b, _: pb.GovernedMemoryServiceOffboardRequest(
        principal=pb.MemoryPrincipal(issuer=b["principal"]["issuer"],
                                     subject=b["principal"]["subject"])),
        lambda _, got: {"scopes": [{"scope_id": s.scope_id, "outcome": s.outcome,
                                    "deleted": s.deleted} for s in got.scopes]}),
}
