"""The committed gRPC stubs, written by grpcio-tools (pinned with protobuf in pyproject.toml):

    python -m operations.tools.grpc_stubs

- BentoML's own `bentoml/grpc/<version>/service.proto`, from the installed bentoml, into
  `bionemo_serving/fronts/bentoml/grpc_stubs/<version>_service_pb2*.py` (why: bionemo_serving/fronts/bentoml/grpc_stubs/__init__.py);
- BioNeMo's GenerativeSampler protocols, `bionemo_serving/fronts/bionemo_grpc/protos/*.proto`, into `*_pb2*.py` beside them,
  compiled from their own folder as BioNeMo's users compile them: protobuf's default pool then holds `esm1nv.proto`
  once whether a process imports ours, a user's, or both (under another file name the two would clash, "duplicate
  symbol"). grpcio-tools writes the service module's import of its messages flat; it is made relative to the package.

The stubs are committed rather than generated at install, so that the bento and the image need no protoc;
tests/unit/test_grpc_stubs.py generates them again and fails if a committed one differs.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import bentoml

ROOT = Path(__file__).resolve().parents[2]
BENTOML_STUBS = ROOT / "bionemo_serving" / "fronts" / "bentoml" / "grpc_stubs"
BIONEMO_PROTOS = ROOT / "bionemo_serving" / "fronts" / "bionemo_grpc" / "protos"
BENTOML_VERSIONS = ("v1", "v1alpha1")


def _protoc(include: Path, protos: list[str], out: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{include}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            *protos,
        ],
        check=True,
    )


def generated_stubs() -> dict[Path, str]:
    """Each stub's path in the repository and the text grpcio-tools writes for it now."""
    stubs: dict[Path, str] = {}
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        site = Path(bentoml.__file__).resolve().parent.parent
        _protoc(site, [f"bentoml/grpc/{version}/service.proto" for version in BENTOML_VERSIONS], out)
        for version in BENTOML_VERSIONS:
            for module in ("service_pb2", "service_pb2_grpc"):
                stubs[BENTOML_STUBS / f"{version}_{module}.py"] = (
                    out / "bentoml/grpc" / version / f"{module}.py"
                ).read_text()
        protos = sorted(BIONEMO_PROTOS.glob("*.proto"))
        _protoc(BIONEMO_PROTOS, [proto.name for proto in protos], out)
        for proto in protos:
            messages, services = f"{proto.stem}_pb2", f"{proto.stem}_pb2_grpc"
            stubs[BIONEMO_PROTOS / f"{messages}.py"] = (out / f"{messages}.py").read_text()
            stubs[BIONEMO_PROTOS / f"{services}.py"] = (out / f"{services}.py").read_text().replace(
                f"\nimport {messages} as", f"\nfrom . import {messages} as"
            )
    return stubs


def main() -> int:
    for path, text in generated_stubs().items():
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
