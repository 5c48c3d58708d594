"""HuggingFace checkpoint folders as users bring them, written with `save_pretrained` of the real classes, loaded and
exported.

ESM-1 and ESM-2 as `EsmForMaskedLM` (facebook/esm2_* on the hub) or bare
`EsmModel`; ProtT5 as a whole `T5ForConditionalGeneration` with only a
sentencepiece `spiece.model` (Rostlab/prot_t5_xl_uniref50's layout) or as a
`T5EncoderModel` with `tokenizer.json`. Each must load as the same network
(compared on padded batches of mixed lengths) and pass the export's gate.
The folders are written by support/huggingface_checkpoints.py; the folders the
loader refuses are tests/unit/test_huggingface_checkpoints.py's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import EsmForMaskedLM, EsmModel, PreTrainedModel

from bionemo_serving.exporter import export_model
from bionemo_serving.exporter.pipeline import ExportReport
from bionemo_serving.exporter.architectures import load_for_export
from bionemo_serving.exporter.exportable import EncoderGraph
from bionemo_serving.exporter.graph_inputs import encoder_inputs
from bionemo_serving.model_catalog import MODELS, GraphRole, ModelDescription
from support.huggingface_checkpoints import esm_checkpoint, t5_checkpoint


def hidden_states(encoder: torch.nn.Module, description: ModelDescription) -> np.ndarray:
    """Final hidden states at the real tokens of a padded batch of mixed lengths."""
    batch = encoder_inputs(description, [1, 7, 40, 250], np.random.default_rng(3))
    with torch.inference_mode():
        states, _ = encoder(**{name: torch.from_numpy(array) for name, array in batch.feeds.items()})
    return states.numpy()[batch.compared["hidden_states"]]


def assert_loads_as(
    original: torch.nn.Module, description: ModelDescription, folder: Path, tmp_path: Path
) -> ExportReport:
    loaded = load_for_export(description, folder).graphs[GraphRole.ENCODER]
    expected = hidden_states(EncoderGraph(original.eval()), description)
    np.testing.assert_allclose(hidden_states(loaded, description), expected, rtol=0, atol=1e-5)
    report = export_model(description, folder, tmp_path / "repository", runtimes=())
    assert all(graph.parity.max_abs_diff < 1e-4 and graph.parity.batches == 3 for graph in report.graphs)
    return report


@pytest.mark.parametrize("model_class", [EsmForMaskedLM, EsmModel])
@pytest.mark.parametrize("name", ["esm1nv", "esm2nv"])
def test_esm_folders_load_as_the_same_network_and_export(
    name: str, model_class: type[PreTrainedModel], tmp_path: Path
) -> None:
    """A masked-LM folder gives the language-model graph too; a bare EsmModel the encoder alone, and says why."""
    original = esm_checkpoint(tmp_path / "checkpoint", name, model_class)
    report = assert_loads_as(original, MODELS[name], tmp_path / "checkpoint", tmp_path)
    exported = sorted(path.name for path in (tmp_path / "repository").iterdir())
    if model_class is EsmForMaskedLM:
        graphs = [name, f"{name}_language_model", f"{name}_layers", f"{name}_contacts"]
        assert [graph.triton_name for graph in report.graphs] == graphs and sorted(exported) == sorted(graphs)
        assert not report.left_out
    else:
        graphs = [name, f"{name}_layers", f"{name}_contacts"]  # EsmModel has a contact head
        assert [graph.triton_name for graph in report.graphs] == graphs and sorted(exported) == sorted(graphs)
        assert report.left_out == {
            f"{name}_language_model": f"the checkpoint has no language-model head; {name} serves no logits, score"
        }


def test_a_bare_checkpoint_exported_over_a_masked_lm_withdraws_its_head(tmp_path: Path) -> None:
    """The language-model graph of the checkpoint before must not answer for the new one's weights."""
    esm_checkpoint(tmp_path / "masked-lm", "esm2nv", EsmForMaskedLM)
    esm_checkpoint(tmp_path / "bare", "esm2nv", EsmModel)
    export_model(MODELS["esm2nv"], tmp_path / "masked-lm", tmp_path / "repository", runtimes=())
    assert (tmp_path / "repository" / "esm2nv_language_model" / "1").is_dir()
    export_model(MODELS["esm2nv"], tmp_path / "bare", tmp_path / "repository", runtimes=())
    assert "esm2nv_language_model" not in {path.name for path in (tmp_path / "repository").iterdir()}


@pytest.mark.parametrize("whole_seq2seq", [True, False], ids=["t5-with-spiece-model", "t5-encoder-with-tokenizer-json"])
def test_prott5_folders_load_as_the_same_encoder_and_export(whole_seq2seq: bool, tmp_path: Path) -> None:
    original = t5_checkpoint(tmp_path / "checkpoint", whole_seq2seq)
    assert_loads_as(original, MODELS["prott5nv"], tmp_path / "checkpoint", tmp_path)
