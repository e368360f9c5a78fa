"""The Python patch series (patches/kagent-v0.9.11/01xx-*.patch) against the real kagent-adk 0.9.11.

The test tooling builds (once, cached) a separate virtualenv with ``kagent-adk==0.9.11``
installed under upstream's own lock (``patches/kagent-v0.9.11/constraints.txt``), copies the
installed ``kagent/adk`` package twice, applies the series to one copy with ``git apply -p5``
(the wheel's files are byte-identical to the tag), and runs ``kagent_runtime/driver.py`` in
that venv against each copy, concurrently: kagent's own ``KAgentApp`` A2A server, executor,
``AgentConfig._configure_memory`` wiring, ``KagentMemoryService``, tools and prefetch, a real
google-adk ``Runner`` with a scripted model, the test controller (the governed API on the
library's store and this session's ephemeral PostgreSQL) and a loopback embedding provider.

The patched runtime must prove the gates; the unpatched runtime must fail them (so this test
can fail).  Set ``KGM_SKIP_KAGENT_RUNTIME=1`` to skip (the only way it is skipped); a missing
constraints file is a failure, not a skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from support.kagent_runtime.patched_copy import (
    apply_series,
    copy_package,
    python_patches,
    site_packages,
)
from support.kagent_runtime.runtime_venv import (
    RuntimeUnavailable,
    default_constraints,
    ensure_venv,
    python_of,
)
from psycopg.conninfo import make_conninfo

from kagent_governed_memory.dev import APP_ROLE, OWNER_ROLE, prepare_app_database

# the Python patch series in the kagent venv (the compiled-controller runs: `controller`)
pytestmark = pytest.mark.series

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parents[1] / "support" / "kagent_runtime"
PATCHES = REPO / "patches" / "kagent-v0.9.11"

if os.environ.get("KGM_SKIP_KAGENT_RUNTIME", "").strip() not in ("", "0"):
    pytest.skip("KGM_SKIP_KAGENT_RUNTIME is set", allow_module_level=True)

# The OpenAI SDK's own DEBUG request dump (``openai._base_client``: "Request options: {...}")
# contains every request body it sends -- chat prompts as much as embedding inputs.  That is
# the SDK's logging, independent of memory and of these patches; run it at INFO in production.
# It is the only logger/level allowed to carry a sentinel, and only at DEBUG.
THIRD_PARTY_DEBUG_DUMPS = {"openai._base_client:DEBUG"}
DRIVER_TIMEOUT = 600


@pytest.fixture(scope="module")
def kagent_runtime(tmp_path_factory) -> dict[str, Path]:
    if shutil.which("git") is None:
        pytest.fail("git is needed to apply the patch series (git apply)", pytrace=False)
    try:
        started = time.monotonic()
        venv, built = ensure_venv(default_constraints(REPO))
    except RuntimeUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    python = python_of(venv)
    kagent_dir = site_packages(python) / "kagent"
    root = tmp_path_factory.mktemp("kagent-adk")
    unpatched = copy_package(kagent_dir, root / "unpatched")
    patched = copy_package(kagent_dir, root / "patched")
    apply_series(python_patches(), patched, root / "upstream-tests")
    print(f"kagent venv {venv} ({'built' if built else 'cached'}, "
          f"{time.monotonic() - started:.1f}s)")
    return {"python": python, "patched": patched, "unpatched": unpatched, "logs": root,
            "tests": root / "upstream-tests" / "tests" / "unittests"}


@pytest.fixture(scope="module")
def runtime_database(postgresql_proc):
    """Like conftest's ``database``, once for this module (both drivers share one run)."""
    name = f"k_{uuid.uuid4().hex[:16]}"
    base = make_conninfo(host=postgresql_proc.host, port=postgresql_proc.port,
                         user=postgresql_proc.user, dbname="postgres")
    prepare_app_database(base, name, template=postgresql_proc.template_dbname)
    yield {"dsn": make_conninfo(base, user=APP_ROLE, dbname=name),
           "owner_dsn": make_conninfo(base, user=OWNER_ROLE, dbname=name),
           "admin_dsn": make_conninfo(base, dbname=name)}
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def own_databases(postgresql_proc):
    """A database of its own for the ``dim1024`` driver (its consents are recorded at 1024) and
    for the ``otel`` driver (the OpenTelemetry SDK on)."""
    base = make_conninfo(host=postgresql_proc.host, port=postgresql_proc.port,
                         user=postgresql_proc.user, dbname="postgres")
    out = {}
    for which in ("dim1024", "otel"):
        name = f"d_{uuid.uuid4().hex[:16]}"
        prepare_app_database(base, name, template=postgresql_proc.template_dbname)
        out[which] = {"name": name, "dsn": make_conninfo(base, user=APP_ROLE, dbname=name),
                      "owner_dsn": make_conninfo(base, user=OWNER_ROLE, dbname=name),
                      "admin_dsn": make_conninfo(base, dbname=name)}
    yield out
    with psycopg.connect(base, autocommit=True) as conn:
        for db in out.values():
            conn.execute(f'DROP DATABASE IF EXISTS "{db["name"]}" WITH (FORCE)')


