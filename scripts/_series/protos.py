"""Regenerate kagent main's protobuf code with local copies of its pinned buf plugins.

kagent main's `proto/buf.gen.yaml` uses buf remote plugins and `proto/buf.yaml` depends on
the remote module buf.build/googleapis/googleapis; neither can be reached from a machine
that only reaches package registries. This script installs the same plugin versions from
package registries into a cache, then runs the tree's own template through buf with
`local:`/`protoc_builtin:` plugins in a throw-away buf workspace. The kagent tree itself is
only written to in its generated-code folders.

    scripts/series protos kagent --tree KAGENT [--check] [--lint] [--breaking-against REF]

Where each pinned remote plugin comes from (the versions are read from the tree's template
and must equal the pins below, else the script stops with NOT RUN):

  buf v1.72.0 (top-level Makefile BUF_VERSION)  go install github.com/bufbuild/buf/cmd/buf
  buf.build/protocolbuffers/go:v1.36.11         go install (google.golang.org/protobuf)
                                                cmd/protoc-gen-go
  buf.build/grpc/go:v1.6.2                      go install (google.golang.org/grpc)
                                                cmd/protoc-gen-go-grpc
  buf.build/bufbuild/es:v2.13.0                 npm @bufbuild/protoc-gen-es@2.13.0
  buf.build/protocolbuffers/python:v33.5, pyi   protoc 33.5 built-ins (Maven Central
                                                com.google.protobuf:protoc:4.33.5:exe:linux-x86_64)
  buf.build/grpc/python:v1.83.0                 PyPI grpcio-tools==1.83.0, driven as a protoc
                                                plugin; the grpcio version guard that only the
                                                grpcio-tools build prints is removed, as the
                                                standalone grpc_python_plugin never prints it
  buf.build/googleapis/googleapis (buf.lock)    the .proto files of PyPI
                                                googleapis-common-protos==1.75.5 (google/api/*
                                                give output identical to main's; 1.76.0 drops
                                                `[packed = false]` from field_behavior)

Exit codes: 0 ok; 1 --check found drift (or lint/breaking failed); 2 bad usage or an
unexpected template; 3 "NOT RUN: <what is missing>" when a tool cannot be had.
Stdlib only.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

GO_TOOLCHAIN = os.environ.get("KAGENT_PROTOGEN_GOTOOLCHAIN", "go1.27.3")
BUF = ("github.com/bufbuild/buf/cmd/buf", "v1.72.0")
GO_PLUGINS = {
    "protocolbuffers/go": (
        "protoc-gen-go",
        "google.golang.org/protobuf/cmd/protoc-gen-go",
        "v1.36.11",
    ),
    "grpc/go": ("protoc-gen-go-grpc", "google.golang.org/grpc/cmd/protoc-gen-go-grpc", "v1.6.2"),
}
ES = ("bufbuild/es", "@bufbuild/protoc-gen-es", "2.13.0")
PROTOC = ("33.5", "com.google.protobuf:protoc:4.33.5:exe:linux-x86_64")
PROTOC_BUILTINS = {"protocolbuffers/python": "python", "protocolbuffers/pyi": "pyi"}
GRPC_PYTHON = ("grpc/python", "grpcio-tools", "1.83.0")
GOOGLEAPIS = ("buf.build/googleapis/googleapis", "googleapis-common-protos", "1.75.5")
DEFAULT_GENERATED = ["go/api/gen", "ui/src/generated", "python/packages/kagent-proto/src/kagent"]

# The protoc plugin that drives grpcio-tools' grpc_python generator (written into the cache).
GRPC_PYTHON_PLUGIN = r'''
import os
import sys
import tempfile

from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2
from grpc_tools import protoc


def strip_version_check(text):
    """Drop the grpcio version guard that only grpcio-tools' build of the generator emits.

    The standalone grpc_python_plugin (what buf.build/grpc/python runs) is built without a
    grpc_tools version and prints neither `import warnings` nor the guard.
    """
    text = text.replace("import grpc\nimport warnings\n", "import grpc\n", 1)
    start = text.find("GRPC_GENERATED_VERSION = ")
    if start < 0:
        return text
    marker = "grpcio-tools<={GRPC_VERSION}.'\n    )\n"
    end = text.find(marker, start)
    if end < 0:
        raise SystemExit("grpc_python output changed shape; cannot strip the version guard")
    end += len(marker)
    head, tail = text[:start], text[end:]
    if tail.startswith("\n"):
        tail = tail[1:]
    elif not tail and head.endswith("\n\n\n"):
        head = head[:-1]
    return head + tail


def main():
    req = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
    resp = plugin_pb2.CodeGeneratorResponse()
    resp.supported_features = plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL
    with tempfile.TemporaryDirectory() as tmp:
        ds = os.path.join(tmp, "in.binpb")
        with open(ds, "wb") as f:
            f.write(descriptor_pb2.FileDescriptorSet(file=list(req.proto_file)).SerializeToString())
        out = os.path.join(tmp, "out")
        os.mkdir(out)
        arg = "--grpc_python_out=" + (req.parameter + ":" if req.parameter else "") + out
        rc = protoc.main(["protoc", "--descriptor_set_in=" + ds, arg, *req.file_to_generate])
        if rc != 0:
            resp.error = "grpc_tools.protoc exited %d" % rc
        else:
            for root, _, files in os.walk(out):
                for name in sorted(files):
                    p = os.path.join(root, name)
                    with open(p, encoding="utf-8") as f:
                        content = strip_version_check(f.read())
                    rel = os.path.relpath(p, out).replace(os.sep, "/")
                    resp.file.add(name=rel, content=content)
    sys.stdout.buffer.write(resp.SerializeToString())


main()
'''


class NotRun(Exception):
    pass


class BadTemplate(Exception):
    pass


def log(msg: str) -> None:
    print(f"protogen: {msg}", file=sys.stderr, flush=True)


def run(cmd: Sequence[object], **kw: Any) -> subprocess.CompletedProcess[Any]:
    log("$ " + " ".join(str(c) for c in cmd))
    return subprocess.run([str(c) for c in cmd], check=False, **kw)


def tool_output(cmd: Sequence[object]) -> str:
    try:
        p = subprocess.run(
            [str(c) for c in cmd], check=False, capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (p.stdout + p.stderr).strip()


# ---------------------------------------------------------------- tools


class Tools:
    def __init__(self, cache: Path, install: bool):
        self.cache = cache
        self.install = install

    def _need(self, what: str, ok: bool, detail: str = "") -> None:
        if not ok:
            raise NotRun(what + (f" ({detail})" if detail else ""))

    def go_tool(self, name: str, pkg: str, version: str) -> Path:
        gobin = self.cache / "go" / f"{name}@{version}"
        exe = gobin / name
        if exe.exists():
            return exe
        self._need(f"{name} {version}", self.install, "not in cache and --no-install given")
        self._need(f"{name} {version}", shutil.which("go") is not None, "no go command")
        env = dict(os.environ, GOTOOLCHAIN=GO_TOOLCHAIN, GOBIN=str(gobin), GOFLAGS="")
        gobin.mkdir(parents=True, exist_ok=True)
        p = run(["go", "install", f"{pkg}@{version}"], env=env)
        self._need(f"{name} {version}", p.returncode == 0 and exe.exists(), "go install failed")
        return exe

    def buf(self) -> Path:
        exe = self.go_tool("buf", *BUF)
        got = tool_output([exe, "--version"])
        self._need(f"buf {BUF[1]}", got == BUF[1].lstrip("v"), f"buf --version said {got!r}")
        return exe

    def es(self) -> Path:
        _, pkg, version = ES
        prefix = self.cache / "npm" / f"protoc-gen-es@{version}"
        exe = prefix / "node_modules" / ".bin" / "protoc-gen-es"
        if not exe.exists():
            self._need(f"{pkg}@{version}", self.install, "not in cache and --no-install given")
            self._need(f"{pkg}@{version}", shutil.which("npm") is not None, "no npm command")
            prefix.mkdir(parents=True, exist_ok=True)
            p = run(
                [
                    "npm",
                    "install",
                    "--prefix",
                    prefix,
                    "--no-audit",
                    "--no-fund",
                    "--save-exact",
                    f"{pkg}@{version}",
                ]
            )
            self._need(f"{pkg}@{version}", p.returncode == 0 and exe.exists(), "npm install failed")
        got = tool_output([exe, "--version"])
        self._need(f"{pkg}@{version}", version in got, f"--version said {got!r}")
        return exe

    def protoc(self) -> Path:
        version, artifact = PROTOC
        exe = self.cache / f"protoc-{version}" / "protoc"
        if not exe.exists():
            self._need(f"protoc {version}", self.install, "not in cache and --no-install given")
            self._need(
                f"protoc {version} ({artifact})", shutil.which("mvn") is not None, "no mvn command"
            )
            out = exe.parent
            out.mkdir(parents=True, exist_ok=True)
            p = run(
                [
                    "mvn",
                    "-q",
                    "dependency:copy",
                    f"-Dartifact={artifact}",
                    f"-DoutputDirectory={out}",
                    "-Dmdep.stripClassifier=false",
                ]
            )
            found = sorted(out.glob("protoc-*.exe"))
            self._need(
                f"protoc {version} ({artifact})",
                p.returncode == 0 and bool(found),
                "mvn dependency:copy failed",
            )
            found[0].rename(exe)
            exe.chmod(0o755)
        got = tool_output([exe, "--version"])
        self._need(
            f"protoc {version}", got == f"libprotoc {version}", f"protoc --version said {got!r}"
        )
        return exe

    def _venv(self, name: str) -> Path:
        venv = self.cache / name
        py = venv / "bin" / "python"
        if not py.exists():
            self._need(name, self.install, "not in cache and --no-install given")
            p = run([sys.executable, "-m", "venv", venv])
            self._need(name, p.returncode == 0 and py.exists(), "python -m venv failed")
        return py

    def grpc_python(self) -> Path:
        _, pkg, version = GRPC_PYTHON
        py = self._venv(f"grpcio-tools-{version}")
        probe = [
            py,
            "-c",
            "import grpc_tools, importlib.metadata as m; print(m.version('grpcio-tools'))",
        ]
        if tool_output(probe) != version:
            self._need(f"{pkg}=={version}", self.install, "not in cache and --no-install given")
            p = run([py, "-m", "pip", "install", "-q", f"{pkg}=={version}"])
            self._need(
                f"{pkg}=={version}",
                p.returncode == 0 and tool_output(probe) == version,
                "pip install failed",
            )
        script = py.parent.parent / "protoc-gen-grpc_python.py"
        script.write_text(GRPC_PYTHON_PLUGIN.lstrip(), encoding="utf-8")
        exe = py.parent.parent / "protoc-gen-grpc_python"
        exe.write_text(f'#!/bin/sh\nexec "{py}" "{script}"\n', encoding="utf-8")
        exe.chmod(0o755)
        return exe

    def googleapis(self) -> Path:
        _, pkg, version = GOOGLEAPIS
        root = self.cache / f"googleapis-{version}"
        if (root / "google" / "api" / "annotations.proto").exists():
            return root
        self._need(f"{pkg}=={version}", self.install, "not in cache and --no-install given")
        dl = self.cache / "downloads"
        dl.mkdir(parents=True, exist_ok=True)
        p = run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "-d",
                dl,
                f"{pkg}=={version}",
            ]
        )
        wheels = sorted(dl.glob(f"{pkg.replace('-', '_')}-{version}-*.whl"))
        self._need(f"{pkg}=={version}", p.returncode == 0 and bool(wheels), "pip download failed")
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        with zipfile.ZipFile(wheels[0]) as z:
            for n in z.namelist():
                if n.startswith("google/") and n.endswith(".proto"):
                    z.extract(n, tmp)
        tmp.rename(root)
        return root


# ---------------------------------------------------------------- templates


def translate_gen(text: str, tree: Path, plugins: dict[str, tuple[str, Path, str]]) -> str:
    """Turn the tree's buf.gen.yaml (remote plugins, input ".") into a workspace template."""
    out_lines = []
    section = None
    in_excludes = False
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            out_lines.append(line)
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            key = stripped.split(":", 1)[0]
            if key not in ("version", "clean", "inputs", "plugins"):
                raise BadTemplate(f"unsupported top-level key in buf.gen.yaml: {key}")
            if key == "version" and stripped != "version: v2":
                raise BadTemplate("buf.gen.yaml is not version v2")
            section = key
            out_lines.append(line)
            continue
        pad = " " * indent
        if section == "inputs":
            m = re.fullmatch(r"- directory: (\S+)", stripped)
            if m:
                if m.group(1) != ".":
                    raise BadTemplate(f"unsupported input directory {m.group(1)}")
                out_lines.append(f"{pad}- directory: proto")
                in_excludes = False
                continue
            if stripped == "exclude_paths:":
                in_excludes = True
                out_lines.append(line)
                continue
            m = re.fullmatch(r"- (\S+)", stripped)
            if in_excludes and m:
                out_lines.append(f"{pad}- proto/{m.group(1)}")
                continue
            raise BadTemplate(f"unsupported inputs line: {stripped}")
        if section == "plugins":
            m = re.fullmatch(r"- remote: buf\.build/([\w.-]+/[\w.-]+):(\S+)", stripped)
            if m:
                name, version = m.groups()
                if name not in plugins:
                    raise NotRun(f"a local build of remote plugin buf.build/{name}:{version}")
                kind, value, pinned = plugins[name]
                if version.lstrip("v") != pinned.lstrip("v"):
                    raise NotRun(f"buf.build/{name}:{version} (this script pins {pinned})")
                if kind == "local":
                    out_lines.append(f"{pad}- local: {value}")
                else:
                    out_lines.append(f"{pad}- protoc_builtin: {kind}")
                    out_lines.append(f"{pad}  protoc_path: {value}")
                out_lines.append(f"{pad}  strategy: all")
                continue
            m = re.fullmatch(r"out: (\S+)", stripped)
            if m:
                out_lines.append(f"{pad}out: {(tree / 'proto' / m.group(1)).resolve()}")
                continue
            if re.fullmatch(
                r"(opt|types|exclude_types):|include_imports: (true|false)|- \S+", stripped
            ):
                out_lines.append(line)
                continue
            raise BadTemplate(f"unsupported plugins line: {stripped}")
        raise BadTemplate(f"unsupported buf.gen.yaml line: {stripped}")
    return "\n".join(out_lines) + "\n"


