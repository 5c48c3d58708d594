"""BioNeMo MegaMolBART and ProtT5nv `.nemo` checkpoints: NeMo's Megatron encoder-decoder, written from a small MBart.

As for ESM, the Megatron state dict is written by hand (support/nemo_encoder_decoder.py, the inverse of
bionemo_serving/exporter/nemo/encoder_decoder.py's tables), so a mistake in the tables cannot cancel itself out. The
reference is an MBart as Megatron computes: no embedding LayerNorm, Megatron's GELU. Here, what the loader refuses or
keeps of a checkpoint; each layout loaded as the same model and exported is
tests/e2e/test_nemo_encoder_decoder_e2e.py's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from bionemo_serving.exporter.architectures import load_for_export
from bionemo_serving.exporter.errors import CheckpointError
from bionemo_serving.model_catalog import MODELS, GraphRole
from bionemo_serving.preprocessing.smiles import MEGAMOLBART_TOKENS
from bionemo_serving.preprocessing.vocabularies import PROTT5_BASE_VOCABULARY
from support.nemo_checkpoints import sentencepiece_vocabulary, tokenizer_config, write_nemo
from support.nemo_encoder_decoder import (
    HEADS,
    HIDDEN,
    MEGAMOLBART_VOCABULARY,
    MODULE,
    PROTT5_VOCABULARY,
    STACKS,
    Weights,
    hf_model,
    megatron_config,
    megatron_state_dict,
    regex_tokenizer,
)


@pytest.fixture
def weights() -> Weights:
    """Weights of the default layout (sections, shared embeddings, token head with a bias), 640 vocabulary rows."""
    flags = {"tanh_gelu": True, "shared_tokens": True, "shared_head": True, "head_bias": True}
    return megatron_state_dict(hf_model(len(MEGAMOLBART_TOKENS), 7, **flags), 640, ("bias",))


@pytest.mark.parametrize("name", ["megamolbart", "prott5nv"])
def test_unknown_key_is_named_even_in_the_unused_decoder(name: str, weights: Weights, tmp_path: Path) -> None:
    key = f"{STACKS}decoder.model.layers.0.inter_attention.adapter.weight"
    weights[key] = torch.zeros(2)
    nemo = write_nemo(tmp_path / "extra.nemo", megatron_config(True), weights)
    with pytest.raises(CheckpointError, match=rf"extra\.nemo: model_weights\.ckpt: unknown key '{re.escape(key)}'"):
        load_for_export(MODELS[name], nemo)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("megamolbart", f"{STACKS}decoder.model.layers.1.inter_attention.key_value.bias"),
        ("megamolbart", f"{MODULE}tokens_head.bias"),
        ("prott5nv", f"{STACKS}encoder.model.layers.1.post_attention_layernorm.weight"),
    ],
)
def test_missing_key_is_named(name: str, key: str, weights: Weights, tmp_path: Path) -> None:
    del weights[key]
    nemo = write_nemo(tmp_path / "short.nemo", megatron_config(True), weights)
    with pytest.raises(CheckpointError, match=rf"short\.nemo: model_weights\.ckpt: missing key '{re.escape(key)}'"):
        load_for_export(MODELS[name], nemo)


def test_shape_mismatch_names_the_key_and_both_shapes(weights: Weights, tmp_path: Path) -> None:
    key = f"{STACKS}decoder.model.layers.0.inter_attention.key_value.weight"
    weights[key] = torch.zeros(2 * HIDDEN + 2 * HEADS, HIDDEN)
    nemo = write_nemo(tmp_path / "wide.nemo", megatron_config(True), weights)
    with pytest.raises(CheckpointError, match=rf"'{re.escape(key)}' has shape \(72, 32\);.* \(32, 32\) \+ \(32, 32\)"):
        load_for_export(MODELS["megamolbart"], nemo)


def test_fewer_embedding_rows_than_the_vocabulary_is_named(weights: Weights, tmp_path: Path) -> None:
    key = f"{MODULE}encoder_embedding.word_embeddings.weight"
    weights[key] = weights[key][:500]
    nemo = write_nemo(tmp_path / "small.nemo", megatron_config(True), weights)
    message = rf"'{re.escape(key)}' has 500 rows, fewer than the 523 tokens of the served vocabulary"
    with pytest.raises(CheckpointError, match=message):
        load_for_export(MODELS["megamolbart"], nemo)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (megatron_config(True, {"transformer_block_type": "post_ln"}), r"'encoder\.transformer_block_type'='post_ln'"),
        (megatron_config(True, decoder={"normalization": "rmsnorm"}), r"'decoder\.normalization'='rmsnorm'"),
        (megatron_config(False, {"activation": "swiglu"}), r"'activation'='swiglu'; megamolbart needs 'gelu'"),
        (megatron_config(True, decoder={"position_embedding_type": "relative"}), r"'decoder\.position_embedding_type'"),
        (megatron_config(True, {"bias": False}), r"'encoder\.bias'=False; megamolbart needs True"),
        (megatron_config(True, {"normalize_attention_scores": False}), r"'encoder\.normalize_attention_scores'=False"),
        (megatron_config(False, decoder_arch="perceiver"), r"'decoder_arch'='perceiver'; megamolbart needs 'trans"),
        (megatron_config(False, kv_channels=16), r"'kv_channels'=16; HuggingFace attention needs hidden_size / num"),
        (megatron_config(True, tensor_model_parallel_size=2), r"'tensor_model_parallel_size'=2; must be 1 \(merge"),
        (megatron_config(True, decoder={"hidden_size": 64}), r"'decoder\.hidden_size'=64; must be the encoder's"),
        (megatron_config(True, {"num_layers": None}), r"'encoder\.num_layers' is missing"),
    ],
)
def test_settings_mbart_cannot_reproduce_are_refused_naming_the_field(
    config: dict[str, object], message: str, weights: Weights, tmp_path: Path
) -> None:
    nemo = write_nemo(tmp_path / "config.nemo", config, weights)
    with pytest.raises(CheckpointError, match=rf"config\.nemo: model_config\.yaml: {message}"):
        load_for_export(MODELS["megamolbart"], nemo)


def test_each_half_keeps_its_layer_norm_epsilon(weights: Weights, tmp_path: Path) -> None:
    """MBartConfig has no epsilon (nn.LayerNorm's 1e-5 throughout); Megatron sets one per half."""
    config = megatron_config(True, {"layernorm_epsilon": 1e-6}, {"layernorm_epsilon": "1e-3"})
    nemo = write_nemo(tmp_path / "eps.nemo", config, weights)
    model = load_for_export(MODELS["megamolbart"], nemo).graphs[GraphRole.DECODER].step.seq2seq.model
    for half, epsilon in ((model.encoder, 1e-6), (model.decoder, 1e-3)):
        assert {module.eps for module in half.modules() if isinstance(module, torch.nn.LayerNorm)} == {epsilon}


def test_a_megamolbart_vocabulary_other_than_the_served_one_is_refused(weights: Weights, tmp_path: Path) -> None:
    tokens = list(MEGAMOLBART_TOKENS)
    tokens[300] = "[Xx]"
    artifacts = {MEGAMOLBART_VOCABULARY: "\n".join(tokens).encode()}
    config = megatron_config(True, tokenizer=regex_tokenizer())
    nemo = write_nemo(tmp_path / "vocab.nemo", config, weights, "", artifacts)
    ours = re.escape(MEGAMOLBART_TOKENS[300])
    member = re.escape(MEGAMOLBART_VOCABULARY)
    found = rf"vocab\.nemo/{member}: token id 300 is '\[Xx\]', the service's tokenizer has '{ours}'"
    with pytest.raises(CheckpointError, match=rf"{found} there; .*tokenizes with MegaMolBART's regex vocabulary"):
        load_for_export(MODELS["megamolbart"], nemo)


def test_a_prott5nv_vocabulary_other_than_the_served_one_is_refused(weights: Weights, tmp_path: Path) -> None:
    """A sentencepiece vocabulary with other special tokens first (BioNeMo's protein one has <pad> at 3) is refused."""
    pieces = sentencepiece_vocabulary(("<unk>", "<s>", "</s>", "<pad>", *PROTT5_BASE_VOCABULARY[3:]))
    config = megatron_config(True, tokenizer=tokenizer_config(PROTT5_VOCABULARY))
    nemo = write_nemo(tmp_path / "spm.nemo", config, weights, "", {PROTT5_VOCABULARY: pieces})
    found = rf"{re.escape(PROTT5_VOCABULARY)}: token id 0 is '<unk>', the service's tokenizer has '<pad>' there"
    with pytest.raises(CheckpointError, match=rf"{found}; .*tokenizes with ProtT5's sentencepiece vocabulary"):
        load_for_export(MODELS["prott5nv"], nemo)