@pytest.fixture(scope="module")
def reports(kagent_runtime, runtime_database, own_databases) -> dict[str, dict]:
    """Run the driver against the patched copy (a governed agent), the unpatched copy, the
patched copy with a legacy agent (memory without a mode), and the patched copy with
``embedding_dimension: 1024`` and with the OpenTelemetry SDK on (each on its own database),
concurrently."""
    runs = {}
    for which in ("patched", "unpatched", "legacy", "dim1024", "otel"):
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        log = kagent_runtime["logs"] / f"{which}.log"
        package = kagent_runtime["unpatched" if which == "unpatched" else "patched"]
        db = own_databases.get(which, runtime_database)
        if which == "otel":  # what the runtime itself sets (conftest switches ADK's off)
            for name in ("ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", "TRACELOOP_TRACE_CONTENT",
                         "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"):
                env.pop(name, None)
        env.update({
            "PYTHONPATH": os.pathsep.join([str(package), str(REPO), str(HERE)]),
            "PYTHONDONTWRITEBYTECODE": "1",
            "KGM_TEST_DSN": db["dsn"],
            "KGM_TEST_ADMIN_DSN": db["admin_dsn"],
            "KGM_TEST_OWNER_DSN": db["owner_dsn"],
            "KGM_TEST_LOG_FILE": str(log),
        })
        # Files, not pipes: a full pipe would stall one process while we wait for the other.
        stdout = open(kagent_runtime["logs"] / f"{which}.stdout", "w+")  # noqa: SIM115
        stderr = open(kagent_runtime["logs"] / f"{which}.stderr", "w+")  # noqa: SIM115
        proc = subprocess.Popen([str(kagent_runtime["python"]), str(HERE / "driver.py"), which],
                                env=env, stdout=stdout, stderr=stderr, text=True)
        runs[which] = (proc, log, stdout, stderr)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # no KAGENT_MEMORY_SCOPE_VECTORS: the series' tests read their own copy of the shared
    # vectors (tests/fixtures/, checked against the library's by tests/series/test_patches.py)
    env.pop("KAGENT_MEMORY_SCOPE_VECTORS", None)
    env.update({"PYTHONPATH": str(kagent_runtime["patched"]), "PYTHONDONTWRITEBYTECODE": "1"})
    unit_out = open(kagent_runtime["logs"] / "unit-tests.out", "w+")  # noqa: SIM115
    unit = subprocess.Popen(
        [str(kagent_runtime["python"]), "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(kagent_runtime["tests"]), str(kagent_runtime["tests"])],
        cwd=kagent_runtime["tests"], env=env, stdout=unit_out, stderr=subprocess.STDOUT, text=True)
    out = {}
    try:
        for which, (proc, log, stdout_file, stderr_file) in runs.items():
            proc.wait(timeout=DRIVER_TIMEOUT)
            stdout, stderr = _read(stdout_file), _read(stderr_file)
            lines = [line for line in stdout.splitlines() if line.startswith("KGM-REPORT ")]
            assert lines, (f"{which} driver printed no report (exit {proc.returncode}):\n"
                           f"{stderr[-4000:]}")
            report = json.loads(lines[-1].removeprefix("KGM-REPORT "))
            assert "driver_error" not in report, f"{which} driver failed:\n{report['driver_error']}"
            report["log_file"] = str(log)
            out[which] = report
        unit.wait(timeout=DRIVER_TIMEOUT)
    finally:  # never leave a driver running behind a failed assertion or a timeout
        for proc in [unit, *(run[0] for run in runs.values())]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    unit_output = _read(unit_out)
    out["unit_tests"] = {"returncode": unit.returncode, "output": unit_output,
                         "files": sorted(p.name for p in kagent_runtime["tests"].glob("test_*.py"))}
    assert out["patched"]["memory_service_file"].startswith(str(kagent_runtime["patched"]))
    assert out["unpatched"]["memory_service_file"].startswith(str(kagent_runtime["unpatched"]))
    assert out["legacy"]["memory_service_file"].startswith(str(kagent_runtime["patched"]))
    assert out["dim1024"]["memory_service_file"].startswith(str(kagent_runtime["patched"]))
    assert out["otel"]["memory_service_file"].startswith(str(kagent_runtime["patched"]))
    return out


@pytest.fixture(scope="module")
def compiled_report(kagent_runtime, postgresql_proc) -> dict:
    """The patched runtime against the patched kagent controller compiled from the Go series
    (tests/support/go_controller.py), on a database of its own: the same driver, the same gates."""
    return _compiled_run(kagent_runtime, postgresql_proc, "patched")


@pytest.fixture(scope="module")
def compiled_dimension_report(kagent_runtime, postgresql_proc) -> dict:
    """The ``dim1024`` scenario against the compiled controller, as its Agent kagent/bge-agent
    (``memory.embeddingDimension: 1024`` in the overlay): the bridge grants on ``/consent``."""
    return _compiled_run(kagent_runtime, postgresql_proc, "dim1024", agent="bge-agent")


def _compiled_run(kagent_runtime, postgresql_proc, runtime: str, agent: str | None = None
                  ) -> dict:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from support.go_controller import Unavailable, serve, service_account_token

    from kagent_governed_memory.dev import OPERATOR_ROLE
    from kagent_governed_memory.scope import private_key_pem, public_key_pem

    name = f"g_{uuid.uuid4().hex[:16]}"
    base = make_conninfo(host=postgresql_proc.host, port=postgresql_proc.port,
                         user=postgresql_proc.user, dbname="postgres")
    prepare_app_database(base, name, template=postgresql_proc.template_dbname)
    dsn = {"dsn": make_conninfo(base, user=APP_ROLE, dbname=name),
           "owner_dsn": make_conninfo(base, user=OWNER_ROLE, dbname=name),
           "admin_dsn": make_conninfo(base, dbname=name),
           "operator_dsn": make_conninfo(base, user=OPERATOR_ROLE, dbname=name)}
    bridge = Ed25519PrivateKey.generate()
    import asyncio

    from kagent_governed_memory.store import migrate
    asyncio.run(migrate(dsn["owner_dsn"], local_server="example.org"))
    server_env = {"KAGENT_MEMORY_SCOPE_PUBLIC_KEYS": public_key_pem(bridge).decode(),
                  "KAGENT_MEMORY_SCOPE_ISSUER": "https://bridge.example.org"}
    log = kagent_runtime["logs"] / f"{runtime}-compiled.log"
    try:
        with serve(dsn["operator_dsn"], env=server_env,
                   log=kagent_runtime["logs"] / f"controller-{runtime}.log") as url:
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
            env.update({
                "PYTHONPATH": os.pathsep.join([str(kagent_runtime["patched"]), str(REPO),
                                               str(HERE)]),
                "PYTHONDONTWRITEBYTECODE": "1",
                "KGM_TEST_DSN": dsn["dsn"], "KGM_TEST_ADMIN_DSN": dsn["admin_dsn"],
                "KGM_TEST_OWNER_DSN": dsn["owner_dsn"], "KGM_TEST_LOG_FILE": str(log),
                "KGM_TEST_CONTROLLER_URL": url,
                "KGM_TEST_BRIDGE_KEY": private_key_pem(bridge).decode(),
                **({"KGM_TEST_AGENT": agent} if agent else {}),
                # the governed memory token file's content, as the compiled server knows it
                "KGM_TEST_MEMORY_TOKEN": service_account_token("kagent", agent or "my-agent"),
            })
            done = subprocess.run([str(kagent_runtime["python"]), str(HERE / "driver.py"),
                                   runtime], env=env, capture_output=True, text=True,
                                  timeout=DRIVER_TIMEOUT, check=False)
    except Unavailable as exc:
        pytest.skip(f"GO VERIFICATION NOT RUN: the compiled controller is unavailable ({exc})")
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("KGM-REPORT ")]
    assert lines, f"compiled-controller driver printed no report:\n{done.stderr[-4000:]}"
    report = json.loads(lines[-1].removeprefix("KGM-REPORT "))
    assert "driver_error" not in report, report.get("driver_error")
    assert report["controller"] == "compiled"
    report["log_file"] = str(log)
    return report