def translate_buf_yaml(text: str) -> str:
    """The tree's single-module buf.yaml (deps: googleapis) as a two-module workspace."""
    blocks: dict[str, list[str]] = {}
    key = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(" "):
            key, _, rest = line.partition(":")
            blocks[key] = [rest.strip()] if rest.strip() else []
        elif not key:
            raise BadTemplate("proto/buf.yaml starts with an indented line")
        else:
            blocks.setdefault(key, []).append(line)
    if blocks.get("version") != ["v2"]:
        raise BadTemplate("proto/buf.yaml is not version v2")
    modules = [l.strip() for l in blocks.get("modules", [])]
    if modules != ["- path: ."]:
        raise BadTemplate(f"unsupported modules in proto/buf.yaml: {modules}")
    deps = [l.strip() for l in blocks.get("deps", [])]
    extra = [d for d in deps if d != f"- {GOOGLEAPIS[0]}"]
    if extra:
        raise NotRun(f"local copies of buf deps {extra}")
    unknown = set(blocks) - {"version", "modules", "deps", "lint", "breaking"}
    if unknown:
        raise BadTemplate(f"unsupported keys in proto/buf.yaml: {sorted(unknown)}")
    out = ["version: v2", "modules:", "  - path: proto"]
    for k in ("lint", "breaking"):
        if k not in blocks:
            continue
        out.append(f"    {k}:")
        sub = None
        for l in blocks[k]:
            s = l.strip()
            ind = len(l) - len(l.lstrip())
            if s.endswith(":"):
                sub = s[:-1]
            elif sub in ("ignore",) and s.startswith("- "):
                s = f"- proto/{s[2:]}"
            out.append("    " + " " * ind + s)
    out.append("  - path: googleapis")
    return "\n".join(out) + "\n"


