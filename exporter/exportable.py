"""What a checkpoint loader returns, and what the loaders of both checkpoint formats build it from.

`exporter.architectures` loads HuggingFace folders and `exporter.nemo` BioNeMo
`.nemo` files; both return an `ExportableModel` (an encoder as `EncoderGraph`,
or `encoder_only`), configure the HuggingFace models with the settings each
family's checkpoints share, and hold the checkpoint's vocabulary to the
service's (`check_token_ids`). This module imports neither loader.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from exporter.errors import CheckpointError
from model_catalog import Architecture, GraphRole, GraphSpec, OnnxGraph
from preprocessing.smiles import MEGAMOLBART_TOKENS
from preprocessing.vocabularies import ESM_ALPHABET


class EncoderGraph(torch.nn.Module):
    """(input_ids, attention_mask, pooling_mask) -> (hidden_states, embeddings): the encoder graph Triton serves.

    `embeddings` is the mean of the final hidden states over the pooling mask,
    computed in the graph so that an embedding leaves Triton as one vector.
    """

    def __init__(self, encoder: torch.nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, pooling_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden_states = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        weights = pooling_mask.unsqueeze(-1).to(hidden_states.dtype)
        return hidden_states, (hidden_states * weights).sum(dim=1) / weights.sum(dim=1)


@dataclass(frozen=True)
class ExportableModel:
    """The loaded checkpoint as the graphs to export, and the sizes their tensor dimensions name."""

    graphs: dict[GraphRole, torch.nn.Module]
    sizes: dict[str, int]
    max_positions: int | None
    """Most tokens one input can have (learned position tables); None where positions are relative or rotary."""

    def module(self, graph: GraphSpec, part: OnnxGraph) -> torch.nn.Module:
        """The torch module `part` of `graph` is traced from: the graph's own, or its attribute of the part's name."""
        module = self.graphs[graph.role]
        return getattr(module, part.name) if graph.parts else module


def encoder_only(encoder: torch.nn.Module) -> ExportableModel:
    """An encoder-only checkpoint's model as its one encoder graph, sized by its config."""
    config = encoder.config
    # ESM numbers learned positions from padding_idx + 1 (fairseq); rotary (ESM-2) and relative (T5) have no table.
    learned = getattr(config, "position_embedding_type", None) == "absolute"
    return ExportableModel(
        graphs={GraphRole.ENCODER: EncoderGraph(encoder)},
        sizes={"hidden_size": config.hidden_size},
        max_positions=config.max_position_embeddings - config.pad_token_id - 1 if learned else None,
    )


def check_token_ids(path: Path, found: Sequence[str], expected: tuple[str, ...]) -> None:
    """The checkpoint's own tokenizer must give every token the id the service's tokenizer gives it.

    The service tokenizes with `preprocessing`; a checkpoint trained with other
    ids would answer every request with plausible numbers for the wrong residues.
    """
    for token_id, (theirs, ours) in enumerate(zip(found, expected)):
        if theirs != ours:
            raise CheckpointError(
                f"{path}: token id {token_id} is {theirs!r}, the service's tokenizer has {ours!r} there; "
                "this checkpoint was trained with another vocabulary"
            )
    if len(found) != len(expected):
        raise CheckpointError(f"{path}: {len(found)} tokens, the service's tokenizer has {len(expected)}")


# Settings every released ESM checkpoint shares (facebook/esm*_UR50* config.json).
ESM_COMMON: dict[str, Any] = {
    "vocab_size": len(ESM_ALPHABET),
    "pad_token_id": ESM_ALPHABET.index("<pad>"),
    "mask_token_id": ESM_ALPHABET.index("<mask>"),
    "max_position_embeddings": 1026,
    "layer_norm_eps": 1e-5,
    "token_dropout": True,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}
ESM_POSITIONS = {
    # facebook/esm1v_t33_650M_UR90S_1 config.json: learned positions, no LayerNorm before the first layer.
    Architecture.ESM1: {"position_embedding_type": "absolute", "emb_layer_norm_before": False},
    Architecture.ESM2: {"position_embedding_type": "rotary", "emb_layer_norm_before": False},
}

# MegaMolBART: pre-LayerNorm encoder-decoder, learned positions, GELU; the
# MegaMolBART special tokens <PAD>=0, ^ (begin)=2, & (end)=3.
MEGAMOLBART_COMMON: dict[str, Any] = {
    "vocab_size": len(MEGAMOLBART_TOKENS),
    "max_position_embeddings": 512,
    "pad_token_id": MEGAMOLBART_TOKENS.index("<PAD>"),
    "bos_token_id": MEGAMOLBART_TOKENS.index("^"),
    "eos_token_id": MEGAMOLBART_TOKENS.index("&"),
    "decoder_start_token_id": MEGAMOLBART_TOKENS.index("^"),
    "forced_eos_token_id": None,
    "activation_function": "gelu",
    "dropout": 0.0,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "scale_embedding": False,
}
