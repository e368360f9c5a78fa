"""A token kagent's A2A proxy hands to an agent pod cannot open the governed bridge routes.

kagent's A2A proxy forwards the caller's ``Authorization`` header to the agent pod (its
``upstreamAuthInterceptor`` with the default "unsecure" authenticator's ``UpstreamAuth``).  The
bridge calls agents with its kagent-audience token, so every agent pod receives it.  Patch 0030
makes the governed listener review tokens for its own audience ("kagent-governed-memory") only.

The Go overlay ``tests/support/go_overlay/governed_memory_replay_test.go``, compiled into the controller
test binary of ``go_controller.build()``, sends an A2A ``message/send`` through kagent's real A2A
handler mux and upstream auth interceptor to a stand-in agent pod that records every header,
asserts the pod received the bridge's ``Authorization`` and memory scope headers, and replays
them on each bridge route of ``NewGovernedMemoryRouter`` (the controller's real
``KubeTokenReviewer`` over the overlay's audience-honouring fake TokenReview API): each must be
401 ``unauthenticated``, while the bridge's governed-audience token passes authentication.

Without Go or kagent's source this is reported as NOT RUN (skipped, with the reason).
"""

from __future__ import annotations

import os
import subprocess

import pytest
from support.go_controller import Unavailable, build

# the controller test binary compiled by go_controller.build
pytestmark = pytest.mark.controller

TEST = "TestGovernedMemoryTokenReplay"


def test_kagent_proxy_token_replay_is_refused_on_bridge_routes() -> None:
    try:
        _, binary, _ = build()
    except Unavailable as exc:
        pytest.skip(f"GO VERIFICATION NOT RUN: the compiled controller is unavailable ({exc})")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGM_TESTSERVER_")}
    env["KGM_REPLAY_TEST"] = "1"
    done = subprocess.run([str(binary), "-test.run", f"^{TEST}$", "-test.v", "-test.count=1"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"{TEST} failed:\n{out[-6000:]}"
    assert f"--- PASS: {TEST}" in out, f"{TEST} did not run (skipped?):\n{out[-3000:]}"
    assert "received the bridge's Authorization" in out
    for route in ("/consent", "/status", "/inspect", "/forget", "/forget-all", "/withdraw",
                  "/offboard"):
        assert f"{route}: replayed kagent-audience token answered 401 \"unauthenticated\"" in out
