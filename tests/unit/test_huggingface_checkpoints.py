"""HuggingFace checkpoint folders as users bring them, written with `save_pretrained` of the real classes.

ESM-1 and ESM-2 as `EsmForMaskedLM` (facebook/esm2_* on the hub) or bare
`EsmModel`; ProtT5 as a whole `T5ForConditionalGeneration` with only a
sentencepiece `spiece.model` (Rostlab/prot_t5_xl_uniref50's layout) or as a
`T5EncoderModel` with `tokenizer.json`. Here, what the loader refuses, naming
the file, the weight or the setting; that each folder loads as the same network
(compared on padded batches of mixed lengths) and passes the export's gate is
tests/e2e/test_huggingface_checkpoints_e2e.py's.
The folders are written by support/huggingface_checkpoints.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import EsmForMaskedLM, EsmModel

from bionemo_serving.exporter.architectures import load_for_export
from bionemo_serving.exporter.errors import CheckpointError
from bionemo_serving.model_catalog import MODELS
from bionemo_serving.preprocessing.vocabularies import ESM_ALPHABET, PROTT5_BASE_VOCABULARY
from support.huggingface_checkpoints import esm_checkpoint, t5_checkpoint, write_spiece_model


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