# the compiled runs start the controller stand-in compiled from the Go series
COMPILED = pytest.param("compiled", marks=pytest.mark.controller)


@pytest.fixture(params=["stand-in", COMPILED])
def patched(request, reports) -> dict:
    """The patched runtime's report: against the Python stand-in controller, and against the
    compiled Go controller (reported as NOT RUN where Go or kagent's source is missing)."""
    if request.param == "stand-in":
        return reports["patched"]
    return request.getfixturevalue("compiled_report")


def _read(f) -> str:
    with f:
        f.seek(0)
        return f.read()


def _reason(reply: str) -> str | None:
    marker = "(reason: "
    return reply.split(marker, 1)[1].split(")", 1)[0] if marker in reply else None


def _no_memories(reply: str) -> bool:
    """The governed load_memory's answer when it found nothing: a count and no ids."""
    return reply == 'tool said {"result": "{\\"count\\": 0, \\"ids\\": []}"}'


# -- the patched runtime proves the gates ---------------------------------------------------------

def test_patched_no_collection_before_consent(patched):
    """C2/A1: a valid assertion but no consent -- no save, no search, no summary, no embedding."""
    before = patched["before_consent"]
    assert before["embedding_calls"] == 0
    assert before["summariser_calls"] == 0
    assert before["rows"] == 0 and before["legacy_items"] == 0
    assert set(before["controller_calls"]) == {"generation"}  # no admit/search/entries
    assert _reason(before["replies"][1]) == "consent_required"  # save_memory says so
    assert _no_memories(before["replies"][2])


