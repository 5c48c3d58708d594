"""BioNeMo `.nemo` checkpoints: written here in Megatron's layout from a small HF model, loaded and exported.

The Megatron state dict is built by hand in this file (the inverse of
exporter/nemo/esm.py's table, with query_key_value packed head by head as
Megatron does, the masked-LM head as BioNeMo's HF -> .nemo converter writes it),
so a mistake in the tables cannot cancel itself out. The archive helpers here
serve test_nemo_encoder_decoder.py too.
"""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
import yaml
from support.reference import AMINO_ACIDS
from transformers import EsmConfig, EsmForMaskedLM
from transformers.models.esm import modeling_esm

from exporter import export_model
from exporter.architectures import load_for_export
from exporter.errors import CheckpointError
from exporter.exportable import EncoderGraph
from exporter.graph_inputs import GraphInputs, encoder_inputs, language_model_inputs
from exporter.pipeline import ExportReport
from model_catalog import MODELS, GraphRole, ModelDescription
from preprocessing.vocabularies import ESM_ALPHABET

ARTIFACT_HEX = "0b5c1a6f2d3e4f5a6b7c8d9e0f1a2b3c"
"""NeMo names the files it packs `<uuid4 hex>_<file name>` and model_config.yaml refers to them as `nemo:<that>`."""
VOCABULARY_MEMBER = f"{ARTIFACT_HEX}_protein_sequence_sentencepiece.vocab"

HIDDEN, LAYERS, HEADS, FFN = 32, 2, 4, 64
PAD_ID = ESM_ALPHABET.index("<pad>")
MEGATRON_POSITIONS = 512  # ESM-1nv's seq_length; the exporter verifies up to 300 residues
PADDED_VOCABULARY = 128  # make_vocab_size_divisible_by
LM = "model.language_model."

# What BioNeMo's ESM-1nv / ESM-2nv configs set (examples/protein/esm{1,2}nv/conf/base_config.yaml);
# layernorm_epsilon as YAML writes it, which PyYAML reads as a string.
ESM1_CONFIG = {"position_embedding_type": "learned_absolute", "max_position_embeddings": MEGATRON_POSITIONS}
ESM2_CONFIG = {
    "position_embedding_type": "rope",
    "max_position_embeddings": 1024,
    "normalize_attention_scores": False,
    "use_esm_attention": True,
    "esm_gelu": True,
    "bias_gelu_fusion": False,
    "embedding_token_dropout": True,
    "mask_token_id": ESM_ALPHABET.index("<mask>"),
}


def hf_model(name: str, seed: int) -> EsmForMaskedLM:
    """A small random ESM of `name`'s kind with its masked-LM head (decoder tied to the word embeddings, as in
    BioNeMo), every parameter perturbed so that no LayerNorm is the identity."""
    rotary = name == "esm2nv"
    config = EsmConfig(
        vocab_size=len(ESM_ALPHABET), pad_token_id=PAD_ID, mask_token_id=ESM_ALPHABET.index("<mask>"),
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FFN,
        position_embedding_type="rotary" if rotary else "absolute", token_dropout=rotary,
        max_position_embeddings=1024 if rotary else MEGATRON_POSITIONS + PAD_ID + 1,
        emb_layer_norm_before=False, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_eps=1e-5,
    )  # fmt: skip
    torch.manual_seed(seed)
    return perturbed(EsmForMaskedLM(config).eval())


