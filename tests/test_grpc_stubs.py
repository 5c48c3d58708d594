"""The committed gRPC stubs are grpcio-tools' output now, for BentoML's service.proto and BioNeMo's protocols."""

from __future__ import annotations

from google.protobuf import __version__ as protobuf_version

from tools.grpc_stubs import generated_stubs


def test_committed_stubs_are_what_grpcio_tools_generates() -> None:
    stubs = generated_stubs()
    assert len(stubs) == 4 + 6  # BentoML v1 and v1alpha1; megamolbart, esm1nv, prott5nv
    stale = [str(path) for path, text in stubs.items() if not path.is_file() or path.read_text() != text]
    assert not stale, f"run `python -m tools.grpc_stubs`: {stale}"


def test_bentoml_uses_the_stubs_generated_for_the_pinned_protobuf() -> None:
    """Its own stubs for a protobuf other than 4.x import `google.protobuf.service`, gone from protobuf 6."""
    import importlib

    import serving.fronts.bentoml.grpc_stubs

    assert protobuf_version.startswith("6.")
    for version in ("v1", "v1alpha1"):
        for module in ("service_pb2", "service_pb2_grpc"):
            ours = importlib.import_module(f"{serving.fronts.bentoml.grpc_stubs.__name__}.{version}_{module}")
            assert importlib.import_module(f"bentoml.grpc.{version}.{module}") is ours
        assert ours.BentoServiceStub  # the servicer and client BentoML's server and client build on
