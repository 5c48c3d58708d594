"""ESM-1nv and ESM-2nv: NeMo 1 Megatron-BERT (BioNeMo 1.x `ESMnvMegatronBertModel`) as HuggingFace `EsmModel`.

Sources of the names and layouts:
- Megatron (NeMo 1, non-mcore) BERT names and the per-head interleaved
  `query_key_value` packing: NVIDIA/NeMo
  scripts/checkpoint_converters/convert_bert_hf_to_nemo.py (the non-mcore
  branch), and NVIDIA/bionemo-framework
  sub-packages/bionemo-esm2/src/bionemo/esm2/model/convert.py
  (`_import_qkv_weight` / `_export_qkv_weight`: rows are [heads, 3, head_dim]).
- Which layer norm is which in ESM's pre-LayerNorm layer: the same convert.py
  (`linear_qkv.layer_norm_*` <-> `attention.LayerNorm`, `linear_fc1.layer_norm_*`
  <-> `LayerNorm`, `final_layernorm` <-> `emb_layer_norm_after`).
- The ESM-1nv/ESM-2nv modules, their config fields and defaults
  (`ESMnvMegatronBertModel.model_provider_func`), the `lm_head` and the rotary
  `inv_freq` buffer: BioNeMo 1.x bionemo/model/protein/esm1nv/base.py and
  mlp.py (mirrored in ynashed/bionemo-fw-ea), and the ESM-2nv config
  examples/protein/esm2nv/conf/base_config.yaml there.
- The masked-LM head: NeMo v1.23 (BioNeMo 1.8's, setup/Dockerfile)
  nemo/collections/nlp/models/language_modeling/megatron/bert_model.py
  (`BertLMHead`: dense, GELU, layernorm, logits against the weight its caller
  passes, plus `bias`; `BertModel.forward` passes `word_embeddings_weight()`),
  and BioNeMo's own HF -> .nemo converter, which names each key
  (ynashed/bionemo-fw-ea tests/esm2_hf_to_nemo_conversion/convert_hf_esm2_to_nemo.py:
  `lm_head.layer_norm` <-> `model.lm_head.layernorm`, `lm_head.bias` padded like
  the word embeddings).
- The tokenizer files an archive carries: `ESM1nvModel._build_tokenizer`
  (bionemo/model/protein/esm1nv/esm1nv_model.py) registers `tokenizer.model`
  and `tokenizer.vocab_file`. ESM-1nv's configs name a sentencepiece
  vocabulary (examples/protein/esm1nv/conf/pretrain_small.yaml), ESM-2nv's a
  HuggingFace tokenizer and no file (examples/protein/esm2nv/conf/base_config.yaml).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from bionemo_serving.exporter.errors import CheckpointError
from bionemo_serving.exporter.exportable import ESM_COMMON, ESM_POSITIONS, ExportableModel, encoder_only
from bionemo_serving.exporter.nemo.archive import (
    CONFIG_MEMBER,
    NemoArchive,
    Rule,
    attention_heads,
    check_unsplit,
    check_vocabulary,
    first_rows,
    layer_rules,
    load_renamed,
    prepend_rows,
)
from bionemo_serving.model_catalog import Architecture, ModelDescription
from bionemo_serving.preprocessing.vocabularies import ESM_ALPHABET

ESM_VOCABULARY_SOURCE = "fair-esm's ESM-1b alphabet (bionemo_serving/preprocessing/vocabularies.py ESM_ALPHABET)"

WORD_EMBEDDINGS = "model.language_model.embedding.word_embeddings.weight"
LM_HEAD = "model.lm_head."
# With share_embeddings_and_output_weights false, ESMnvTransformerLanguageModel builds and saves an untied output
# layer, but NeMo 1.23's BertModel.forward still hands BertLMHead the word embeddings: the layer is never read.
ESM_UNUSED_KEYS = frozenset({"model.language_model.output_layer.weight"})


def _esm_rules(config: Any) -> list[Rule]:
    embedding, vocabulary = "model.language_model.embedding.", config.vocab_size
    rules = [
        Rule(WORD_EMBEDDINGS, ("embeddings.word_embeddings.weight",), first_rows(vocabulary)),
        Rule("model.language_model.encoder.final_layernorm.weight", ("encoder.emb_layer_norm_after.weight",)),
        Rule("model.language_model.encoder.final_layernorm.bias", ("encoder.emb_layer_norm_after.bias",)),
    ]
    if config.position_embedding_type == "absolute":
        # HF ESM numbers positions from padding_idx + 1 (fairseq).
        positions = ("embeddings.position_embeddings.weight",)
        rules.append(Rule(f"{embedding}position_embeddings.weight", positions, prepend_rows(config.pad_token_id + 1)))
    else:
        rules.append(Rule("model.language_model.rotary_pos_emb.inv_freq", ("rotary_embeddings.inv_freq",)))
    modules = {
        "input_layernorm": "attention.LayerNorm",
        "self_attention.dense": "attention.output.dense",
        "post_attention_layernorm": "LayerNorm",
        "mlp.dense_h_to_4h": "intermediate.dense",
        "mlp.dense_4h_to_h": "output.dense",
    }
    packed = {"self_attention.query_key_value": ("attention.self.query", "attention.self.key", "attention.self.value")}
    return rules + layer_rules(
        "model.language_model.encoder.layers.{layer}.",
        "encoder.layer.{layer}.",
        modules,
        packed,
        config.num_attention_heads,
        config.num_hidden_layers,
    )


def _lm_head_rules(config: Any) -> list[Rule]:
    """BertLMHead as EsmLMHead. Both apply erf GELU: BertLMHead's `gelu` is torch's unless `openai_gelu`, which
    `model_provider_func` never passes, or `onnx_safe`, whose erf_gelu divides by 1.41421 instead of sqrt(2) (at
    most 7.4e-7 apart, float32 rounding); `bias_gelu_fusion` is the layers' alone."""
    vocabulary = first_rows(config.vocab_size)
    modules = [
        Rule(f"{LM_HEAD}{megatron}.{name}", (f"lm_head.{hf}.{name}",))
        for megatron, hf in {"dense": "dense", "layernorm": "layer_norm"}.items()
        for name in ("weight", "bias")
    ]
    return modules + [
        Rule(f"{LM_HEAD}bias", ("lm_head.bias",), vocabulary),
        Rule(WORD_EMBEDDINGS, ("lm_head.decoder.weight",), vocabulary),  # the logits' weight, whatever the config
    ]


