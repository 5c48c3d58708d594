"""What a checkpoint loader returns, and what the loaders of both checkpoint formats build it from.

`bionemo_serving.exporter.architectures` loads HuggingFace folders and `bionemo_serving.exporter.nemo` BioNeMo
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

from bionemo_serving.exporter.errors import CheckpointError
from bionemo_serving.model_catalog import SCORED_AMINO_ACIDS, Architecture, GraphRole, GraphSpec, OnnxGraph
from bionemo_serving.preprocessing.smiles import MEGAMOLBART_TOKENS
from bionemo_serving.preprocessing.vocabularies import ESM_ALPHABET


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


class LayersGraph(torch.nn.Module):
    """(input_ids, attention_mask, pooling_mask, layers) -> (layer_hidden_states, layer_embeddings): the layers graph.

    Each row names the layers it wants, as transformers' `output_hidden_states` numbers them (0: the embedding
    layer's output; the last: what the encoder graph serves), and gets their hidden states and their means over the
    pooling mask: a row of one layer of 33 carries one layer's states out of Triton, not all of them.
    """

    def __init__(self, encoder: torch.nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, pooling_mask: torch.Tensor, layers: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        outputs = self.encoder(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        every = torch.stack(outputs.hidden_states, dim=1)  # [batch, layers + 1, tokens, hidden]
        index = layers[:, :, None, None].expand(-1, -1, every.shape[2], every.shape[3])
        chosen = torch.gather(every, 1, index)
        weights = pooling_mask[:, None, :, None].to(chosen.dtype)
        return chosen, (chosen * weights).sum(dim=2) / weights.sum(dim=2)


def encoder_graphs(encoder: torch.nn.Module) -> dict[GraphRole, torch.nn.Module]:
    """The graphs every encoder gives: the encoder graph and the layers graph, over the same module."""
    return {GraphRole.ENCODER: EncoderGraph(encoder), GraphRole.LAYERS: LayersGraph(encoder)}


def hidden_layers(config: Any) -> dict[str, int]:
    """The `hidden_layers` size: the hidden states an encoder of `config` outputs, its layers' and the embeddings'."""
    return {"hidden_layers": config.num_hidden_layers + 1}


def esm_layer_inputs(
    esm: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None, torch.Tensor | None]:
    """What each layer of transformers' EsmModel takes, built as its forward builds it: the embeddings' output (ESM-2's
    token dropout included), the rotary tables (None for ESM-1's learned positions) and the bidirectional mask."""
    from transformers.masking_utils import create_bidirectional_mask

    hidden = esm.embeddings(input_ids=input_ids, attention_mask=attention_mask)
    rotary = None
    if esm.rotary_embeddings is not None:
        rotary = esm.rotary_embeddings(hidden, torch.arange(hidden.shape[1], device=hidden.device)[None])
    mask = create_bidirectional_mask(config=esm.config, inputs_embeds=hidden, attention_mask=attention_mask)
    return hidden, rotary, mask


class ContactsGraph(torch.nn.Module):
    """(input_ids, attention_mask) -> contacts [batch, tokens - 2, tokens - 2]: transformers' `EsmModel.predict_contacts`
    (every layer's attention maps, symmetrized and APC-corrected, through the logistic contact head; <cls> and
    <eos> dropped). A padded row's residues get what the row alone gets: padding and <eos> are zeroed first.

    Each layer's maps become its heads' share of the contact logits as soon as the layer has run: symmetrizing and
    APC act on each map alone and the head is linear in them, so one layer's maps are alive at a time, not every
    layer's stacked as predict_contacts holds them ([batch, layers, heads, tokens, tokens]). At ESM-2 650M's depth
    (33 layers, 20 heads) one 1,022-residue row on onnxruntime left 3.4 GB resident so, 11.7 GB stacked
    (docs/reliability.md: the contacts graph's memory).
    """

    def __init__(self, encoder: torch.nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        from transformers.models.esm.modeling_esm import average_product_correct, symmetrize

        esm, head = self.encoder, self.encoder.contact_head
        hidden, rotary, mask = esm_layer_inputs(esm, input_ids, attention_mask)
        counted = (attention_mask * input_ids.ne(head.eos_idx)).to(hidden.dtype)  # padding and <eos> zeroed
        counted = (counted[:, :, None] * counted[:, None, :])[:, None, 1:-1, 1:-1]  # <cls> and the last token dropped
        layers = esm.encoder.layer
        weights = head.regression.weight.view(len(layers), -1)  # channel layer * heads + head, as the head numbers them
        logits = head.regression.bias if head.regression.bias is not None else 0.0
        for layer, heads_weights in zip(layers, weights, strict=True):
            # EsmLayer.forward, keeping the maps its attention returns
            attended, maps = layer.attention.self(
                layer.attention.LayerNorm(hidden), attention_mask=mask, position_embeddings=rotary
            )
            hidden = layer.feed_forward_chunk(layer.attention.output(attended, hidden))
            features = average_product_correct(symmetrize(maps[..., 1:-1, 1:-1] * counted))
            logits = logits + torch.einsum("bhij,h->bij", features, heads_weights)
        return head.activation(logits)


class LanguageModelGraph(torch.nn.Module):
    """(input_ids, attention_mask, positions) -> log_probs [batch, positions, 20]: the language-model graph.

    Each row asks for the token positions whose log-probabilities it wants: every token (/logits), or a masked copy's
    masked positions (/score). Every layer but the last runs at every token, as transformers' EsmForMaskedLM does; the
    last runs its queries, and the head, at the positions asked alone (its keys and values at every token): a masked
    copy of a scan asks for one position of 300, and that cut its pass from 32.5 to 28.5 ms (esm2nv, OpenVINO,
    2 threads, AMD EPYC). The log-softmax is over the model's whole vocabulary; only the SCORED_AMINO_ACIDS' columns
    leave the graph, the only ones /logits and /score read (20 of 33 values per token). ESM-2's token dropout, which
    rescales the embeddings by the share of <mask> tokens, is in the traced graph.
    """

    def __init__(self, masked_lm: torch.nn.Module) -> None:
        super().__init__()
        self.masked_lm = masked_lm
        amino_acids = [ESM_ALPHABET.index(residue) for residue in SCORED_AMINO_ACIDS]
        self.register_buffer("amino_acids", torch.tensor(amino_acids), persistent=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        from transformers.models.esm.modeling_esm import apply_rotary_pos_emb, eager_attention_forward

        esm = self.masked_lm.esm
        hidden, rotary, mask = esm_layer_inputs(esm, input_ids, attention_mask)
        *layers, last = esm.encoder.layer
        for layer in layers:
            hidden = layer(hidden, attention_mask=mask, position_embeddings=rotary)

        rows = positions.shape[0]
        attention = last.attention.self
        heads, head_size = attention.num_attention_heads, attention.attention_head_size
        at_positions = positions[:, :, None].expand(-1, -1, hidden.shape[-1])
        normed = last.attention.LayerNorm(hidden)
        query = attention.query(torch.gather(normed, 1, at_positions)).view(rows, -1, heads, head_size)
        key = attention.key(normed).view(rows, -1, heads, head_size)
        value = attention.value(normed).view(rows, -1, heads, head_size).transpose(1, 2)
        query, key = query.transpose(1, 2) * head_size**-0.5, key.transpose(1, 2)  # ESM scales before rotating
        if rotary is not None:
            cos, sin = rotary  # [1, tokens, head_size]
            at_query = positions[:, :, None].expand(-1, -1, head_size)
            cos_query, sin_query = (torch.gather(table.expand(rows, -1, -1), 1, at_query) for table in rotary)
            query, _ = apply_rotary_pos_emb(query, query, cos_query, sin_query)
            key, _ = apply_rotary_pos_emb(key, key, cos, sin)
        # The attention the other layers run (eager or sdpa, which the exporter sets per runtime), on the padding
        # mask's first query row, once per position asked: every row of a bidirectional mask is the same.
        if mask is not None:
            mask = mask[:, :, :1].expand(-1, -1, positions.shape[1], -1)
        attend = ALL_ATTENTION_FUNCTIONS.get_interface(esm.config._attn_implementation, eager_attention_forward)
        attended, _ = attend(attention, query, key, value, mask, scaling=1.0)
        attended = attended.reshape(rows, -1, heads * head_size)
        hidden = last.feed_forward_chunk(last.attention.output(attended, torch.gather(hidden, 1, at_positions)))
        logits = self.masked_lm.lm_head(esm.encoder.emb_layer_norm_after(hidden))
        return torch.log_softmax(logits, dim=-1).index_select(-1, self.amino_acids)


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


def encoder_only(
    encoder: torch.nn.Module, masked_lm: torch.nn.Module | None = None, contacts: bool = False
) -> ExportableModel:
    """An encoder-only checkpoint's model as its encoder and layers graphs, sized by its config; with `masked_lm` (the
    encoder under its language-model head, for a checkpoint that has one), its language-model graph too; with
    `contacts` (an ESM checkpoint with its contact head), its contacts graph."""
    config = encoder.config
    # ESM numbers learned positions from padding_idx + 1 (fairseq); rotary (ESM-2) and relative (T5) have no table.
    learned = getattr(config, "position_embedding_type", None) == "absolute"
    graphs = encoder_graphs(encoder)
    if masked_lm is not None:
        graphs[GraphRole.LANGUAGE_MODEL] = LanguageModelGraph(masked_lm)
    if contacts:
        graphs[GraphRole.CONTACTS] = ContactsGraph(encoder)
    return ExportableModel(
        graphs=graphs,
        sizes={"hidden_size": config.hidden_size, **hidden_layers(config)},
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
