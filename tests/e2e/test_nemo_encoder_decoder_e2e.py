"""BioNeMo MegaMolBART and ProtT5nv `.nemo` checkpoints: NeMo's Megatron encoder-decoder, written from a small MBart,
loaded as the same model and exported through the parity gate.

As for ESM, the Megatron state dict is written by hand (support/nemo_encoder_decoder.py, the inverse of
bionemo_serving/exporter/nemo/encoder_decoder.py's tables), so a mistake in the tables cannot cancel itself out. The
reference is an MBart as Megatron computes: no embedding LayerNorm, Megatron's GELU. What the loader refuses is
tests/unit/test_nemo_encoder_decoder.py's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import MBartForConditionalGeneration

from bionemo_serving.exporter import export_model
from bionemo_serving.exporter.architectures import load_for_export
from bionemo_serving.exporter.exportable import EncoderGraph
from bionemo_serving.exporter.graph_inputs import cross_attention_inputs, decoder_step_inputs
from bionemo_serving.exporter.incremental_decoder import IncrementalDecoder
from bionemo_serving.model_catalog import MODELS, GraphRole
from bionemo_serving.preprocessing.smiles import MEGAMOLBART_TOKENS, VOCABULARY_FILE
from bionemo_serving.preprocessing.vocabularies import PROTT5_BASE_VOCABULARY, PROTT5_TOKENS
from support.nemo_checkpoints import hidden_states, sentencepiece_vocabulary, tokenizer_config, write_nemo
from support.nemo_encoder_decoder import (
    MEGAMOLBART_VOCABULARY,
    POSITIONS,
    PROTT5_VOCABULARY,
    hf_model,
    megatron_config,
    megatron_state_dict,
    regex_tokenizer,
)


def assert_decoders_agree(loaded: IncrementalDecoder, original: MBartForConditionalGeneration) -> None:
    """Both parts of the incremental decoder: cross-attention keys and values, and the next token's logits and keys and
    values after 0 and 12 cached tokens, on padded batches of mixed lengths."""
    description, rng = MODELS["megamolbart"], np.random.default_rng(4)
    reference = {GraphRole.ENCODER: EncoderGraph(original.get_encoder()), GraphRole.DECODER: IncrementalDecoder(original)}
    for lengths, decoded in (([1, 9, 60], 0), ([30, 5], 12)):
        cross = cross_attention_inputs(description, reference, lengths, rng).feeds["encoder_hidden_states"]
        step = decoder_step_inputs(description, reference, lengths, decoded, rng).feeds
        expected, tensors = reference[GraphRole.DECODER], {name: torch.from_numpy(array) for name, array in step.items()}
        with torch.inference_mode():
            pairs = [(loaded.cross_attention(torch.from_numpy(cross)), expected.cross_attention(torch.from_numpy(cross)))]
            pairs += zip(loaded.step(*tensors.values()), expected.step(*tensors.values()))  # in the graph's order
        for got, expected in pairs:
            np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=0, atol=1e-5)


ERF_GELU = {"bias_activation_fusion": False}
MEGAMOLBART_LAYOUTS = [
    # BioNeMo's pretrain_base.yaml: one set of fields, fused (tanh) GELU, a token head of its own and so, in NeMo's
    # reading of such configs, no head bias; the vocabulary file packed.
    pytest.param(
        megatron_config(False, share_decoder_tokens_head_embeddings=False, tokenizer=regex_tokenizer()),
        {"tanh_gelu": True, "shared_tokens": True, "shared_head": False, "head_bias": False},
        ("weight",),
        "gz",
        id="bionemo-flat",
    ),
    # Sections, erf GELU, separate encoder and decoder embeddings, the token head on the word embeddings with a bias.
    pytest.param(
        megatron_config(True, ERF_GELU, ERF_GELU, share_token_embeddings=False),
        {"tanh_gelu": False, "shared_tokens": False, "shared_head": True, "head_bias": True},
        ("bias",),
        "",
        id="sections",
    ),
]


@pytest.mark.parametrize(("config", "flags", "head", "compression"), MEGAMOLBART_LAYOUTS)
def test_megamolbart_checkpoint_loads_as_the_same_model_and_exports(
    config: dict[str, object], flags: dict[str, bool], head: tuple[str, ...], compression: str, tmp_path: Path
) -> None:
    description = MODELS["megamolbart"]
    original = hf_model(len(MEGAMOLBART_TOKENS), 5, **flags)
    state = megatron_state_dict(original, 640, head)
    artifacts = {MEGAMOLBART_VOCABULARY: VOCABULARY_FILE.read_bytes()} if "tokenizer" in config else {}
    nemo = write_nemo(tmp_path / "megamolbart.nemo", config, state, compression, artifacts)

    loaded = load_for_export(description, nemo)
    assert loaded.max_positions == POSITIONS
    expected, _ = hidden_states(EncoderGraph(original.get_encoder()), description)
    encoder = loaded.graphs[GraphRole.ENCODER]
    np.testing.assert_allclose(hidden_states(encoder, description)[0], expected, rtol=0, atol=1e-5)
    assert_decoders_agree(loaded.graphs[GraphRole.DECODER], original)

    # The ONNX files alone: every runtime's conversion of these graphs is test_exporter's and test_runtime_choice's.
    report = export_model(description, nemo, tmp_path / "repository", runtimes=())
    names = [description.triton_name(role) for role in (GraphRole.ENCODER, GraphRole.DECODER, GraphRole.LAYERS)]
    assert [(graph.triton_name, graph.parity.batches) for graph in report.graphs] == [(name, 3) for name in names]
    assert all(graph.parity.max_abs_diff < 1e-4 for graph in report.graphs)


def test_prott5nv_checkpoint_serves_its_encoder(tmp_path: Path) -> None:
    """ProtT5nv is NeMo's Megatron T5 (learned positions, LayerNorm, biases, GELU): its encoder as an MBart encoder."""
    description = MODELS["prott5nv"]
    flags = {"tanh_gelu": True, "shared_tokens": True, "shared_head": True, "head_bias": True}
    original = hf_model(len(PROTT5_TOKENS), 6, **flags, positions=POSITIONS)
    tokenizer = tokenizer_config(PROTT5_VOCABULARY)
    config = megatron_config(True, tokenizer=tokenizer, max_position_embeddings=POSITIONS)
    artifacts = {PROTT5_VOCABULARY: sentencepiece_vocabulary(PROTT5_BASE_VOCABULARY)}
    nemo = write_nemo(tmp_path / "prott5nv.nemo", config, megatron_state_dict(original, 256, ("bias",)), "", artifacts)

    loaded = load_for_export(description, nemo)
    assert list(loaded.graphs) == [GraphRole.ENCODER, GraphRole.LAYERS] and loaded.max_positions == POSITIONS
    expected, _ = hidden_states(EncoderGraph(original.get_encoder()), description)
    encoder = loaded.graphs[GraphRole.ENCODER]
    np.testing.assert_allclose(hidden_states(encoder, description)[0], expected, rtol=0, atol=1e-5)

    report = export_model(description, nemo, tmp_path / "repository", runtimes=())
    names = ["prott5nv", "prott5nv_layers"]
    assert [(graph.triton_name, graph.parity.batches) for graph in report.graphs] == [(name, 3) for name in names]
    assert all(graph.parity.max_abs_diff < 1e-4 for graph in report.graphs)
