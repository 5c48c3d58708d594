"""Inputs for tracing and verifying each graph: padded batches of random content tokens of mixed lengths."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bionemo_serving.model_catalog import GraphRole, ModelDescription
from bionemo_serving.preprocessing import tokenizer_for
from bionemo_serving.runtimes.step_caches import layer_caches


@dataclass(frozen=True)
class GraphInputs:
    feeds: dict[str, np.ndarray]
    compared: dict[str, np.ndarray]
    """Where an output must agree (hidden states: at real tokens); an output not named: everywhere."""


def encoder_inputs(description: ModelDescription, lengths: list[int], rng: np.random.Generator) -> GraphInputs:
    tokenizer = tokenizer_for(description)
    rows = [tokenizer.wrap(rng.choice(tokenizer.content_ids, size=length)) for length in lengths]
    batch = tokenizer.pad(rows)
    return GraphInputs(batch.model_inputs(), {"hidden_states": batch.attention_mask.astype(bool)})


def language_model_inputs(description: ModelDescription, lengths: list[int], rng: np.random.Generator) -> GraphInputs:
    """As `encoder_inputs`, with <mask> at random residues: none in the first row, more in each row after (up to
    every residue), so that ESM-2's token dropout, which rescales by the share of masks, is held to torch too. Each row
    asks for POSITIONS_PER_ROW of its real tokens, at random (masked or not), the first row its first and last."""
    tokenizer = tokenizer_for(description)
    batch = encoder_inputs(description, lengths, rng).feeds
    input_ids = batch["input_ids"].copy()
    for row, length in enumerate(lengths):
        masked = rng.choice(length, size=min(row * row, length), replace=False) + len(tokenizer.prefix_ids)
        input_ids[row, masked] = tokenizer.mask_id
    tokens = batch["attention_mask"].sum(axis=1)
    positions = np.stack([rng.integers(count, size=POSITIONS_PER_ROW) for count in tokens])
    positions[0, :2] = [0, tokens[0] - 1]
    return GraphInputs({"input_ids": input_ids, "attention_mask": batch["attention_mask"], "positions": positions}, {})


POSITIONS_PER_ROW = 3


def layers_inputs(
    description: ModelDescription, graphs: dict[GraphRole, torch.nn.Module], lengths: list[int], rng: np.random.Generator
) -> GraphInputs:
    """As `encoder_inputs`, each row asking for LAYERS_PER_ROW layers of its own: the first the embeddings', the last
    and one between; the others at random."""
    batch = encoder_inputs(description, lengths, rng)
    outputs = graphs[GraphRole.LAYERS].encoder.config.num_hidden_layers + 1
    layers = rng.integers(outputs, size=(len(lengths), LAYERS_PER_ROW))
    layers[0] = [0, outputs - 1, outputs // 2]
    real = np.repeat(batch.feeds["attention_mask"].astype(bool)[:, None], LAYERS_PER_ROW, axis=1)
    return GraphInputs(batch.feeds | {"layers": layers}, {"layer_hidden_states": real})


LAYERS_PER_ROW = 3


def contacts_inputs(description: ModelDescription, lengths: list[int], rng: np.random.Generator) -> GraphInputs:
    """As `encoder_inputs`; contacts are compared between real residues."""
    feeds = encoder_inputs(description, lengths, rng).feeds
    residues = feeds["pooling_mask"][:, 1:-1].astype(bool)
    return GraphInputs(
        {"input_ids": feeds["input_ids"], "attention_mask": feeds["attention_mask"]},
        {"contacts": residues[:, :, None] & residues[:, None, :]},
    )


def cross_attention_inputs(
    description: ModelDescription, graphs: dict[GraphRole, torch.nn.Module], lengths: list[int], rng: np.random.Generator
) -> GraphInputs:
    """The torch encoder's states of a padded batch: what the decoder's cross-attention part reads once per source."""
    return GraphInputs({"encoder_hidden_states": _encoded(description, graphs, lengths, rng)[0]}, {})


def decoder_step_inputs(
    description: ModelDescription,
    graphs: dict[GraphRole, torch.nn.Module],
    lengths: list[int],
    decoded: int,
    rng: np.random.Generator,
) -> GraphInputs:
    """A incremental decoder step after `decoded` tokens or fewer, against the torch encoder's states of a padded batch.

    Every other row has decoded 0 to `decoded` tokens (its cache right-padded), as rows have when requests that
    started at different steps share a call; the cached keys and values are random, the cross-attention's real.
    """
    tokenizer = tokenizer_for(description)
    states, encoder_mask = _encoded(description, graphs, lengths, rng)
    with torch.inference_mode():
        cross_kv = graphs[GraphRole.DECODER].cross_attention(torch.from_numpy(states)).numpy()
    rows, (layers, _, heads, _, head_dim) = len(lengths), cross_kv.shape[1:]
    counts = np.full(rows, decoded, dtype=np.int64)
    counts[1::2] = rng.integers(decoded + 1, size=len(counts[1::2]))
    self_kv = rng.standard_normal((rows, layers, 2, heads, decoded, head_dim)).astype(np.float32)
    feeds = {
        "token": rng.choice(tokenizer.content_ids, size=rows).astype(np.int64),
        "position": counts,
        "self_mask": (np.arange(decoded) < counts[:, None]).astype(np.int64),
        "encoder_mask": encoder_mask,
        **layer_caches(self_kv, cross_kv),
    }
    return GraphInputs(feeds, {})


def _encoded(
    description: ModelDescription, graphs: dict[GraphRole, torch.nn.Module], lengths: list[int], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The torch encoder's hidden states [batch, length, hidden] of random sources of `lengths`, and their mask."""
    source = encoder_inputs(description, lengths, rng).feeds
    with torch.inference_mode():
        states, _ = graphs[GraphRole.ENCODER](**{name: torch.from_numpy(array) for name, array in source.items()})
    return states.numpy(), source["attention_mask"]


