"""BioNeMo `.nemo` checkpoints: written in Megatron's layout from a small HF model (support/nemo_checkpoints.py, by
hand, so that a mistake in bionemo_serving/exporter/nemo/esm.py's tables cannot cancel itself out), loaded. Their export
is tests/e2e/test_nemo_checkpoints_e2e.py's.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers.models.esm import modeling_esm

from bionemo_serving.exporter.architectures import load_for_export
from bionemo_serving.exporter.errors import CheckpointError
from bionemo_serving.exporter.exportable import EncoderGraph
from bionemo_serving.exporter.graph_inputs import GraphInputs
from bionemo_serving.model_catalog import MODELS, GraphRole
from bionemo_serving.preprocessing.vocabularies import ESM_ALPHABET
from support.nemo_checkpoints import (
    FFN,
    HIDDEN,
    LM,
    PADDED_VOCABULARY,
    VOCABULARY_MEMBER,
    hf_model,
    hidden_states,
    log_probs,
    masked_batch,
    megatron_config,
    megatron_state_dict,
    sentencepiece_vocabulary,
    source_log_probs,
    tensors,
    tokenizer_config,
    write_nemo,
)


def loaded_log_probs(graphs: dict[GraphRole, torch.nn.Module], batch: GraphInputs) -> np.ndarray:
    """What the loaded language-model graph answers in torch."""
    with torch.inference_mode():
        return graphs[GraphRole.LANGUAGE_MODEL](**tensors(batch)).numpy()


def test_fused_bias_gelu_is_megatrons_tanh_approximation_in_the_layers_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """ESM-1nv's layers fuse bias and tanh GELU; its BertLMHead applies torch's erf GELU all the same."""
    description = MODELS["esm1nv"]
    original = hf_model("esm1nv", seed=6)
    nemo = write_nemo(tmp_path / "esm1.nemo", megatron_config("esm1nv"), megatron_state_dict(original))
    loaded = load_for_export(description, nemo).graphs
    batch = masked_batch(description)
    with monkeypatch.context() as tanh, torch.inference_mode():
        tanh.setattr(modeling_esm, "gelu", lambda x: torch.nn.functional.gelu(x, approximate="tanh"))
        expected, _ = hidden_states(EncoderGraph(original.esm), description)
        states = original.esm(**tensors(batch)).last_hidden_state
    np.testing.assert_allclose(hidden_states(loaded[GraphRole.ENCODER], description)[0], expected, rtol=0, atol=1e-5)
    with torch.inference_mode():
        expected_log_probs = log_probs(original.lm_head(states))  # transformers' erf GELU again
    real = batch.compared["log_probs"]
    np.testing.assert_allclose(loaded_log_probs(loaded, batch)[real], expected_log_probs[real], rtol=0, atol=1e-4)


def test_an_untied_output_layer_is_not_read(tmp_path: Path) -> None:
    """BioNeMo 1.x (NeMo 1.23's BertModel.forward) computes the logits against the word embeddings even where
    share_embeddings_and_output_weights is false and the archive carries the output layer it never reads."""
    description = MODELS["esm2nv"]
    original = hf_model("esm2nv", seed=9)
    state = megatron_state_dict(original) | {f"{LM}output_layer.weight": torch.randn(PADDED_VOCABULARY, HIDDEN)}
    config = megatron_config("esm2nv", share_embeddings_and_output_weights=False)
    loaded = load_for_export(description, write_nemo(tmp_path / "untied.nemo", config, state)).graphs
    batch = masked_batch(description)
    real = batch.compared["log_probs"]
    expected = source_log_probs(original, batch)[real]
    np.testing.assert_allclose(loaded_log_probs(loaded, batch)[real], expected, rtol=0, atol=1e-4)


@pytest.fixture
def esm2_weights() -> dict[str, torch.Tensor]:
    return megatron_state_dict(hf_model("esm2nv", seed=7))


def test_unknown_key_is_named(esm2_weights: dict[str, torch.Tensor], tmp_path: Path) -> None:
    esm2_weights[f"{LM}encoder.layers.0.self_attention.adapter.weight"] = torch.zeros(2)
    nemo = write_nemo(tmp_path / "extra.nemo", megatron_config("esm2nv"), esm2_weights)
    key = rf"{LM}encoder\.layers\.0\.self_attention\.adapter\.weight"
    with pytest.raises(CheckpointError, match=rf"extra\.nemo: .*unknown key '{key}'"):
        load_for_export(MODELS["esm2nv"], nemo)


@pytest.mark.parametrize("key", [f"{LM}encoder.layers.1.mlp.dense_4h_to_h.bias", "model.lm_head.layernorm.bias"])
def test_missing_key_is_named(key: str, esm2_weights: dict[str, torch.Tensor], tmp_path: Path) -> None:
    """A layer's key, or one of a head the archive has other keys of."""
    del esm2_weights[key]
    nemo = write_nemo(tmp_path / "short.nemo", megatron_config("esm2nv"), esm2_weights)
    with pytest.raises(CheckpointError, match=rf"short\.nemo: .*missing key '{re.escape(key)}'"):
        load_for_export(MODELS["esm2nv"], nemo)


def test_shape_mismatch_names_the_key_and_both_shapes(esm2_weights: dict[str, torch.Tensor], tmp_path: Path) -> None:
    esm2_weights[f"{LM}encoder.layers.0.mlp.dense_h_to_4h.weight"] = torch.zeros(FFN + 1, HIDDEN)
    nemo = write_nemo(tmp_path / "wide.nemo", megatron_config("esm2nv"), esm2_weights)
    key = rf"{LM}encoder\.layers\.0\.mlp\.dense_h_to_4h\.weight"
    with pytest.raises(CheckpointError, match=rf"'{key}' has shape \(65, 32\).*\(64, 32\)"):
        load_for_export(MODELS["esm2nv"], nemo)


def test_qkv_of_the_wrong_size_names_the_key(esm2_weights: dict[str, torch.Tensor], tmp_path: Path) -> None:
    esm2_weights[f"{LM}encoder.layers.1.self_attention.query_key_value.bias"] = torch.zeros(3 * HIDDEN - 1)
    nemo = write_nemo(tmp_path / "qkv.nemo", megatron_config("esm2nv"), esm2_weights)
    with pytest.raises(CheckpointError, match=r"query_key_value\.bias' has shape \(95,\)"):
        load_for_export(MODELS["esm2nv"], nemo)


def test_archive_without_config_names_the_member(esm2_weights: dict[str, torch.Tensor], tmp_path: Path) -> None:
    nemo = write_nemo(tmp_path / "bare.nemo", None, esm2_weights)
    with pytest.raises(CheckpointError, match=r"bare\.nemo: no member 'model_config\.yaml'"):
        load_for_export(MODELS["esm2nv"], nemo)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"num_layers": None}, r"'num_layers' is missing"),
        ({"hidden_size": "wide"}, r"'hidden_size'='wide', expected int"),
        ({"position_embedding_type": "learned_absolute"}, r"'position_embedding_type'='learned_absolute'; esm2nv needs"),
        ({"use_esm_attention": False}, r"exactly one of 'normalize_attention_scores' and 'use_esm_attention'"),
    ],
)
def test_config_field_problems_name_the_field(
    changes: dict[str, object], message: str, esm2_weights: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    nemo = write_nemo(tmp_path / "config.nemo", megatron_config("esm2nv", **changes), esm2_weights)
    with pytest.raises(CheckpointError, match=rf"config\.nemo: model_config\.yaml: {message}"):
        load_for_export(MODELS["esm2nv"], nemo)


@pytest.fixture
def esm1_with_vocabulary() -> tuple[dict[str, object], dict[str, torch.Tensor]]:
    """ESM-1nv's config naming a packed sentencepiece vocabulary, and its weights."""
    config = {**megatron_config("esm1nv"), "tokenizer": tokenizer_config(VOCABULARY_MEMBER)}
    return config, megatron_state_dict(hf_model("esm1nv", seed=8))


def test_a_packed_vocabulary_other_than_the_served_one_is_refused(
    esm1_with_vocabulary: tuple[dict[str, object], dict[str, torch.Tensor]], tmp_path: Path
) -> None:
    """A sentencepiece vocabulary that numbers the tokens otherwise (<unk> first) would shift every embedding row."""
    pieces = sentencepiece_vocabulary(("<unk>", "<s>", "</s>", "<pad>", *ESM_ALPHABET[4:]))
    nemo = write_nemo(tmp_path / "spm.nemo", *esm1_with_vocabulary, artifacts={VOCABULARY_MEMBER: pieces})
    found = rf"spm\.nemo/{re.escape(VOCABULARY_MEMBER)}: token id 0 is '<unk>', the service's tokenizer has '<cls>'"
    advice = r"tokenizes with fair-esm's ESM-1b alphabet .* export a checkpoint trained with it"
    with pytest.raises(CheckpointError, match=rf"{found} there; .*{advice}"):
        load_for_export(MODELS["esm1nv"], nemo)


def test_a_vocabulary_the_archive_lacks_is_named(
    esm1_with_vocabulary: tuple[dict[str, object], dict[str, torch.Tensor]], tmp_path: Path
) -> None:
    nemo = write_nemo(tmp_path / "lost.nemo", *esm1_with_vocabulary)
    message = rf"'tokenizer\.vocab_file'='nemo:{VOCABULARY_MEMBER}'; the archive has no member '{VOCABULARY_MEMBER}'"
    with pytest.raises(CheckpointError, match=rf"lost\.nemo: model_config\.yaml: {message}"):
        load_for_export(MODELS["esm1nv"], nemo)
