"""Model repositories a test serves or times instead of the default one: some of an exported repository's models,
linked (read-only, nothing written into them) or copied (a start or a choice may write beside them), and some broken,
copies whose every graph file is garbage, so that no runtime can open them. And the runtime a model's config records
(`runtime_named`), for the tests of the folder each start serves."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from support.paths import DEFAULT_REPOSITORY

GRAPH_SUFFIXES = {".onnx", ".weights", ".pt", ".xml", ".bin"}
"""Every runtime's graph files (ONNX and the model's weights, TorchScript, OpenVINO's graph and weights); not the
python backend's model.py and engines.py, which then fail nothing but the graph's load."""
NOT_A_MODEL = b"not a model"


def models_in(repository: Path = DEFAULT_REPOSITORY) -> list[str]:
    """The Triton models of `repository`: its folders."""
    return sorted(folder.name for folder in repository.iterdir() if folder.is_dir())


def build_repository(
    folder: Path,
    *,
    linked: Iterable[str] = (),
    copied: Iterable[str] = (),
    broken: Iterable[str] = (),
    source: Path = DEFAULT_REPOSITORY,
) -> Path:
    """`folder` holding `source`'s models `linked`, `copied` and `broken` (copied, then every graph file garbage). A copy
    holds its own weights file, as a copy made without hardlinks does (bionemo_serving.exporter.shared_weights.relink links them)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in linked:
        (folder / name).symlink_to(source / name, target_is_directory=True)
    for name in [*copied, *broken]:
        shutil.copytree(source / name, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in broken:
        for graph_file in (folder / name).glob("*/*"):
            if graph_file.suffix in GRAPH_SUFFIXES:
                graph_file.write_bytes(NOT_A_MODEL)
    return folder


def runtime_named(config_path: Path) -> str:
    """The runtime a model's config.pbtxt records (the `runtime` parameter a start's choice writes; empty if none)."""
    config = text_format.Parse(config_path.read_text(), model_config_pb2.ModelConfig())
    return config.parameters["runtime"].string_value