def test_patched_per_request_disable_gate(patched):
    """S4-S6: after consent, a request without a valid assertion for exactly this agent, a
    local principal and the local audience gets no memory, and no embedding call is made."""
    r = patched
    expected = {
        "no_header": "assertion_missing",
        "forged": "assertion_invalid",
        "expired": "assertion_expired",
        "other_agent": "agent_mismatch",
        "other_context": "context_mismatch",
        "audience_remote": "audience_denied",
        "bridged_origin": "federation_denied",
        "remote_principal": "remote_server_denied",
        "replayed": "assertion_replayed",  # the controller's ledger: each jti once
    }
    got = {name: _reason(v["save"]) for name, v in r["gate"].items()}
    assert got == expected
    assert r["replay_first_use"].startswith("tool said")  # the first use did reach memory
    assert all(_no_memories(v["load"]) for v in r["gate"].values())
    assert r["gate_embedding_calls"] == 0 and r["gate_rows"] == 0


def test_patched_consented_save_and_load(patched):
    """Saved facts are recalled into the model's request; load_memory's own answer (a session
    event) carries a count and opaque ids only."""
    c = patched["consented"]
    assert all("Successfully saved" in s for s in c["saved"])
    assert "I like green tea" in c["loaded_request"] and "My cat is called Miso" in c["loaded_request"]
    assert "green tea" not in c["loaded"] and "Miso" not in c["loaded"]
    assert '\\"count\\": ' in c["loaded"] and '\\"ids\\": [\\"' in c["loaded"]


def test_patched_per_entry_forget(patched):
    """B5/U3: ``delete_memory(memory_id=...)`` erases exactly that entry, verified unreadable."""
    f = patched["forget"]
    assert f["tea_id"] and f["cat_id"] and f["forget_calls"] == 1
    assert f["tea_rows"] == 0 and f["cat_rows"] == 1
    assert "green tea" not in f["load_after_request"] and "green tea" not in f["load_after"]


