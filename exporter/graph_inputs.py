"""Inputs for tracing and verifying each graph: padded batches of random content tokens of mixed lengths."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from model_catalog import GraphRole, ModelDescription
from preprocessing import tokenizer_for


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


def decoder_step_inputs(
    description: ModelDescription, encoder: torch.nn.Module, lengths: list[int], decoded: int, rng: np.random.Generator
) -> GraphInputs:
    """A decoder step after `decoded` tokens or fewer, attending to the torch encoder's states of a padded batch.

    Every other row is shorter by 1 to `decoded` tokens (right-padded), as rows are when requests that
    started at different steps share a batch.
    """
    tokenizer = tokenizer_for(description)
    source = encoder_inputs(description, lengths, rng).feeds
    with torch.inference_mode():
        states, _ = encoder(**{name: torch.from_numpy(array) for name, array in source.items()})
    prefix = rng.choice(tokenizer.content_ids, size=(len(lengths), decoded))
    decoder_ids = np.concatenate((np.full((len(lengths), 1), tokenizer.begin_id), prefix), axis=1)
    decoder_mask = np.ones_like(decoder_ids)
    for row in range(1, len(lengths), 2) if decoded else ():
        kept = 1 + rng.integers(decoded)  # the begin token and 0 to decoded - 1 tokens
        decoder_ids[row, kept:] = tokenizer.pad_id
        decoder_mask[row, kept:] = 0
    feeds = {
        "decoder_ids": decoder_ids,
        "decoder_mask": decoder_mask,
        "encoder_hidden_states": states.numpy(),
        "encoder_mask": source["attention_mask"],
    }
    return GraphInputs(feeds, {})


def verification_inputs(
    description: ModelDescription, role: GraphRole, graphs: dict[GraphRole, torch.nn.Module], seed: int
) -> list[GraphInputs]:
    """Batches of very different lengths, so every batch carries heavy padding; other shapes than the trace's."""
    rng = np.random.default_rng(seed)
    longest = min(description.max_length, 300)
    length_sets = ([1, 9, longest // 4, longest], [longest // 2], [5, 3, 17])
    if role is GraphRole.ENCODER:
        return [encoder_inputs(description, lengths, rng) for lengths in length_sets]
    encoder = graphs[GraphRole.ENCODER]
    return [decoder_step_inputs(description, encoder, lengths, decoded, rng) for lengths, decoded in zip(length_sets, (0, 6, 19))]


def trace_inputs(description: ModelDescription, role: GraphRole, graphs: dict[GraphRole, torch.nn.Module]) -> GraphInputs:
    rng = np.random.default_rng(1234)
    if role is GraphRole.ENCODER:
        return encoder_inputs(description, [10, 4], rng)
    return decoder_step_inputs(description, graphs[GraphRole.ENCODER], [10, 4], 3, rng)