def perturbed(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with every parameter moved by noise, so that no LayerNorm is the identity and no bias zero."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    return model


def pack_per_head(parts: tuple[torch.Tensor, ...], heads: int) -> torch.Tensor:
    """Fused projection rows as Megatron keeps them: head 0's rows of each part, then head 1's, ..."""
    size = len(parts[0]) // heads
    return torch.cat([part[head * size : (head + 1) * size] for head in range(heads) for part in parts])


def padded(rows: torch.Tensor) -> torch.Tensor:
    """Vocabulary rows as Megatron keeps them, padded to PADDED_VOCABULARY; random padding, which must be dropped."""
    return torch.cat((rows, torch.randn(PADDED_VOCABULARY - len(rows), *rows.shape[1:])))


def megatron_state_dict(model: EsmForMaskedLM, head: bool = True) -> dict[str, torch.Tensor]:
    """`model`'s weights under NeMo 1 Megatron-BERT names; with `head`, its masked-LM head as BertLMHead's."""
    hf = model.esm.state_dict()
    state = {
        f"{LM}embedding.word_embeddings.weight": padded(hf["embeddings.word_embeddings.weight"]),
        f"{LM}encoder.final_layernorm.weight": hf["encoder.emb_layer_norm_after.weight"],
        f"{LM}encoder.final_layernorm.bias": hf["encoder.emb_layer_norm_after.bias"],
    }
    if head:
        lm_head = model.lm_head.state_dict()
        state |= {f"model.lm_head.{name}": lm_head[name] for name in ("dense.weight", "dense.bias")}
        state |= {f"model.lm_head.layernorm.{name}": lm_head[f"layer_norm.{name}"] for name in ("weight", "bias")}
        state["model.lm_head.bias"] = padded(lm_head["bias"])
    if model.config.position_embedding_type == "absolute":  # HF numbers positions from padding_idx + 1
        state[f"{LM}embedding.position_embeddings.weight"] = hf["embeddings.position_embeddings.weight"][PAD_ID + 1 :]
    else:
        state[f"{LM}rotary_pos_emb.inv_freq"] = hf["rotary_embeddings.inv_freq"]
    for layer in range(LAYERS):
        source, target = f"encoder.layer.{layer}.", f"{LM}encoder.layers.{layer}."
        for kind in ("weight", "bias"):
            qkv = tuple(hf[f"{source}attention.self.{part}.{kind}"] for part in ("query", "key", "value"))
            state[f"{target}self_attention.query_key_value.{kind}"] = pack_per_head(qkv, HEADS)
            state[f"{target}input_layernorm.{kind}"] = hf[f"{source}attention.LayerNorm.{kind}"]
            state[f"{target}self_attention.dense.{kind}"] = hf[f"{source}attention.output.dense.{kind}"]
            state[f"{target}post_attention_layernorm.{kind}"] = hf[f"{source}LayerNorm.{kind}"]
            state[f"{target}mlp.dense_h_to_4h.{kind}"] = hf[f"{source}intermediate.dense.{kind}"]
            state[f"{target}mlp.dense_4h_to_h.{kind}"] = hf[f"{source}output.dense.{kind}"]
    return state


def megatron_config(name: str, **changes: object) -> dict[str, object]:
    sizes = {"hidden_size": HIDDEN, "num_layers": LAYERS, "num_attention_heads": HEADS, "ffn_hidden_size": FFN}
    config = {**sizes, "layernorm_epsilon": "1e-5", **(ESM2_CONFIG if name == "esm2nv" else ESM1_CONFIG), **changes}
    return {key: value for key, value in config.items() if value is not None}


def write_nemo(
    path: Path,
    config: dict[str, object] | None,
    state: dict[str, torch.Tensor],
    compression: str = "",
    artifacts: dict[str, bytes] | None = None,
) -> Path:
    """A `.nemo` tar as NeMo's save_to writes it (members under ./); no config member when `config` is None."""
    members = {"./model_weights.ckpt": io.BytesIO()}
    torch.save(state, members["./model_weights.ckpt"])
    if config is not None:
        members["./model_config.yaml"] = io.BytesIO(yaml.safe_dump(config).replace("'1e-5'", "1e-5").encode())
    members.update({f"./{name}": io.BytesIO(content) for name, content in (artifacts or {}).items()})
    with tarfile.open(path, f"w:{compression}") as archive:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content.getvalue())
            content.seek(0)
            archive.addfile(info, content)
    return path


def sentencepiece_vocabulary(tokens: tuple[str, ...]) -> bytes:
    """A `.vocab` file as sentencepiece writes it: each piece, a tab, its score."""
    return "".join(f"{token}\t{-index}\n" for index, token in enumerate(tokens)).encode()


def tokenizer_config(vocabulary_member: str) -> dict[str, object]:
    """The `tokenizer:` section of a saved model: the files NeMo packed are `nemo:<member>` (ESM-1nv, ProtT5nv)."""
    files = {"model": vocabulary_member.replace(".vocab", ".model"), "vocab_file": vocabulary_member}
    return {"library": "sentencepiece", "type": None, **{key: f"nemo:{member}" for key, member in files.items()}}


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


def hidden_states(encoder: torch.nn.Module, description: ModelDescription) -> tuple[np.ndarray, np.ndarray]:
    """Final hidden states at the real tokens of a padded batch of mixed lengths."""
    batch = encoder_inputs(description, [1, 7, 40, 250], np.random.default_rng(3))
    with torch.inference_mode():
        states, _ = encoder(**{name: torch.from_numpy(array) for name, array in batch.feeds.items()})
    real = batch.compared["hidden_states"]
    return states.numpy()[real], real


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