def test_patched_read_time_expiry(patched):
    """B2: an expired row (planted through the superuser path) is unreadable by load_memory and
    by the prefetch, while a live row planted the same way is found."""
    c = patched["consented"]
    assert c["live_marker"] in c["durian_request"]
    assert c["expired_marker"] not in c["durian_request"]
    assert c["live_marker"] not in c["durian"]  # recalled into the request, not the answer
    assert c["prefetch_instruction_has_live"] is True
    assert c["prefetch_instruction_has_expired"] is False


def test_patched_prefetch_is_bounded(patched):
    """A2: a first message of twelve sentences is prefetched with one embedding call of at most
    eight sub-queries and one ``/search`` request carrying them as ``vectors``."""
    assert patched["consented"]["prefetch_embedding_items"] == [8]
    assert patched["consented"]["prefetch_search_calls"] == 1


def test_patched_first_turn_is_two_controller_calls_and_a_later_turn_one(patched):
    """Issue 29: a session's first turn redeems the assertion and admits its prefetch in one
    ``/generation`` call, then one ``/search`` (no ``/admit``); a later turn of the session is
    its one ``/generation`` (the capture).  The unpatched-controller fallback (a separate
    ``/admit``) is kagent-adk's own unit test."""
    c = patched["consented"]
    assert c["first_turn_calls"] == {"generation": 1, "search": 1}, c["first_turn_calls"]
    assert c["later_turn_calls"] == {"generation": 1}, c["later_turn_calls"]


def test_patched_autosave_summarises_eligible_turns_and_never_the_raw_transcript(patched):
    """C6 + the summariser: pre-consent turns are never summarised; one summary per five
    eligible turns; a malformed summary or a model failure stores nothing (upstream stores the
    raw transcript); facts over 512 bytes are dropped."""
    a = patched["autosave"]
    assert a["summariser_calls_per_turn"] == [0, 0, 0, 0, 1]
    assert a["prompts"] == 3
    assert a["prompt1_has_preconsent"] is False and a["prompt1_has_window1"] is True
    assert a["prompt2_has_window1"] is False and a["prompt2_has_window2"] is True
    assert a["rows_after_malformed"] == a["rows_before"] and a["transcript_rows"] == 0
    assert a["rows_after_valid"] == a["rows_before"] + 1 and a["learned_rows"] == 1
    assert a["rows_after_model_failure"] == a["rows_after_valid"]


def test_patched_admission_before_embedding_and_honest_failures(patched):
    r = patched
    # the scope's registered policy (the prototype's burst of three explicit operations),
    # whichever controller serves: the database reads it, no controller passes one
    assert _reason(r["admission"]["save"]) == "rate_limited"
    assert _no_memories(r["admission"]["load"])
    assert r["admission"]["embedding_calls"] == 0 and r["admission"]["rows"] == 0
    assert _reason(r["embedding_failure"]["save"]) == "embedding_failed"
    assert _no_memories(r["embedding_failure"]["load"])


def test_patched_assertion_stays_a_per_request_credential(patched):
    r = patched
    assert r["assertion"]["in_session_state"] is False
    assert r["assertion"]["unverified_controller_calls"] == 0  # every governed call carried it
    assert r["background_tasks_tracked"] is True


def test_patched_no_sentinel_in_logs(patched):
    """B6: with the root logger at DEBUG, no sentinel from a load_memory query, a malformed
    summary, a model error or an embedding-provider error body (nor an assertion token)
    appears in any log line -- except the OpenAI SDK's own DEBUG request dump."""
    r = patched
    assert r["log_lines"] > 1000  # DEBUG logging really was on
    offending = {name: sorted(set(where) - THIRD_PARTY_DEBUG_DUMPS)
                 for name, where in r["leaks"].items()}
    assert all(not where for where in offending.values()), (offending, r["log_file"])