def verification_inputs(
    description: ModelDescription, role: GraphRole, graphs: dict[GraphRole, torch.nn.Module], seed: int, part: str = "model"
) -> list[GraphInputs]:
    """Batches of very different lengths, so every batch carries heavy padding; other shapes than the trace's.

    `part` names the ONNX graph of a graph made of several (model_catalog.OnnxGraph).
    """
    rng = np.random.default_rng(seed)
    longest = min(description.max_length, 300)
    length_sets = ([1, 9, longest // 4, longest], [longest // 2], [5, 3, 17])
    if role is GraphRole.ENCODER:
        return [encoder_inputs(description, lengths, rng) for lengths in length_sets]
    if role is GraphRole.LANGUAGE_MODEL:
        return [language_model_inputs(description, lengths, rng) for lengths in length_sets]
    if role is GraphRole.LAYERS:
        return [layers_inputs(description, graphs, lengths, rng) for lengths in length_sets]
    if role is GraphRole.CONTACTS:
        return [contacts_inputs(description, lengths, rng) for lengths in length_sets]
    if part == "cross_attention":
        return [cross_attention_inputs(description, graphs, lengths, rng) for lengths in length_sets]
    return [decoder_step_inputs(description, graphs, lengths, decoded, rng) for lengths, decoded in zip(length_sets, (0, 6, 19))]


def trace_inputs(
    description: ModelDescription, role: GraphRole, graphs: dict[GraphRole, torch.nn.Module], part: str = "model"
) -> GraphInputs:
    rng = np.random.default_rng(1234)
    if role is GraphRole.ENCODER:
        return encoder_inputs(description, [10, 4], rng)
    if role is GraphRole.LANGUAGE_MODEL:
        return language_model_inputs(description, [10, 4], rng)
    if role is GraphRole.LAYERS:
        return layers_inputs(description, graphs, [10, 4], rng)
    if role is GraphRole.CONTACTS:
        return contacts_inputs(description, [10, 4], rng)
    if part == "cross_attention":
        return cross_attention_inputs(description, graphs, [10, 4], rng)
    return decoder_step_inputs(description, graphs, [10, 4], 3, rng)
