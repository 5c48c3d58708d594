"""BioNeMo `.nemo` checkpoints (NeMo 1 Megatron) loaded as the HuggingFace models the exporter traces.

`archive` reads the tar and renames Megatron's state dict by a table of
rules; `esm` holds ESM-1nv's and ESM-2nv's table (Megatron-BERT onto
`EsmModel`), `encoder_decoder` MegaMolBART's and ProtT5nv's (NeMo's Megatron
encoder-decoder onto MBart). A key no table knows is an error naming the key
and the file, unless it belongs to a part the served graphs do not use, and
those are listed explicitly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from bionemo_serving.exporter.exportable import ExportableModel
from bionemo_serving.exporter.nemo.archive import NEMO_SUFFIX, NemoArchive, read_nemo
from bionemo_serving.exporter.nemo.encoder_decoder import load_megamolbart, load_prott5nv
from bionemo_serving.exporter.nemo.esm import load_esm
from bionemo_serving.model_catalog import Architecture, ModelDescription

_NEMO_FAMILIES: dict[Architecture, Callable[[ModelDescription, NemoArchive], ExportableModel]] = {
    Architecture.ESM1: load_esm,
    Architecture.ESM2: load_esm,
    Architecture.MBART: load_megamolbart,
    Architecture.T5_ENCODER: load_prott5nv,
}


def load_nemo(description: ModelDescription, path: Path) -> ExportableModel:
    """Load a BioNeMo `.nemo` file as the graphs to export."""
    return _NEMO_FAMILIES[description.architecture](description, read_nemo(path))


__all__ = ["NEMO_SUFFIX", "load_nemo"]
