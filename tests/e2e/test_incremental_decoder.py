"""The key-value-incremental decoder's graphs give transformers' logits of whole prefixes, in torch and on every runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import MBartForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput

from bionemo_serving.exporter.graph_inputs import GraphInputs
from bionemo_serving.exporter.incremental_decoder import IncrementalDecoder
from bionemo_serving.exporter.onnx_export import export_onnx
from bionemo_serving.exporter.runtime_export import CONVERTERS
from bionemo_serving.model_catalog import DECODER, MODELS, OnnxGraph
from bionemo_serving.preprocessing.smiles import SmilesTokenizer
from bionemo_serving.runtimes.engines import Engine, Runtime, open_engine
from bionemo_serving.runtimes.step_caches import layer_caches
from support.paths import CHECKPOINTS
from support.runtimes import DECODER_RUNTIMES

pytestmark = pytest.mark.e2e

SOURCE_MOLECULES = ("N#Cc1ccc(S(=O)(=O)N2CCC(F)CC2)cc1", "O=C(NC1CC1)c1cnn(C)c1Br", "Clc1ccsc1")

Source = tuple[torch.Tensor, torch.Tensor]


@pytest.fixture(scope="module")
def seq2seq() -> MBartForConditionalGeneration:
    return MBartForConditionalGeneration.from_pretrained(CHECKPOINTS / "megamolbart", attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def source(seq2seq: MBartForConditionalGeneration) -> Source:
    """The latents of three molecules of different lengths (so rows are padded), which greedy decoding spells out
    in many different tokens."""
    tokenizer = SmilesTokenizer(MODELS["megamolbart"].max_length)
    batch = tokenizer.pad([tokenizer.encode(smiles) for smiles in SOURCE_MOLECULES])
    ids, mask = torch.from_numpy(batch.input_ids), torch.from_numpy(batch.attention_mask)
    with torch.inference_mode():
        states = seq2seq.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
    return states, mask


def whole_prefix_logits(
    seq2seq: MBartForConditionalGeneration, ids: torch.Tensor, states: torch.Tensor, mask: torch.Tensor
) -> np.ndarray:
    """transformers' logits of each row's next token, decoding the whole prefix without a cache."""
    with torch.inference_mode():
        output = seq2seq(
            encoder_outputs=BaseModelOutput(last_hidden_state=states), attention_mask=mask, decoder_input_ids=ids
        )
    return output.logits[:, -1].numpy()


def step_feeds(
    token: np.ndarray, position: np.ndarray, self_kv: np.ndarray, self_mask: np.ndarray, cross_kv: np.ndarray,
    encoder_mask: np.ndarray,
) -> dict[str, np.ndarray]:
    """The step graph's inputs, in its order, from caches of every layer [rows, layers, 2, heads, positions, dim]."""
    named = {"token": token, "position": position, "self_mask": self_mask, "encoder_mask": encoder_mask}
    return named | layer_caches(self_kv, cross_kv)


def greedy_with_cache(
    seq2seq: MBartForConditionalGeneration, states: torch.Tensor, mask: torch.Tensor, steps: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[tuple[np.ndarray, np.ndarray]]]:
    """Greedy ids, and per step the cached step's logits next to transformers' of the whole prefix."""
    decoder = IncrementalDecoder(seq2seq)
    rows, layers, heads = len(states), len(seq2seq.model.decoder.layers), seq2seq.config.decoder_attention_heads
    ids = torch.full((rows, 1), seq2seq.config.decoder_start_token_id)
    cache = torch.zeros(rows, layers, 2, heads, 0, seq2seq.config.d_model // heads)
    cache_mask = torch.zeros(rows, 0, dtype=torch.int64)
    pairs = []
    with torch.inference_mode():
        cross_kv = decoder.cross_attention(states)
        for step in range(steps):
            expected = whole_prefix_logits(seq2seq, ids, states, mask)
            feeds = step_feeds(ids[:, -1].numpy(), np.full(rows, step), cache.numpy(), cache_mask.numpy(), cross_kv.numpy(),
                               mask.numpy())  # fmt: skip
            logits, token_kv = decoder.step(*(torch.from_numpy(array) for array in feeds.values()))
            pairs.append((logits.numpy(), expected))
            cache = torch.cat((cache, token_kv), dim=4)
            cache_mask = torch.cat((cache_mask, torch.ones(rows, 1, dtype=torch.int64)), dim=1)
            ids = torch.cat((ids, torch.from_numpy(expected.argmax(axis=-1))[:, None]), dim=1)
    return ids, cache, cross_kv, pairs


def test_cached_steps_give_the_full_prefix_logits(seq2seq: MBartForConditionalGeneration, source: Source) -> None:
    ids, _, _, pairs = greedy_with_cache(seq2seq, *source, steps=16)
    assert len(set(ids[:, 1:].flatten().tolist())) > 10  # the comparison has teeth: the tokens change
    for logits, expected in pairs:
        np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-3)


