"""The ``helm`` step of ``verify_main.py`` (``scripts/series helm``): kagent's ``make
helm-test`` half that needs no network, on the tree with every patch applied in order.

- ``helm unittest helm/kagent`` (kagent's own suites and the series'), helm v3.18.0 (kagent's CI
  pin) and helm-unittest v1.1.2, as ``tests/series/test_chart.py`` builds them into
  ``~/.cache/kagent-governed-memory/``;
- ``helm template`` of the default values and a few other sets: byte-identical to ``BASE``'s
  (governed memory off renders what it rendered before).

The chart's remote dependencies cannot be pulled here: the copy checked gets a Chart.yaml
without them, except ``kagent-tools`` 0.2.1 (its suite needs it), built from the source of
kagent-dev/tools at ``v0.2.1`` (``$KGM_KAGENT_TOOLS_SRC``, else this workplace's mirror). Without
helm, the plugin or that source the step says NOT RUN.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .inplace import run

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kagent-governed-memory"
HELM = CACHE / "helm-v3.18.0" / "helm"
PLUGINS = CACHE / "helm-plugins-unittest-v1.1.2"
TOOLS_TAG = "v0.2.1"
RENDERS = ([], ["--set", "controller.metrics.enabled=true"],
           ["--set", "providers.default=openAI", "--set", "providers.openAI.apiKey=k"],
           ["--set", "database.postgres.vectorEnabled=true", "--set", "rbac.namespaces[0]=kagent"])


def tools_src() -> Path | None:
    for cand in (os.environ.get("KGM_KAGENT_TOOLS_SRC"), "/work/.mirror/kagent-dev+tools/repo"):
        if cand and Path(cand).exists():
            return Path(cand)
    return None


def _chart(chart: Path, dest: Path, tools: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(chart, dest)
    (dest / "Chart-template.yaml").unlink(missing_ok=True)
    (dest / "charts").mkdir(exist_ok=True)
    archive = subprocess.run(["git", "-C", str(tools), "archive", TOOLS_TAG, "helm/kagent-tools"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest / "charts"), "--strip-components=1"],
                   input=archive, check=True)
    sub = dest / "charts" / "kagent-tools"
    (sub / "Chart.yaml").write_text((sub / "Chart-template.yaml").read_text()
                                    .replace("${VERSION}", TOOLS_TAG[1:]))
    (sub / "Chart-template.yaml").unlink()
    shutil.rmtree(sub / "tests", ignore_errors=True)
    (dest / "Chart.yaml").write_text(
        "apiVersion: v2\nname: kagent\ntype: application\nversion: 0.0.0-verify\n"
        "dependencies:\n  - name: kagent-tools\n    version: 0.2.1\n"
        "    repository: file://charts/kagent-tools\n    condition: kagent-tools.enabled\n")
    return dest


def verify(tree: Path, src: Path, base: str, work: Path) -> list[tuple[str, str, float, str]]:
    tools = tools_src()
    if not (HELM.exists() and (PLUGINS / "unittest" / "plugin.yaml").exists()) or tools is None:
        return [("NOT RUN", "HELM VERIFICATION NOT RUN: helm v3.18.0, helm-unittest v1.1.2 "
                 f"(tests/series/test_chart.py builds them) or kagent-dev/tools {TOOLS_TAG} missing",
                 0.0, "")]
    chart = _chart(tree / "helm" / "kagent", work / "helm" / "patched" / "kagent", tools)
    code, out, secs = run([str(HELM), "unittest", str(chart)],
                          env={**os.environ, "HELM_PLUGINS": str(PLUGINS)})
    counts = " ".join(x.strip() for x in out.splitlines() if x.startswith(("Test Suites", "Tests:")))
    found = [("PASS" if code == 0 else "FAIL", f"helm unittest helm/kagent ({counts})", secs, out)]
    base_dir = work / "helm" / "base-src"
    shutil.rmtree(base_dir, ignore_errors=True)
    base_dir.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(src), "archive", base, "helm/kagent"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(base_dir)], input=archive, check=True)
    base_chart = _chart(base_dir / "helm" / "kagent", work / "helm" / "base" / "kagent", tools)
    shutil.rmtree(chart / "tests")
    shutil.rmtree(base_chart / "tests", ignore_errors=True)
    same, total, diff = 0, 0.0, ""
    for args in RENDERS:
        a = run([str(HELM), "template", "kagent", str(base_chart), "-n", "kagent", *args])
        b = run([str(HELM), "template", "kagent", str(chart), "-n", "kagent", *args])
        total += a[2] + b[2]
        if a[0] == 0 and b[0] == 0 and a[1] == b[1]:
            same += 1
        else:
            diff += f"differs or fails: {args}\n"
    found.append(("PASS" if same == len(RENDERS) else "FAIL",
                  f"helm template with governed memory off byte-identical to BASE's "
                  f"({same}/{len(RENDERS)} value sets)", total, diff))
    return found
