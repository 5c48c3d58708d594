"""MegaMolBART's decoder one token a step, as the torch modules of the `decoder` Triton model's two graphs.

Decoding the whole prefix at every step costs O(steps²) per molecule; these
graphs decode one token per step against the keys and values of the tokens
before it, which the Triton model keeps (bionemo_serving/runtimes/backends/stateful_decoder.py;
the step's cache inputs by name: bionemo_serving/runtimes/step_caches.py):

- `CrossKeyValues`: encoder states -> the cross-attention keys and values of
  every layer, once per source.
- `IncrementalDecoderStep`: the newest token, its position and the caches -> its
  logits and its own self-attention keys and values, which the caller appends.

Both reuse the submodules (and so the weights) of transformers' MBart, whatever
checkpoint they came from; tests hold them against transformers' own decoding.
"""

from __future__ import annotations

from typing import Any

import torch


def _heads(tensor: torch.Tensor, heads: int) -> torch.Tensor:
    """[batch, length, hidden] -> [batch, heads, length, head_dim]."""
    batch, length, hidden = tensor.shape
    return tensor.view(batch, length, heads, hidden // heads).transpose(1, 2)


def _attend(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Scaled (already) query [batch, heads, 1, head_dim] against keys and values; -> [batch, 1, hidden]."""
    weights = torch.softmax(query @ keys.transpose(-1, -2) + bias, dim=-1)
    output = weights @ values
    return output.transpose(1, 2).reshape(query.shape[0], 1, -1)


def _mask_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[batch, length] of 1 (attend) and 0 (padding) -> an additive bias [batch, 1, 1, length]."""
    return ((1 - mask.to(dtype)) * torch.finfo(dtype).min)[:, None, None, :]


class CrossKeyValues(torch.nn.Module):
    """encoder_hidden_states [batch, source, hidden] -> cross_kv [batch, layers, 2, heads, source, head_dim]."""

    def __init__(self, seq2seq: torch.nn.Module) -> None:
        super().__init__()
        self.decoder = seq2seq.model.decoder

    def forward(self, encoder_hidden_states: torch.Tensor) -> torch.Tensor:
        layers = []
        for layer in self.decoder.layers:
            attention = layer.encoder_attn
            keys = _heads(attention.k_proj(encoder_hidden_states), attention.num_heads)
            values = _heads(attention.v_proj(encoder_hidden_states), attention.num_heads)
            layers.append(torch.stack((keys, values), dim=1))
        return torch.stack(layers, dim=1)


class IncrementalDecoderStep(torch.nn.Module):
    """(token [batch], position [batch], self_mask, encoder_mask, *layer caches) -> (logits, token_kv).

    The caches are, in this order, every layer's self-attention keys, then
    values, each [batch, heads, past, head_dim] for the tokens decoded before
    (right-padded, `self_mask` [batch, past] marks them), then every layer's
    cross-attention keys and values [batch, heads, source, head_dim]: one input
    per layer, so that onnxruntime reads each in place. `token_kv` [batch,
    layers, 2, heads, 1, head_dim] are the new token's keys and values.
    """

    def __init__(self, seq2seq: torch.nn.Module) -> None:
        super().__init__()
        self.seq2seq = seq2seq
        self.decoder = seq2seq.model.decoder

    def forward(
        self, token: torch.Tensor, position: torch.Tensor, self_mask: torch.Tensor, encoder_mask: torch.Tensor,
        *caches: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        layers = len(self.decoder.layers)
        self_keys, self_values, cross_keys, cross_values = (caches[i * layers : (i + 1) * layers] for i in range(4))
        decoder = self.decoder
        table = decoder.embed_positions
        positions = torch.nn.functional.embedding(position + table.offset, table.weight)
        hidden = decoder.layernorm_embedding(decoder.embed_tokens(token[:, None]) + positions[:, None])
        past_bias = _mask_bias(self_mask, hidden.dtype)
        cross_bias = _mask_bias(encoder_mask, hidden.dtype)
        token_kv = []
        for index, layer in enumerate(decoder.layers):
            attention = layer.self_attn
            normed = layer.self_attn_layer_norm(hidden)
            query = _heads(attention.q_proj(normed), attention.num_heads) * attention.scaling
            keys = _heads(attention.k_proj(normed), attention.num_heads)
            values = _heads(attention.v_proj(normed), attention.num_heads)
            token_kv.append(torch.stack((keys, values), dim=1))
            # The past and the token itself apart: the cache is only read, never concatenated (copied) with the token.
            past = query @ self_keys[index].transpose(-1, -2) + past_bias
            weights = torch.softmax(torch.cat((past, (query * keys).sum(-1, keepdim=True)), -1), dim=-1)
            attended = weights[..., :-1] @ self_values[index] + weights[..., -1:] * values
            hidden = hidden + attention.out_proj(attended.transpose(1, 2).reshape(query.shape[0], 1, -1))

            attention = layer.encoder_attn
            normed = layer.encoder_attn_layer_norm(hidden)
            query = _heads(attention.q_proj(normed), attention.num_heads) * attention.scaling
            attended = _attend(query, cross_keys[index], cross_values[index], cross_bias)
            hidden = hidden + attention.out_proj(attended)

            normed = layer.final_layer_norm(hidden)
            hidden = hidden + layer.fc2(layer.activation_fn(layer.fc1(normed)))
        hidden = decoder.layer_norm(hidden)[:, 0]
        logits = self.seq2seq.lm_head(hidden) + self.seq2seq.final_logits_bias
        return logits, torch.stack(token_kv, dim=1)


def seq2seq_sizes(config: Any) -> dict[str, int]:
    """The sizes model_catalog's encoder and decoder tensors name, from an MBart config."""
    return {
        "hidden_size": config.d_model,
        "vocab_size": config.vocab_size,
        "decoder_layers": config.decoder_layers,
        "decoder_heads": config.decoder_attention_heads,
        "head_dim": config.d_model // config.decoder_attention_heads,
    }


class IncrementalDecoder(torch.nn.Module):
    """The `decoder` graph's two parts, named as model_catalog.DECODER's ONNX graphs."""

    def __init__(self, seq2seq: torch.nn.Module) -> None:
        super().__init__()
        self.cross_attention = CrossKeyValues(seq2seq)
        self.step = IncrementalDecoderStep(seq2seq)
