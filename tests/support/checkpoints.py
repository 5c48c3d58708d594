"""Tiny checkpoints of the real architectures, and their exports: the exporter's and the runtimes' tests need a model
of each kind, not a large one, and exporting one (every graph, every runtime, each held to the parity gate) takes
tens of seconds on two cores, so each tiny model is written and exported once a session (`TinyModels`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bionemo_serving.exporter import ExportReport, export_model
from bionemo_serving.exporter.architectures import create_default_checkpoint
from bionemo_serving.model_catalog import MODELS, ModelDescription
from bionemo_serving.runtimes.engines import SHARED_WEIGHTS, Runtime

TINY_SIZES: dict[str, dict[str, Any]] = {
    "esm1nv": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64},
    "esm2nv": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64},
    "prott5nv": {"d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4},
    "megamolbart": {"d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
                    "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64},
}  # fmt: skip
"""Each architecture at 2 layers of width 32: the real vocabulary, tokenizer and graphs, seconds to export."""
SEED = 3
"""The tiny checkpoints' weights: the same in every test that shares them."""
EVERY_RUNTIME_FILE = {runtime.file("model") for runtime in Runtime} | {"model.openvino.bin", SHARED_WEIGHTS}
"""An encoder's files in an export, one per runtime (OpenVINO's weights beside its graph), and the weights every ONNX
file of the model reads (bionemo_serving/exporter/shared_weights.py)."""


def tiny(name: str, **changes: Any) -> ModelDescription:
    """The catalog's `name`, whose default checkpoint is tiny; `changes` replace more of its description."""
    return replace(MODELS[name], default_checkpoint_config=TINY_SIZES[name], **changes)


TINY_ESM2 = tiny("esm2nv")
"""The tiny esm2nv: what the exporter's command-line tests, in unit/ and e2e/, hand to export_model."""


def write_tiny_checkpoint(name: str, folder: Path, seed: int = SEED) -> Path:
    """A randomly initialised tiny checkpoint of `name` in `folder`, as `make models` writes the default ones."""
    create_default_checkpoint(tiny(name), folder, seed=seed)
    return folder


@dataclass(frozen=True)
class TinyExport:
    """A tiny model exported with the exporter's defaults (version 1, every runtime, the cpu target)."""

    checkpoint: Path
    repository: Path
    """A repository of this model's graphs alone: copy it before writing into it (a choice's record, a new export)."""
    report: ExportReport


class TinyModels:
    """Each tiny checkpoint written once, each exported once, on first use: read them, never write into them.

    Laid out as the project's own default export is, `checkpoints/<name>` beside a repository, one per model here."""

    def __init__(self, root: Path) -> None:
        self.checkpoints = root / "checkpoints"
        self.root = root
        self._exports: dict[str, TinyExport] = {}

    def checkpoint(self, name: str) -> Path:
        folder = self.checkpoints / name
        if not (folder / "config.json").is_file():
            write_tiny_checkpoint(name, folder)
        return folder

    def export(self, name: str) -> TinyExport:
        if name not in self._exports:
            repository = self.root / "repositories" / name
            report = export_model(tiny(name), self.checkpoint(name), repository)
            self._exports[name] = TinyExport(self.checkpoint(name), repository, report)
        return self._exports[name]