def write_part(runtime: Runtime, module: torch.nn.Module, part: OnnxGraph, sample: GraphInputs, folder: Path) -> Engine:
    """`part` written for `runtime` as the exporter writes it, opened as the backend opens it."""
    path = folder / runtime.file(part.name)
    CONVERTERS.get(runtime, export_onnx)(module, part, sample, path)
    return open_engine(runtime, path, arena=DECODER.arena)


@pytest.mark.parametrize("runtime", DECODER_RUNTIMES, ids=lambda runtime: runtime.value)
def test_every_runtime_takes_ragged_and_empty_caches(
    seq2seq: MBartForConditionalGeneration, source: Source, tmp_path: Path, runtime: Runtime
) -> None:
    """Rows with 6, 2 and 0 tokens decoded share one call, caches right-padded with garbage: each runtime's
    cross-attention and step files equal torch's modules, and each row gets the logits of its own prefix."""
    states, mask = source
    ids, cache, cross_kv, _ = greedy_with_cache(seq2seq, states, mask, steps=6)
    cross_part, step_part = DECODER.parts
    decoder = IncrementalDecoder(seq2seq)
    source_sample = GraphInputs({"encoder_hidden_states": states.numpy()}, {})
    cross_engine = write_part(runtime, decoder.cross_attention, cross_part, source_sample, tmp_path)
    three_decoded = (cache.numpy()[..., :3, :], np.ones((3, 3), dtype=np.int64))
    sample = step_feeds(ids[:, -1].numpy(), np.full(3, 3), *three_decoded, cross_kv.numpy(), mask.numpy())
    step_engine = write_part(runtime, decoder.step, step_part, GraphInputs(sample, {}), tmp_path)
    (exported_cross,) = cross_engine.run(["cross_kv"], {"encoder_hidden_states": states.numpy()}, threads=2)
    assert np.abs(exported_cross - cross_kv.numpy()).max() < 1e-4
    decoded = np.array([6, 2, 0])
    padded_cache = cache.numpy().copy()
    padded_mask = (np.arange(6) < decoded[:, None]).astype(np.int64)
    garbage = np.random.default_rng(1).standard_normal(padded_cache.shape).astype(np.float32) * 1e3
    for row, count in enumerate(decoded):
        padded_cache[row, ..., count:, :] = garbage[row, ..., count:, :]  # a shorter row's padding: masked out
    feeds = step_feeds(ids.numpy()[np.arange(3), decoded], decoded, padded_cache, padded_mask, exported_cross, mask.numpy())
    logits, token_kv = step_engine.run(["logits", "token_kv"], feeds, threads=2)
    with torch.inference_mode():
        expected_logits, expected_token_kv = decoder.step(*(torch.from_numpy(array) for array in feeds.values()))
    assert np.abs(logits - expected_logits.numpy()).max() < 1e-4
    assert np.abs(token_kv - expected_token_kv.numpy()).max() < 1e-4
    assert token_kv.shape == (3, *cache.shape[1:4], 1, cache.shape[5])
    for row, count in enumerate(decoded):
        prefix = ids[row : row + 1, : count + 1]
        expected = whole_prefix_logits(seq2seq, prefix, states[row : row + 1], mask[row : row + 1])[0]
        np.testing.assert_allclose(logits[row], expected, rtol=1e-5, atol=1e-3)
