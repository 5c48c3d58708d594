"""The committed gRPC stubs are grpcio-tools' output now, for BentoML's service.proto and BioNeMo's protocols."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from google.protobuf import __version__ as protobuf_version

from operations.tools.grpc_stubs import BIONEMO_PROTOS, ROOT, generated_stubs


def test_committed_stubs_are_what_grpcio_tools_generates() -> None:
    stubs = generated_stubs()
    assert len(stubs) == 4 + 6  # BentoML v1 and v1alpha1; megamolbart, esm1nv, prott5nv
    stale = [str(path) for path, text in stubs.items() if not path.is_file() or path.read_text() != text]
    assert not stale, f"run `python -m operations.tools.grpc_stubs`: {stale}"


def test_bentoml_uses_the_stubs_generated_for_the_pinned_protobuf() -> None:
    """Its own stubs for a protobuf other than 4.x import `google.protobuf.service`, gone from protobuf 6."""
    import importlib

    import bionemo_serving.fronts.bentoml.grpc_stubs

    assert protobuf_version.startswith("6.")
    for version in ("v1", "v1alpha1"):
        for module in ("service_pb2", "service_pb2_grpc"):
            ours = importlib.import_module(f"{bionemo_serving.fronts.bentoml.grpc_stubs.__name__}.{version}_{module}")
            assert importlib.import_module(f"bentoml.grpc.{version}.{module}") is ours
        assert ours.BentoServiceStub  # the servicer and client BentoML's server and client build on


def test_a_users_stubs_import_beside_ours(tmp_path: Path) -> None:
    """A process that holds the service's BioNeMo stubs (a test run, an app embedding the service) can import the ones
    a BioNeMo user compiles from the same .proto files, and their messages are one and the same."""
    protos = sorted(BIONEMO_PROTOS.glob("*.proto"))
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{BIONEMO_PROTOS}", f"--python_out={tmp_path}",
         f"--grpc_python_out={tmp_path}", *(proto.name for proto in protos)],
        check=True,
    )  # fmt: skip
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from bionemo_serving.fronts.bionemo_grpc import servicers\n"
        "import esm1nv_pb2, megamolbart_pb2, prott5nv_pb2\n"
        "assert esm1nv_pb2.InputSpec is servicers.esm1nv_pb2.InputSpec\n"
    )
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
