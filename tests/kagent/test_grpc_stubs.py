"""The library's gRPC stubs for kagent main's ``GovernedMemoryService`` are what
``scripts/series protos stubs`` generates from patch 0010's proto (byte for byte), they speak main's
RPC paths, and their messages are wire-identical to main's (every field's number, type, label
and message type) although the proto package is renamed (the script's docstring says why)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts/series"
RPCS = ("GrantConsent", "Generation", "Redeem", "Admit", "Save", "Search", "Inspect", "Forget",
        "ForgetAll", "Withdraw", "Status", "Offboard")


def test_stubs_are_what_the_script_generates() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "protos", "stubs", "--check"],
                          capture_output=True,
                          text=True, timeout=120, check=False)
    if done.returncode == 3:
        print(f"\n*** GRPC STUB CHECK NOT RUN: {done.stderr.strip()} ***")
        pytest.skip(f"GRPC STUB CHECK NOT RUN: {done.stderr.strip()}")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_stub_calls_mains_paths() -> None:
    grpc = pytest.importorskip("grpc")
    from kagent_governed_memory.kagent.protos import governed_memory_pb2_grpc as stubs

    seen: list[str] = []

    class Channel:
        def unary_unary(self, path: str, **_: object) -> None:
            seen.append(path)

    stubs.GovernedMemoryServiceStub(Channel())
    assert seen == [f"/kagent.api.v1alpha1.GovernedMemoryService/{r}" for r in RPCS]
    assert grpc is not None


def _messages(proto_text: str, name: str, package: str) -> dict[str, list[tuple[object, ...]]]:
    """Every message's fields as the wire sees them, type names relative to ``package``."""
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc
    import grpc_tools
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / name
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(proto_text)
        out = Path(tmp) / "set.pb"
        includes = Path(grpc_tools.__file__).parent / "_proto"
        assert protoc.main(["protoc", f"-I{tmp}", f"-I{includes}", f"--descriptor_set_out={out}",
                            name]) == 0
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    [file] = fds.file
    assert file.package == package
    return {m.name: [(f.name, f.number, f.type, f.label, f.proto3_optional,
                      f.type_name.replace(f".{package}.", "."))
                     for f in m.field] for m in file.message_type}


def test_messages_are_wire_identical_to_mains() -> None:
    pytest.importorskip("grpc_tools")
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from _series import stubs as gen
    finally:
        sys.path.pop(0)
    main = _messages(gen.main_proto(), "kagent/api/v1alpha1/governed_memory.proto",
                     gen.MAIN_PACKAGE)
    ours = _messages((ROOT / gen.REL / "governed_memory.proto").read_text(),
                     f"{gen.REL}/governed_memory.proto", gen.PACKAGE)
    assert len(main) == 32 and ours == main