def test_patched_recall_is_injected_never_persisted(patched):
    """Inject, don't persist (issue 23 item 1): a fact recalled by load_memory reaches the
    model's next request of that turn -- and no row of kagent's session, event or task tables
    (written by kagent's own KAgentSessionService and KAgentTaskStore) carries it, so a forget
    or a withdrawal in the scoped store leaves no copy behind."""
    r = patched["recall"]
    assert r["in_scoped_store"] == 1
    assert r["fact_in_model_request"] is True
    assert r["fact_in_first_request"] is False  # injected after the recall, for this turn
    assert r["fact_in_reply"] is False  # (the scripted model does not repeat it)
    assert '\\"count\\": 1' in r["reply"]
    assert r["persisted_rows"]["event"] > 0 and r["persisted_rows"]["task"] > 0
    assert r["persisted"] == {"session": 0, "event": 0, "task": 0}, r


def test_patched_stalled_controller_one_generation_per_turn(patched):
    """A failed redemption is final for its request (issue 23 item 6): against a governed
    listener that never answers, a turn that prefetches, calls save_memory and runs the
    auto-save callback makes ONE /generation call; past the (injected, short) deadline it
    answers without memory and says why, content-free."""
    s = patched["stalled"]
    assert s["calls"] == {"generation": 1}
    assert _reason(s["reply"]) == "memory_deadline_exceeded"
    assert s["deadline_logged"] is True


@pytest.fixture(params=["stand-in", COMPILED])
def dimension_report(request, reports) -> dict:
    if request.param == "stand-in":
        return reports["dim1024"]
    return request.getfixturevalue("compiled_dimension_report")


def test_patched_embedding_dimension_follows_the_consent(dimension_report):
    """Issue 23 item 5: ``memory.embedding_dimension: 1024`` -- the provider is asked for 1024,
    a 1024-d fact is saved under a consent recorded at 1024 (on the compiled controller: the
    bridge's ``/consent`` for an Agent whose ``memory.embeddingDimension`` is 1024) and recalled
    into the model's request; a provider answering 768 is refused
    (``embedding_dimension_mismatch``), never fitted, and nothing is stored or recalled for that
    request."""
    d = dimension_report["dimension"]
    assert "Successfully saved" in d["saved"]
    assert d["fact_in_model_request"] is True and '\\"count\\": 1' in d["loaded"]
    assert d["stored_dims"] == [1024] and d["consented_dims"] == [1024]
    assert d["requested"] == [1024]
    assert _reason(d["mismatch"]["save"]) == "embedding_dimension_mismatch"
    assert _no_memories(d["mismatch"]["load"])
    assert d["mismatch"]["rows"] == 0
    offending = {name: sorted(set(where) - THIRD_PARTY_DEBUG_DUMPS)
                 for name, where in dimension_report["leaks"].items()}
    assert all(not where for where in offending.values()), offending


def test_patched_no_memory_content_in_spans_or_log_records(reports):
    """Issue 23 item 2: with the OpenTelemetry SDK on as kagent-core's configure_tracing sets
    it up (tracing, GenAI log events from the OpenAI instrumentation, httpx instrumented) and a
    LoggingHandler bridging Python logs, a sentinel fact saved and recalled into the model's
    request appears in no span attribute, span event or status and in no log record. The
    governed runtime switched google-adk's and Traceloop's content capture off; an operator
    switching capture on gets no memory (``span_content_capture``)."""
    o = reports["otel"]["otel"]
    assert o["capture_env"]["ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS"] == "false"
    assert o["capture_env"]["TRACELOOP_TRACE_CONTENT"] == "false"
    assert "Successfully saved" in o["saved"] and o["in_scoped_store"] == 1
    assert o["recalled_into_request"] is True and '\\"count\\": 1' in o["loaded"]
    assert o["spans"] > 20 and {"call_llm", "execute_tool load_memory"} <= set(o["span_names"]), o
    assert o["log_records"] > 100  # the Python log bridge at DEBUG
    assert o["span_hits"] == [] and o["log_hits"] == [], (o["span_hits"], o["log_hits"])
    assert _reason(o["capture_on"]["save"]) == "span_content_capture"
    assert _no_memories(o["capture_on"]["load"])