def make_workspace(ws: Path, proto_dir: Path, googleapis: Path) -> None:
    (ws / "proto").mkdir(parents=True)
    for src in sorted(proto_dir.rglob("*.proto")):
        dst = ws / "proto" / src.relative_to(proto_dir)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    shutil.copytree(googleapis, ws / "googleapis")
    buf_yaml = (proto_dir / "buf.yaml").read_text(encoding="utf-8")
    (ws / "buf.yaml").write_text(translate_buf_yaml(buf_yaml), encoding="utf-8")


def generated_paths(tree: Path) -> list[str]:
    mk = tree / "Makefile"
    if mk.exists():
        m = re.search(
            r"^PROTO_GENERATED_PATHS\s*:?=\s*(.+)$", mk.read_text(encoding="utf-8"), re.MULTILINE
        )
        if m:
            return m.group(1).split()
    return DEFAULT_GENERATED


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--tree", required=True, type=Path, help="kagent work tree (has proto/buf.gen.yaml)"
    )
    ap.add_argument(
        "--cache", type=Path, default=Path.home() / ".cache" / "kagent-governed-memory" / "protogen"
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="fail when the generated folders differ from git after generation (make proto-check)",
    )
    ap.add_argument("--lint", action="store_true", help="also run buf lint (make proto-lint)")
    ap.add_argument(
        "--breaking-against",
        metavar="REF",
        help="also run buf breaking against proto/ at this git ref of the tree",
    )
    ap.add_argument(
        "--no-install", action="store_true", help="use only what is already in the cache"
    )
    ap.add_argument(
        "--keep-workspace", action="store_true", help="print and keep the temporary buf workspace"
    )
    args = ap.parse_args(argv)
    tree = args.tree.resolve()
    if not (tree / "proto" / "buf.gen.yaml").exists():
        print(f"error: {tree}/proto/buf.gen.yaml not found", file=sys.stderr)
        return 2
    try:
        tools = Tools(args.cache.expanduser().resolve(), install=not args.no_install)
        buf = tools.buf()
        protoc = tools.protoc()
        plugins = {
            name: ("local", tools.go_tool(n, pkg, v), v) for name, (n, pkg, v) in GO_PLUGINS.items()
        }
        plugins[ES[0]] = ("local", tools.es(), ES[2])
        for name, builtin in PROTOC_BUILTINS.items():
            plugins[name] = (builtin, protoc, PROTOC[0])
        plugins[GRPC_PYTHON[0]] = ("local", tools.grpc_python(), GRPC_PYTHON[2])
        googleapis = tools.googleapis()
        tmp = Path(tempfile.mkdtemp(prefix="kagent-protogen-"))
        try:
            ws = tmp / "ws"
            make_workspace(ws, tree / "proto", googleapis)
            gen = translate_gen(
                (tree / "proto" / "buf.gen.yaml").read_text(encoding="utf-8"), tree, plugins
            )
            (ws / "buf.gen.yaml").write_text(gen, encoding="utf-8")
            rc = 0
            if args.lint:
                if run([buf, "lint", "proto"], cwd=ws).returncode != 0:
                    log("buf lint: FAILED")
                    rc = 1
                else:
                    log("buf lint: ok")
            if args.breaking_against:
                against_src = tmp / "against-src"
                against_src.mkdir()
                arch = subprocess.run(
                    ["git", "-C", str(tree), "archive", args.breaking_against, "proto"],
                    check=False,
                    capture_output=True,
                )
                if arch.returncode != 0:
                    print(arch.stderr.decode(), file=sys.stderr)
                    return 2
                subprocess.run(["tar", "-x", "-C", str(against_src)], input=arch.stdout, check=True)
                against = tmp / "against"
                make_workspace(against, against_src / "proto", googleapis)
                if (
                    run(
                        [buf, "breaking", "proto", "--against", against / "proto"], cwd=ws
                    ).returncode
                    != 0
                ):
                    log(f"buf breaking against {args.breaking_against}: FAILED")
                    rc = 1
                else:
                    log(f"buf breaking against {args.breaking_against}: ok")
            if run([buf, "generate", "--template", "buf.gen.yaml"], cwd=ws).returncode != 0:
                log("buf generate: FAILED")
                return 1
            log("buf generate: ok")
        finally:
            if args.keep_workspace:
                log(f"workspace kept at {tmp}")
            else:
                shutil.rmtree(tmp, ignore_errors=True)
        if args.check:
            paths = generated_paths(tree)
            st = subprocess.run(
                ["git", "-C", str(tree), "status", "--porcelain", "--", *paths],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            if st.strip():
                print("Generated protobuf files are out of date:")
                print(st, end="")
                return 1
            log("check: generated files match git (" + " ".join(paths) + ")")
        return rc
    except NotRun as e:
        print(f"NOT RUN: {e}")
        return 3
    except BadTemplate as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

