"""BioNeMo `.nemo` checkpoints: written in Megatron's layout from a small HF model (support/nemo_checkpoints.py, by
hand, so that a mistake in bionemo_serving/exporter/nemo/esm.py's tables cannot cancel itself out), loaded and exported.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
from transformers import EsmForMaskedLM
from transformers.models.esm import modeling_esm

from bionemo_serving.exporter import export_model
from bionemo_serving.exporter.architectures import load_for_export
from bionemo_serving.exporter.errors import CheckpointError
from bionemo_serving.exporter.exportable import EncoderGraph
from bionemo_serving.exporter.graph_inputs import GraphInputs, language_model_inputs
from bionemo_serving.exporter.pipeline import ExportReport
from bionemo_serving.model_catalog import MODELS, GraphRole, ModelDescription
from bionemo_serving.preprocessing.vocabularies import ESM_ALPHABET
from support.nemo_checkpoints import (
    ARTIFACT_HEX,
    FFN,
    HIDDEN,
    LM,
    PADDED_VOCABULARY,
    hf_model,
    hidden_states,
    megatron_config,
    megatron_state_dict,
    sentencepiece_vocabulary,
    tokenizer_config,
    write_nemo,
)
from support.reference import AMINO_ACIDS

VOCABULARY_MEMBER = f"{ARTIFACT_HEX}_protein_sequence_sentencepiece.vocab"


def log_probs(logits: torch.Tensor) -> np.ndarray:
    """transformers' masked-LM logits as the language-model graph answers: log-softmax, at the 20 amino acids."""
    columns = [ESM_ALPHABET.index(residue) for residue in AMINO_ACIDS]
    return torch.log_softmax(logits, dim=-1)[..., columns].numpy()


def masked_batch(description: ModelDescription) -> GraphInputs:
    """A padded batch of mixed lengths, its first row without <mask>, the others with more and more; every row asks
    for the log-probabilities of every token, compared at its real ones."""
    feeds = language_model_inputs(description, [1, 7, 40, 250], np.random.default_rng(4)).feeds
    every = np.broadcast_to(np.arange(feeds["input_ids"].shape[1]), feeds["input_ids"].shape).copy()
    return GraphInputs(feeds | {"positions": every}, {"log_probs": feeds["attention_mask"].astype(bool)})


def tensors(batch: GraphInputs) -> dict[str, torch.Tensor]:
    return {name: torch.from_numpy(array) for name, array in batch.feeds.items()}


def source_log_probs(original: EsmForMaskedLM, batch: GraphInputs) -> np.ndarray:
    """transformers' answer at every token (the batch asks for every one)."""
    with torch.inference_mode():
        feeds = tensors(batch)
        return log_probs(original(input_ids=feeds["input_ids"], attention_mask=feeds["attention_mask"]).logits)


def loaded_log_probs(graphs: dict[GraphRole, torch.nn.Module], batch: GraphInputs) -> np.ndarray:
    """What the loaded language-model graph answers in torch."""
    with torch.inference_mode():
        return graphs[GraphRole.LANGUAGE_MODEL](**tensors(batch)).numpy()


def exported_log_probs(report: ExportReport, batch: GraphInputs) -> np.ndarray:
    """What onnxruntime answers with the exported language-model graph."""
    (graph,) = (graph for graph in report.graphs if graph.triton_name == f"{report.model}_language_model")
    session = onnxruntime.InferenceSession(str(graph.version_dir / graph.onnx_files[0]))
    return session.run(["log_probs"], batch.feeds)[0]


@pytest.mark.e2e
@pytest.mark.parametrize(("name", "compression"), [("esm2nv", ""), ("esm1nv", "gz")])
def test_nemo_checkpoint_loads_as_the_same_model_and_exports(name: str, compression: str, tmp_path: Path) -> None:
    description = MODELS[name]
    original = hf_model(name, seed=5)
    # Erf GELU, as ESM-2nv trains it (bias_gelu_fusion off); the fused tanh GELU has its own test.
    config = megatron_config(name, bias_gelu_fusion=False)
    # ESM-2nv names a HuggingFace tokenizer and packs no file; here ESM-1nv packs ESM's alphabet, sentencepiece style.
    artifacts = {} if name == "esm2nv" else {VOCABULARY_MEMBER: sentencepiece_vocabulary(ESM_ALPHABET)}
    if artifacts:
        config["tokenizer"] = tokenizer_config(VOCABULARY_MEMBER)
    nemo = write_nemo(tmp_path / f"{name}.nemo", config, megatron_state_dict(original), compression, artifacts)

    loaded = load_for_export(description, nemo).graphs[GraphRole.ENCODER]
    expected, _ = hidden_states(EncoderGraph(original.esm), description)
    np.testing.assert_allclose(hidden_states(loaded, description)[0], expected, rtol=0, atol=1e-5)

    report = export_model(description, nemo, tmp_path / "repository", runtimes=())
    exported = [(graph.triton_name, graph.parity.batches) for graph in report.graphs]
    assert exported == [(name, 3), (f"{name}_language_model", 3), (f"{name}_layers", 3)]
    assert all(graph.parity.max_abs_diff < 1e-4 for graph in report.graphs)
    batch = masked_batch(description)
    real = batch.compared["log_probs"]
    expected_log_probs = source_log_probs(original, batch)[real]
    np.testing.assert_allclose(exported_log_probs(report, batch)[real], expected_log_probs, rtol=0, atol=1e-4)


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


@pytest.mark.e2e
def test_a_nemo_without_the_head_exports_no_language_model_and_says_why(tmp_path: Path) -> None:
    original = hf_model("esm2nv", seed=10)
    nemo = write_nemo(tmp_path / "bare.nemo", megatron_config("esm2nv"), megatron_state_dict(original, head=False))
    report = export_model(MODELS["esm2nv"], nemo, tmp_path / "repository", runtimes=())
    assert [graph.triton_name for graph in report.graphs] == ["esm2nv", "esm2nv_layers"]
    why = "the checkpoint has no language-model head; esm2nv serves no logits, score"
    assert report.left_out["esm2nv_language_model"] == why


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