class TanhGeluIntermediate(torch.nn.Module):
    """ESM's feed-forward input projection with Megatron's fused bias-GELU, the tanh approximation."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.dense = torch.nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.dense(hidden_states), approximate="tanh")


def _esm_config(description: ModelDescription, archive: NemoArchive) -> Any:
    """EsmConfig from model_config.yaml; settings an EsmModel cannot reproduce are refused, naming the field."""
    from transformers import EsmConfig

    expected = {Architecture.ESM1: "learned_absolute", Architecture.ESM2: "rope"}[description.architecture]
    position_embedding_type = archive.field("position_embedding_type", str)
    if position_embedding_type != expected:
        requirement = f"{description.name} needs {expected!r}"
        raise archive.invalid("position_embedding_type", position_embedding_type, requirement)
    hidden_size = archive.field("hidden_size", int)
    heads = attention_heads(archive, hidden_size)
    check_unsplit(archive)
    # Attention is scaled by 1/sqrt(head_dim) exactly once: by Megatron (normalize_attention_scores)
    # or by ESM's query scaling (use_esm_attention).
    if archive.field("normalize_attention_scores", bool, True) == archive.field("use_esm_attention", bool, False):
        raise CheckpointError(
            f"{archive.path}: {CONFIG_MEMBER}: exactly one of 'normalize_attention_scores' and 'use_esm_attention' "
            "must be true"
        )
    token_dropout = archive.field("embedding_token_dropout", bool, False)
    mask_id = ESM_ALPHABET.index("<mask>")
    mask_token_id = archive.field("mask_token_id", int, mask_id)
    if token_dropout and mask_token_id != mask_id:
        raise archive.invalid("mask_token_id", mask_token_id, f"must be {mask_id}, ESM's <mask>")
    positions = ESM_POSITIONS[description.architecture]
    max_positions = archive.field("max_position_embeddings", int)
    if positions["position_embedding_type"] == "absolute":
        max_positions += ESM_COMMON["pad_token_id"] + 1  # the rows prepend_rows adds
    return EsmConfig(
        **{
            **ESM_COMMON,
            **positions,
            "hidden_size": hidden_size,
            "num_hidden_layers": archive.field("num_layers", int),
            "num_attention_heads": heads,
            "intermediate_size": archive.field("ffn_hidden_size", int),
            "max_position_embeddings": max_positions,
            "layer_norm_eps": archive.field("layernorm_epsilon", float),
            "token_dropout": token_dropout,
        }
    )


def load_esm(description: ModelDescription, archive: NemoArchive) -> ExportableModel:
    """The encoder, and the masked-LM head where the archive has one (any of its keys: then all of them)."""
    from transformers import EsmForMaskedLM

    check_vocabulary(archive, ESM_ALPHABET, ESM_VOCABULARY_SOURCE)
    config = _esm_config(description, archive)
    masked_lm = EsmForMaskedLM(config)
    if archive.field("bias_gelu_fusion", bool, True):  # Megatron's fused bias-GELU; ESM-2nv turns it off for erf GELU
        for layer in masked_lm.esm.encoder.layer:
            layer.intermediate = TanhGeluIntermediate(config)
    rules = [replace(rule, huggingface=tuple(f"esm.{key}" for key in rule.huggingface)) for rule in _esm_rules(config)]
    has_head = any(key.startswith(LM_HEAD) for key in archive.state_dict)
    if has_head:
        rules += _lm_head_rules(config)
    absent = ("esm.contact_head.",) if has_head else ("esm.contact_head.", "lm_head.")  # no .nemo has a contact head
    untouched = frozenset(key for key in masked_lm.state_dict() if key.startswith(absent))
    load_renamed(masked_lm, archive, rules, ESM_UNUSED_KEYS, untouched)
    return encoder_only(masked_lm.esm, masked_lm if has_head else None)
