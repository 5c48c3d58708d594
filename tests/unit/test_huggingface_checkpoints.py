"""HuggingFace checkpoint folders as users bring them, written with `save_pretrained` of the real classes.

ESM-1 and ESM-2 as `EsmForMaskedLM` (facebook/esm2_* on the hub) or bare
`EsmModel`; ProtT5 as a whole `T5ForConditionalGeneration` with only a
sentencepiece `spiece.model` (Rostlab/prot_t5_xl_uniref50's layout) or as a
`T5EncoderModel` with `tokenizer.json`. Each must load as the same network
(compared on padded batches of mixed lengths) and pass the export's gate.
The folders are written by support/huggingface_checkpoints.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import EsmForMaskedLM, EsmModel, PreTrainedModel

from bionemo_serving.exporter import export_model
from bionemo_serving.exporter.pipeline import ExportReport
from bionemo_serving.exporter.architectures import load_for_export
from bionemo_serving.exporter.errors import CheckpointError
from bionemo_serving.exporter.exportable import EncoderGraph
from bionemo_serving.exporter.graph_inputs import encoder_inputs
from bionemo_serving.model_catalog import MODELS, GraphRole, ModelDescription
from bionemo_serving.preprocessing.vocabularies import ESM_ALPHABET, PROTT5_BASE_VOCABULARY
from support.huggingface_checkpoints import esm_checkpoint, t5_checkpoint, write_spiece_model


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


@pytest.mark.e2e
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


@pytest.mark.e2e
def test_a_bare_checkpoint_exported_over_a_masked_lm_withdraws_its_head(tmp_path: Path) -> None:
    """The language-model graph of the checkpoint before must not answer for the new one's weights."""
    esm_checkpoint(tmp_path / "masked-lm", "esm2nv", EsmForMaskedLM)
    esm_checkpoint(tmp_path / "bare", "esm2nv", EsmModel)
    export_model(MODELS["esm2nv"], tmp_path / "masked-lm", tmp_path / "repository", runtimes=())
    assert (tmp_path / "repository" / "esm2nv_language_model" / "1").is_dir()
    export_model(MODELS["esm2nv"], tmp_path / "bare", tmp_path / "repository", runtimes=())
    assert "esm2nv_language_model" not in {path.name for path in (tmp_path / "repository").iterdir()}


@pytest.mark.e2e
@pytest.mark.parametrize("whole_seq2seq", [True, False], ids=["t5-with-spiece-model", "t5-encoder-with-tokenizer-json"])
def test_prott5_folders_load_as_the_same_encoder_and_export(whole_seq2seq: bool, tmp_path: Path) -> None:
    original = t5_checkpoint(tmp_path / "checkpoint", whole_seq2seq)
    assert_loads_as(original, MODELS["prott5nv"], tmp_path / "checkpoint", tmp_path)


def test_esm_vocabulary_with_other_ids_is_refused_naming_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint"
    esm_checkpoint(folder, "esm2nv", EsmForMaskedLM)
    swapped = list(ESM_ALPHABET)
    swapped[4], swapped[5] = swapped[5], swapped[4]  # L and A trade ids
    (folder / "vocab.txt").write_text("\n".join(swapped) + "\n")
    with pytest.raises(CheckpointError, match=r"vocab\.txt: token id 4 is 'A', the service's tokenizer has 'L'"):
        load_for_export(MODELS["esm2nv"], folder)


def test_sentencepiece_vocabulary_with_other_ids_is_refused_naming_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint"
    t5_checkpoint(folder, whole_seq2seq=True)
    write_spiece_model(folder / "spiece.model", PROTT5_BASE_VOCABULARY[:3] + PROTT5_BASE_VOCABULARY[4:] + ("▁A",))
    with pytest.raises(CheckpointError, match=r"spiece\.model: token id 3 is '▁L', the service's tokenizer has '▁A'"):
        load_for_export(MODELS["prott5nv"], folder)


@pytest.fixture
def esm2_folder(tmp_path: Path) -> Path:
    esm_checkpoint(tmp_path / "checkpoint", "esm2nv", EsmModel)
    return tmp_path / "checkpoint"


def edit_weights(folder: Path, edit: callable) -> None:
    weights = load_file(folder / "model.safetensors")
    edit(weights)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})


def test_a_missing_weight_is_an_error_naming_the_key(esm2_folder: Path) -> None:
    edit_weights(esm2_folder, lambda weights: weights.pop("encoder.layer.1.output.dense.bias"))
    with pytest.raises(CheckpointError, match=r"checkpoint: weight 'esm\.encoder\.layer\.1\.output\.dense\.bias' is missing"):
        load_for_export(MODELS["esm2nv"], esm2_folder)


def test_an_unknown_weight_is_an_error_naming_the_key(esm2_folder: Path) -> None:
    edit_weights(esm2_folder, lambda weights: weights.update({"encoder.adapter.weight": torch.zeros(2)}))
    with pytest.raises(CheckpointError, match=r"weight '(esm\.)?encoder\.adapter\.weight' is unknown to the model"):
        load_for_export(MODELS["esm2nv"], esm2_folder)


def test_a_shape_mismatch_names_the_key_and_both_shapes(esm2_folder: Path) -> None:
    config = json.loads((esm2_folder / "config.json").read_text())
    (esm2_folder / "config.json").write_text(json.dumps({**config, "intermediate_size": 96}))
    with pytest.raises(CheckpointError, match=r"weight '(esm\.)?encoder\.layer\.0\.intermediate\.dense\.bias' has shape \(64,\), "
                       r"config\.json implies \(96,\)"):  # fmt: skip
        load_for_export(MODELS["esm2nv"], esm2_folder)


def test_a_folder_without_weights_is_named(esm2_folder: Path) -> None:
    (esm2_folder / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"checkpoint: cannot load EsmForMaskedLM weights .*no file named model\.safetensors"):
        load_for_export(MODELS["esm2nv"], esm2_folder)


def test_a_checkpoint_of_another_architecture_is_named(esm2_folder: Path, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"config\.json: model_type='esm', .*esm1nv needs 'esm' with 'absolute'"):
        load_for_export(MODELS["esm1nv"], esm2_folder)
    t5_checkpoint(tmp_path / "t5", whole_seq2seq=False)
    with pytest.raises(CheckpointError, match=r"t5/config\.json: model_type='t5'.*esm2nv needs 'esm'"):
        load_for_export(MODELS["esm2nv"], tmp_path / "t5")
    shutil.rmtree(tmp_path / "t5")


def test_a_position_table_shorter_than_the_length_limit_is_refused(tmp_path: Path) -> None:
    """ESM numbers positions from padding_idx + 1: 300 rows hold 298 tokens, fewer than esm1nv's 510 residues."""
    esm_checkpoint(tmp_path / "checkpoint", "esm1nv", EsmModel, max_position_embeddings=300)
    with pytest.raises(CheckpointError, match=r"checkpoint: the model has 298 positions, but esm1nv accepts 510 tokens "
                       r"of input \(512 with its special tokens\)"):  # fmt: skip
        load_for_export(MODELS["esm1nv"], tmp_path / "checkpoint")
    esm_checkpoint(tmp_path / "fits", "esm1nv", EsmModel, max_position_embeddings=514)
    load_for_export(MODELS["esm1nv"], tmp_path / "fits")
