"""BentoML 1.4.39's gRPC stubs, generated for the protobuf this project pins (6.x); importing this package installs them.

It also repairs `bentoml.client.Client.from_url(url, kind="grpc")` (below).

`bentoml/grpc/<version>/service_pb2.py` loads BentoML's protobuf-4 stubs only when protobuf is 4.x and its
protobuf-3 stubs otherwise, and those import `google.protobuf.service`, which protobuf 6 no longer has (tritonclient
2.73 needs protobuf 6). The modules here are grpcio-tools' output for BentoML's own `service.proto` of each protocol
version (`python -m operations.tools.grpc_stubs` writes them; tests/unit/test_grpc_stubs.py checks they are current). Importing this
package registers them under BentoML's module names, so it must come before anything imports BentoML's stubs
(BentoML imports them lazily, at first use: `import bentoml` alone does not): service.py imports it, and so must
every process that uses BentoML's gRPC client.
"""

from __future__ import annotations

import importlib
import sys

import bentoml.grpc.v1  # noqa: F401  (both packages in sys.modules for _install)
import bentoml.grpc.v1alpha1  # noqa: F401
from bentoml._internal.client import grpc as grpc_client

PROTOCOL_VERSIONS = ("v1", "v1alpha1")


def _install(version: str, module: str) -> None:
    """This package's `<version>_<module>` becomes `bentoml.grpc.<version>.<module>`."""
    name = f"bentoml.grpc.{version}.{module}"
    sys.modules.setdefault(name, importlib.import_module(f"{__name__}.{version}_{module}"))
    setattr(sys.modules[f"bentoml.grpc.{version}"], module, sys.modules[name])


for _version in PROTOCOL_VERSIONS:
    _install(_version, "service_pb2")
    _install(_version, "service_pb2_grpc")  # imports `bentoml.grpc.<version>.service_pb2`: the one installed above

# BentoML 1.4.39's `SyncGrpcClient.from_url` (which `Client.from_url(url, kind="grpc")` calls) opens its channel with
# `GrpcClient._create_channel`, which only `SyncGrpcClient` and `AsyncGrpcClient` define: an AttributeError otherwise.
grpc_client.GrpcClient._create_channel = grpc_client.SyncGrpcClient._create_channel
