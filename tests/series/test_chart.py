"""The kagent chart and CRDs of the patched tree: default render unchanged, governed memory
opt-in renders what it should, and the sample validates against the patched CRD schemas.

The patched tree is ``$KGM_KAGENT_PATCHED_TREE`` (a kagent checkout with the series committed)
or, by default, v0.9.11 from ``tests/go_controller.kagent_source()`` with every patch in
``patches/kagent-v0.9.11/`` applied by ``git am`` (cached per hash of the patches).  Helm is a
pinned v3 built once with ``go install`` into ``~/.cache/kagent-governed-memory/``; the schema
check is ``tests/series/go_crdcheck/main.go`` built inside the kagent module (its pinned
apiextensions-apiserver: structural defaulting, OpenAPI validation and the CEL rules, as
kube-apiserver admits).  Without Go or the kagent source the tests skip with a loud NOT RUN.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from support import go_controller

# the patch series on kagent's tree: helm and the CRD checker built with Go
pytestmark = pytest.mark.series

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "samples" / "governed-memory"
CHECKER = REPO / "tests" / "series" / "go_crdcheck" / "main.go"
HELM_VERSION = "v3.18.0"  # kagent's CI (.github/workflows/ci.yaml, azure/setup-helm)
# kagent's CI runs `helm plugin install https://github.com/helm-unittest/helm-unittest` (no
# version: the latest release, whose install hook downloads that release's binary).  GitHub is
# not needed here: the same release is built from the Go module proxy.
HELM_UNITTEST_VERSION = "v1.1.2"
HELM_UNITTEST_MODULE = "github.com/helm-unittest/helm-unittest"
# The helm-unittest suites the series adds (besides kagent's own in helm/kagent/tests/).
SERIES_SUITES = {"controller-networkpolicy_test.yaml", "governed-memory_test.yaml",
                 "governed-memory-rbac_test.yaml", "governed-memory-validation_test.yaml"}


def _cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    root = base / "kagent-governed-memory"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False,
                          env={**os.environ, **(env or {})})
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed:\n{done.stderr[-4000:]}")
    return done


def _helm(go: str) -> Path:
    bindir = _cache() / f"helm-{HELM_VERSION}"
    helm = bindir / "helm"
    with open(_cache() / ".helm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not helm.exists():
            _run([go, "install", f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"],
                 env={"GOBIN": str(bindir), "GOFLAGS": "-mod=mod"})
    return helm


def _helm_plugins(go: str) -> Path:
    """A HELM_PLUGINS directory holding helm-unittest, built from the module proxy: the
    plugin is its ``plugin.yaml`` plus the binary its ``platformCommand`` names."""
    root = _cache() / f"helm-plugins-unittest-{HELM_UNITTEST_VERSION}"
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    binary = root / "unittest" / f"untt-linux-{arch}"
    with open(_cache() / ".helm-unittest.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            info = json.loads(_run([go, "mod", "download", "-json",
                                    f"{HELM_UNITTEST_MODULE}@{HELM_UNITTEST_VERSION}"]).stdout)
            with tempfile.TemporaryDirectory() as tmp:
                # a writable copy: the module's go.mod has replace directives, so `go install
                # module@version` refuses it; inside its own directory it builds as released
                src = Path(tmp) / "src"
                shutil.copytree(info["Dir"], src)
                for path in src.rglob("*"):
                    path.chmod(path.stat().st_mode | 0o200)
                (root / "unittest").mkdir(parents=True, exist_ok=True)
                shutil.copy(src / "plugin.yaml", root / "unittest" / "plugin.yaml")
                _run([go, "build", "-o", str(binary) + ".tmp", "./cmd/helm-unittest"], src)
                os.rename(str(binary) + ".tmp", binary)
    return root


def _patched_tree(go: str) -> Path:
    given = os.environ.get("KGM_KAGENT_PATCHED_TREE")
    if given:
        return Path(given)
    src = go_controller.kagent_source()
    patches = sorted(go_controller.PATCHES.glob("*.patch"))
    h = hashlib.sha256()
    for p in patches:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    root = _cache() / "chart-tree"
    root.mkdir(parents=True, exist_ok=True)
    final = root / h.hexdigest()[:16]
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / ".done").exists():
            return final / "kagent"
        work = Path(tempfile.mkdtemp(dir=root, prefix="build-"))
        try:
            tree = work / "kagent"
            _run(["git", "clone", "-q", "--no-checkout", str(src), str(tree)])
            _run(["git", "checkout", "-q", go_controller.TAG], tree)
            _run(["git", "-c", "user.name=verify", "-c", "user.email=verify@localhost", "am", "-q",
                  *map(str, patches)], tree)
            (work / ".done").write_text("")
            if final.exists():
                shutil.rmtree(final)
            work.rename(final)
        finally:
            if work.exists():
                shutil.rmtree(work, ignore_errors=True)
    return final / "kagent"


def _checker(go: str, tree: Path) -> Path:
    h = hashlib.sha256(CHECKER.read_bytes())
    h.update((tree / "go" / "go.mod").read_bytes())
    h.update(_run([go, "version"]).stdout.encode())
    out = _cache() / "crdcheck" / h.hexdigest()[:16] / "kgm-crdcheck"
    with open(_cache() / ".crdcheck.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.exists():
            with tempfile.TemporaryDirectory() as tmp:
                # A copy of go/ keeps the (possibly shared) tree untouched.
                gosrc = Path(tmp) / "go"
                shutil.copytree(tree / "go", gosrc, ignore=shutil.ignore_patterns("bin", ".git"))
                (gosrc / "kgm-crdcheck").mkdir()
                shutil.copy(CHECKER, gosrc / "kgm-crdcheck" / "main.go")
                out.parent.mkdir(parents=True, exist_ok=True)
                _run([go, "build", "-mod=mod", "-o", str(out), "./kgm-crdcheck"], gosrc)
    return out


class Env:
    def __init__(self) -> None:
        go = go_controller.go_binary()
        self.tree = _patched_tree(go)
        self.helm = _helm(go)
        self.go = go
        self.checker = _checker(go, self.tree)
        self.tmp = Path(tempfile.mkdtemp(prefix="kgm-chart-"))
        self.base_chart = self._chart("base", None)
        self.chart = self._chart("patched", self.tree / "helm" / "kagent")

    def unittest_chart(self, name: str) -> Path:
        """The patched chart with its helm-unittest suites (no remote subchart dependencies)."""
        dest = self.tmp / name / "kagent"
        shutil.copytree(self.tree / "helm" / "kagent", dest)
        (dest / "Chart-template.yaml").unlink(missing_ok=True)
        (dest / "Chart.yaml").write_text(
            "apiVersion: v2\nname: kagent\ntype: application\nversion: 0.9.11\n")
        return dest

    def unittest(self, chart: Path) -> subprocess.CompletedProcess[str]:
        return _run([str(self.helm), "unittest", str(chart)],
                    env={"HELM_PLUGINS": str(_helm_plugins(self.go))}, check=False)

    def _chart(self, name: str, src: Path | None) -> Path:
        """The kagent chart without its remote subchart dependencies (unchanged by the series)."""
        dest = self.tmp / name / "kagent"
        if src is None:
            archive = self.tmp / "base.tar"
            _run(["git", "-C", str(go_controller.kagent_source()), "archive", "-o", str(archive),
                  go_controller.TAG, "helm/kagent"])
            (self.tmp / name).mkdir(parents=True)
            _run(["tar", "-xf", str(archive), "-C", str(self.tmp / name)])
            shutil.move(str(self.tmp / name / "helm" / "kagent"), dest)
        else:
            shutil.copytree(src, dest)
        shutil.rmtree(dest / "tests", ignore_errors=True)
        (dest / "Chart-template.yaml").unlink(missing_ok=True)
        (dest / "Chart.yaml").write_text(
            "apiVersion: v2\nname: kagent\ntype: application\nversion: 0.9.11\n")
        return dest

    def render(self, chart: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run([str(self.helm), "template", "kagent", str(chart), "--namespace", "kagent",
                     *args], check=check)

    def validate(self, *files: Path) -> list[dict]:
        crds = self.tree / "go" / "api" / "config" / "crd" / "bases"
        done = _run([str(self.checker), "-crds", str(crds), *map(str, files)])
        return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    try:
        made = Env()
    except go_controller.Unavailable as why:
        print(f"\n*** NOT RUN: chart and CRD validation: {why} ***")
        pytest.skip(f"NOT RUN: {why}")
    try:
        yield made
    finally:
        shutil.rmtree(made.tmp, ignore_errors=True)  # the rendered charts: nothing left in TMPDIR


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def _one(docs: list[dict], kind: str, name: str) -> dict:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


@pytest.mark.parametrize("values", [[], ["--set", "controller.metrics.enabled=true"],
                                    ["--set", "ipv6.enabled=true"],
                                    ["--set", "database.postgres.vectorEnabled=true"]])
def test_default_render_is_v0_9_11(env: Env, values: list[str]) -> None:
    base = env.render(env.base_chart, *values).stdout
    assert env.render(env.chart, *values).stdout == base


def test_demo_values_render_governed_memory(env: Env) -> None:
    out = env.render(env.chart, "-f", str(SAMPLE / "values-demo.yaml")).stdout
    docs = _docs(out)
    cm = _one(docs, "ConfigMap", "kagent-controller")["data"]
    assert cm["GOVERNED_MEMORY_ENABLED"] == "true"
    assert cm["GOVERNED_MEMORY_BIND_ADDRESS"] == ":8085"
    assert cm["GOVERNED_MEMORY_LOCAL_SERVER"] == "matrix.demo.internal"
    assert cm["GOVERNED_MEMORY_BRIDGE_SERVICE_ACCOUNTS"] == "matrix/matrix-bridge"
    assert cm["KAGENT_MEMORY_SCOPE_ISSUER"] == "kagent-matrix-bridge"
    assert cm["DATABASE_VECTOR_ENABLED"] == "true"

    svc = _one(docs, "Service", "kagent-controller")
    assert {"name": "governed-memory", "port": 8085, "targetPort": "governed-memory",
            "protocol": "TCP"} in svc["spec"]["ports"]
    ctr = _one(docs, "Deployment", "kagent-controller")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "governed-memory", "containerPort": 8085, "protocol": "TCP"} in ctr["ports"]
    keys = [e for e in ctr["env"] if e["name"] == "KAGENT_MEMORY_SCOPE_PUBLIC_KEYS"]
    assert keys == [{"name": "KAGENT_MEMORY_SCOPE_PUBLIC_KEYS", "valueFrom": {"configMapKeyRef": {
        "name": "governed-memory-demo-scope-keys", "key": "keys.pem"}}}]

    # The controller serves with its own login and never mounts the schema owner's Secret.
    serving = [e for e in ctr["env"] if e["name"] == "GOVERNED_MEMORY_DATABASE_URL"]
    assert serving == [{"name": "GOVERNED_MEMORY_DATABASE_URL", "valueFrom": {"secretKeyRef": {
        "name": "governed-memory-demo-serving-db", "key": "url"}}}]
    deployment = json.dumps(_one(docs, "Deployment", "kagent-controller"))
    assert "governed-memory-demo-owner-db" not in deployment
    assert "--governed-memory-migrate-only" not in deployment

    # The schema owner's Secret is mounted only by the pre-install/pre-upgrade migration Job.
    job = _one(docs, "Job", "kagent-governed-memory-migrate")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    (mig,) = pod["containers"]
    assert mig["image"] == ctr["image"]
    assert "--governed-memory-migrate-only" in mig["args"]
    assert mig["env"] == [{"name": "POSTGRES_DATABASE_URL", "valueFrom": {"secretKeyRef": {
        "name": "governed-memory-demo-owner-db", "key": "url"}}}]
    assert "governed-memory-demo-serving-db" not in json.dumps(job)
    owners = [d["kind"] + "/" + d["metadata"]["name"] for d in docs
              if "governed-memory-demo-owner-db" in json.dumps(d)]
    assert owners == ["Job/kagent-governed-memory-migrate"]

    role = _one(docs, "ClusterRole", "kagent-governed-memory-role")
    assert {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
            "verbs": ["create"]} in role["rules"]
    binding = _one(docs, "ClusterRoleBinding", "kagent-governed-memory-rolebinding")
    assert binding["roleRef"]["name"] == "kagent-governed-memory-role"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kagent-controller",
                                    "namespace": "kagent"}]

    np = _one(docs, "NetworkPolicy", "kagent-controller-governed-memory")["spec"]
    assert np["podSelector"]["matchLabels"] == \
        _one(docs, "Deployment", "kagent-controller")["spec"]["selector"]["matchLabels"]
    governed, others = np["ingress"]
    # named ports: the governed one, and the controller's declared http/metrics ports
    assert governed["ports"] == [{"protocol": "TCP", "port": "governed-memory"}]
    ctr_ports = {p["name"]: p["containerPort"] for p in _one(
        docs, "Deployment", "kagent-controller")["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert ctr_ports["governed-memory"] == 8085
    agents, bridge = governed["from"]
    assert agents["namespaceSelector"] == {}
    # The labels the translator puts on every agent pod (testdata golden outputs).
    assert agents["podSelector"]["matchLabels"] == {
        "app": "kagent", "app.kubernetes.io/managed-by": "kagent",
        "app.kubernetes.io/part-of": "kagent"}
    assert agents["podSelector"]["matchExpressions"] == [{"key": "kagent", "operator": "Exists"}]
    assert bridge == {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "matrix-bridge"}},
                      "namespaceSelector": {"matchLabels": {
                          "kubernetes.io/metadata.name": "matrix"}}}
    # The controller's other declared ports stay open to every source; no port ranges.
    assert "from" not in others
    assert all("endPort" not in p for p in others["ports"])
    assert {p["port"] for p in others["ports"]} == set(ctr_ports) - {"governed-memory"}
    assert {"protocol": "TCP", "port": "http"} in others["ports"]

    nginx = _one(docs, "ConfigMap", "kagent-ui-config")["data"]["nginx.conf"]
    deny = nginx.index("location ^~ /api/memories/governed/ {\n            return 404;")
    assert nginx.index("location = /api/memories/governed {\n            return 404;") < deny
    assert deny < nginx.index("location /api/ {")

    rendered = env.tmp / "demo.yaml"
    rendered.write_text(out)
    results = env.validate(rendered)
    assert len(results) == len(docs)
    assert [r for r in results if r["errors"]] == []


@pytest.mark.parametrize(("unset", "message"), [
    ("governedMemory.localServer", "requires governedMemory.localServer"),
    ("governedMemory.scopeAssertion.issuer", "requires governedMemory.scopeAssertion.issuer"),
    ("governedMemory.scopeAssertion.publicKeysFrom", "publicKeys or governedMemory.scopeAssertion"),
    ("database.postgres.vectorEnabled", "requires database.postgres.vectorEnabled"),
    ("governedMemory.database.servingUrlSecret.name", "requires governedMemory.database.servingUrlSecret"),
    ("governedMemory.migration.databaseUrlSecret.name",
     "requires governedMemory.migration.databaseUrlSecret"),
])
def test_incomplete_governed_values_fail_the_render(env: Env, unset: str, message: str) -> None:
    done = env.render(env.chart, "-f", str(SAMPLE / "values-demo.yaml"), "--set", f"{unset}=null",
                      check=False)
    assert done.returncode != 0
    assert message in done.stderr


def test_sample_validates_against_the_patched_crds(env: Env) -> None:
    results = env.validate(SAMPLE / "agent.yaml")
    assert [(r["kind"], r["errors"]) for r in results] == [
        ("ModelConfig", []), ("ModelConfig", []), ("Agent", [])]
    agent = results[2]["defaulted"]["spec"]["declarative"]
    assert agent["memory"] == {"modelConfig": "governed-memory-demo-embedding", "mode": "governed",
                               "embeddingDimension": 1024}
    assert agent["runtime"] == "python"
    embedding = results[0]["defaulted"]["spec"]
    assert embedding["provider"] == "OpenAI" and "apiKeySecret" not in embedding


def test_byo_sample_validates_and_holds_no_database_credentials(env: Env) -> None:
    path = SAMPLE / "byo-agent.yaml"
    [result] = env.validate(path)
    assert (result["kind"], result["errors"]) == ("Agent", [])
    deployment = result["defaulted"]["spec"]["byo"]["deployment"]
    names = {e["name"] for e in deployment["env"]}
    assert {"KAGENT_MEMORY_URL", "KAGENT_MEMORY_LOCAL_SERVER", "KAGENT_MEMORY_SCOPE_ISSUER",
            "KAGENT_MEMORY_SCOPE_PUBLIC_KEYS"} <= names
    # the governed listener's token: its own audience, where KagentControllerStore reads it
    [volume] = [v for v in deployment["volumes"] if v["name"] == "kagent-governed-memory-token"]
    [source] = volume["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "kagent-governed-memory"
    assert {"name": "kagent-governed-memory-token", "readOnly": True,
            "mountPath": "/var/run/secrets/kagent-governed-memory"} in deployment["volumeMounts"]
    text = path.read_text().lower()
    assert "dsn" not in text and "postgres" not in text and "password" not in text


def _agent(name: str, declarative: dict) -> dict:
    return {"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
            "metadata": {"name": name, "namespace": "kagent"},
            "spec": {"type": "Declarative",
                     "declarative": {"systemMessage": "x", **declarative}}}


CASES = [
    ("governed-ttl", {"memory": {"modelConfig": "e", "mode": "governed", "ttlDays": 7}},
     "ttlDays cannot be set when mode is governed"),
    ("governed-go", {"runtime": "go", "memory": {"modelConfig": "e", "mode": "governed"}},
     "memory.mode governed is not supported with runtime go"),
    ("bad-mode", {"memory": {"modelConfig": "e", "mode": "forever"}},
     'spec.declarative.memory.mode: Unsupported value: "forever"'),
    ("legacy-default", {"memory": {"modelConfig": "e", "ttlDays": 3}}, None),
    ("legacy-go", {"runtime": "go", "memory": {"modelConfig": "e", "mode": "legacy", "ttlDays": 3}},
     None),
    ("governed-python", {"memory": {"modelConfig": "e", "mode": "governed"}}, None),
    ("governed-1024", {"memory": {"modelConfig": "e", "mode": "governed",
                                  "embeddingDimension": 1024}}, None),
    ("legacy-1024", {"memory": {"modelConfig": "e", "embeddingDimension": 1024}},
     "embeddingDimension can only be set when mode is governed"),
    ("governed-huge", {"memory": {"modelConfig": "e", "mode": "governed",
                                  "embeddingDimension": 16001}},
     "spec.declarative.memory.embeddingDimension"),
]


def test_memory_mode_admission_rules(env: Env) -> None:
    path = env.tmp / "cases.yaml"
    path.write_text(yaml.safe_dump_all([_agent(n, d) for n, d, _ in CASES]))
    results = env.validate(path)
    assert [r["name"] for r in results] == [n for n, _, _ in CASES]
    for (name, _, message), r in zip(CASES, results, strict=True):
        if message is None:
            assert r["errors"] == [], name
        else:
            assert len(r["errors"]) == 1 and message in r["errors"][0], (name, r["errors"])
    assert results[3]["defaulted"]["spec"]["declarative"]["memory"]["mode"] == "legacy"


def test_helm_unittest_suites_pass(env: Env) -> None:
    """``helm unittest helm/kagent`` as kagent's CI runs it: kagent's own suites and the
    series' suites for every template it adds or changes."""
    chart = env.unittest_chart("unittest")
    suites = {p.name for p in (chart / "tests").glob("*_test.yaml")}
    assert SERIES_SUITES <= suites, sorted(SERIES_SUITES - suites)
    done = env.unittest(chart)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert f"Test Suites: {len(suites)} passed, {len(suites)} total" in out, out[-3000:]


@pytest.mark.parametrize("template,before,after", [
    ("controller-networkpolicy.yaml", "port: governed-memory", "port: http"),
    ("rbac/governed-memory-clusterrole.yaml", "- create", "- get"),
    ("controller-service.yaml", "targetPort: governed-memory", "targetPort: http"),
    ("controller-configmap.yaml", '"true"\n  GOVERNED_MEMORY_BIND_ADDRESS', '"false"\n  GOVERNED_MEMORY_BIND_ADDRESS'),
])
def test_helm_unittest_suites_catch_a_broken_template(env: Env, template: str, before: str,
                                                       after: str) -> None:
    chart = env.unittest_chart(f"broken-{template.replace('/', '-')}")
    path = chart / "templates" / template
    text = path.read_text()
    assert before in text, (template, before)
    path.write_text(text.replace(before, after, 1))
    done = env.unittest(chart)
    assert done.returncode != 0, (done.stdout + done.stderr)[-3000:]
    assert "FAIL" in done.stdout
