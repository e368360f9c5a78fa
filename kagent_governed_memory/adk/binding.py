"""The request binding's check: which request may use memory, and its captured generation."""

from __future__ import annotations

from ..errors import GovernanceError, ReasonCode
from ..identity import AgentIdentity
from ..repository import RedeemAdmitRepository, RuntimeRepository
from ..scope._request import RequestBinding

__all__ = ["check_binding"]


async def check_binding(binding: RequestBinding | None, *, agent: AgentIdentity,
                        store: RuntimeRepository, admit_units: int = 0) -> ReasonCode | None:
    """Why this request has no memory, or ``None``: the binding fits ``agent`` and the local
    homeserver, and its assertion was redeemed (once per request, the generation captured).
    ``admit_units`` (a first turn's prefetch): when this call redeems, and the store can, the
    units are admitted in the same call under the captured generation (``redeem_admit``);
    the outcome waits on the binding for the prefetch."""
    if binding is None:
        return ReasonCode.NO_BINDING
    if binding.assertion is None:
        return binding.reason or ReasonCode.ASSERTION_MISSING
    a = binding.assertion
    if a.agent != agent:
        return ReasonCode.AGENT_MISMATCH
    if binding.room_id is not None and binding.room_id != a.room_id:
        return ReasonCode.SCOPE_MISMATCH
    if set(a.audience) != {store.local_server}:
        return ReasonCode.AUDIENCE_DENIED
    key = a.key
    try:
        key.require_servable(store.local_server)
    except GovernanceError as exc:
        return exc.reason
    async with binding.lock:
        if binding.assertion is None:  # an operation queued before us failed to redeem
            return binding.reason or ReasonCode.ASSERTION_MISSING
        if not binding.captured:
            # Final for the request, whatever happens: the jti was (or may have been)
            # redeemed, so a retry could only be refused as replayed, or wait out a
            # stalled controller again for every later operation of the turn.  Marked
            # before the call, so a cancelled redemption is not tried again either.
            binding.captured = True
            try:
                # One round trip: the jti is redeemed (single use, T1) and the generation
                # captured, only for the classification and output audience the consent
                # was given for (ADR decision 6; both signed into the assertion)
                if admit_units > 0 and isinstance(store, RedeemAdmitRepository):
                    binding.generation, binding.preadmit_refusal = await store.redeem_admit(
                        a, units=admit_units)
                    if binding.generation is not None:
                        binding.preadmitted = admit_units
                else:
                    binding.generation = await store.redeem(a)
            except GovernanceError as exc:
                binding.assertion, binding.reason = None, exc.reason
                return exc.reason
            except BaseException:
                binding.assertion, binding.reason = None, ReasonCode.STORE_UNAVAILABLE
                raise
    if binding.generation is None:
        return ReasonCode.CONSENT_REQUIRED
    return None