def test_patched_meters_memory_work_with_bounded_labels(reports):
    """Issue 23 item 4 (runtime): aggregate OpenTelemetry counters (kagent.memory.*, a meter of
    their own, apart from the chat's token metrics) for embedding, save and retrieval and their
    outcomes; labels only from closed sets, no identifier or content."""
    o = reports["otel"]["otel"]
    points = o["metric_points"]
    assert points and all(p["scope"] == "kagent.adk.governed_memory" for p in points)
    assert o["metric_labels_have_content"] is False
    ops = {(p["attributes"]["operation"], p["attributes"]["outcome"]): p["value"]
           for p in points if p["name"] == "kagent.memory.operations"}
    assert ops[("save", "ok")] == 1 and ops[("retrieval", "ok")] >= 2  # prefetch + load_memory
    assert ops[("embedding", "ok")] >= 3
    assert ops[("save", "span_content_capture")] == 1
    assert ops[("retrieval", "span_content_capture")] >= 1  # the prefetch and load_memory
    for p in points:
        assert set(p["attributes"]) <= {"operation", "outcome"}
        assert all(len(v) <= 64 and v.replace("_", "").isalnum() for v in p["attributes"].values())


# -- the unpatched runtime fails them ------------------------------------------------------------

def test_unpatched_runtime_fails_the_gates(reports):
    """Upstream 0.9.11 under the same driver: it collects without any consent, stores the raw
    transcript when the summary is malformed, and logs the query and the malformed summary."""
    u = reports["unpatched"]
    before = u["before_consent"]
    assert before["embedding_calls"] > 0 and before["summariser_calls"] == 1
    assert before["raw_transcript_stored"] is True
    assert "Successfully saved" in before["replies"][1]
    leaked = {name: sorted(set(where) - THIRD_PARTY_DEBUG_DUMPS)
              for name, where in u["leaks"].items()}
    assert any(w.startswith("kagent") for w in leaked["query"]), leaked
    assert any(w.startswith("kagent") for w in leaked["summary"]), leaked


def test_series_unit_tests_pass_against_the_installed_runtime(reports):
    """The unit tests the series adds upstream (new files in tests/unittests/), run with
    the kagent venv's pytest against the patched copy."""
    unit = reports["unit_tests"]
    assert unit["files"] == ["test_embedding_logs.py", "test_governed_memory_autosave.py",
                             "test_governed_memory_service.py", "test_governed_memory_telemetry.py",
                             "test_governed_memory_token.py", "test_governed_memory_tools.py",
                             "test_memory_scope.py"]
    assert unit["returncode"] == 0, unit["output"][-6000:]
    assert " passed" in unit["output"] and "failed" not in unit["output"]


def test_patched_runtime_authenticates_as_its_agent(patched):
    """Every governed call carries the pod's kagent token and X-Agent-Name (kagent's
    KAgentTokenService): without them the controller answers 401 ``unauthenticated``; with
    them, a scope of another agent is refused 403 ``agent_mismatch``; the runtime's own calls
    (all the scenarios above) were never refused for authentication."""
    auth = patched["auth"]
    assert auth["no_token"] == {"status": 401, "body": {"error": "unauthenticated"}}
    assert auth["other_agent"] == {"status": 403, "body": {"error": "agent_mismatch"}}
    if patched["refused_auth"] is not None:  # the stand-in counts what it refused
        assert patched["refused_auth"] == {"unauthenticated": 1, "agent_mismatch": 1}


def test_legacy_agent_on_the_patched_runtime_behaves_like_upstream(reports):
    """A legacy Agent (config.json memory without ``mode``) on the patched runtime: kagent's
    own KagentMemoryService, upstream's tool texts, upstream's /api/memories calls -- the same
    replies and the same controller calls as the unpatched 0.9.11 runtime, no governed call."""
    legacy, upstream = reports["legacy"], reports["unpatched"]
    assert legacy["legacy"]["service"] == "KagentMemoryService"
    assert legacy["legacy"]["service_module"] == "kagent.adk._memory_service"
    assert legacy["legacy"]["saved"] == "tool said {\"result\": \"Successfully saved information to long-term memory.\"}"
    assert legacy["legacy"] == upstream["legacy"]
    assert legacy["legacy"]["governed_calls"] == 0
    assert legacy["legacy"]["loaded_has_fact"] is True
    assert legacy["before_consent"]["replies"] == upstream["before_consent"]["replies"]
    for field in ("controller_calls", "summariser_calls", "legacy_items", "raw_transcript_stored"):
        assert legacy["before_consent"][field] == upstream["before_consent"][field], field
