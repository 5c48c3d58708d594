"""MegaMolBART and ProtT5nv: NeMo's Megatron encoder-decoder as HuggingFace MBart.

Both BioNeMo 1.x models are NeMo's `MegatronTokenLevelEncoderDecoderModule`:
MegaMolBART's `MegaMolBARTModel` is a `MegatronLMEncoderDecoderModel`, ProtT5nv's
`ProtT5nvModel` a `MegatronT5Model` (bionemo/model/molecule/megamolbart/,
bionemo/model/protein/prott5nv/prott5_model.py in ynashed/bionemo-fw-ea). Their
configs keep NeMo's defaults (examples/molecule/megamolbart/conf/pretrain_base.yaml,
examples/protein/prott5nv/conf/base_config.yaml there): pre-LayerNorm layers,
learned absolute positions numbered from 0, LayerNorm with bias, biased
projections, GELU; MegaMolBART's unties the token head from the embedding
(`share_decoder_tokens_head_embeddings: False`). So ProtT5nv is no HuggingFace
T5 (relative attention buckets, RMS norm, no biases, ReLU): its encoder is
served as an MBart encoder, as MegaMolBART's is; its decoder and token head
are listed unused.

Where MBart differs, the model is adjusted: MBart numbers positions from 2
(`MBartLearnedPositionalEmbedding.offset`), so two unused rows go first; its
`layernorm_embedding`, which Megatron lacks, becomes the identity; its config
holds one GELU and one epsilon (1e-5) for both halves, so each half's layers
get Megatron's.

Sources of the names and layouts (NVIDIA/NeMo nemo/collections/nlp/ unless named):
- `enc_dec_model.` (the module, `MegatronLMEncoderDecoderModel.enc_dec_model`),
  inside it `encoder_embedding`, `decoder_embedding`, `enc_dec_model` (encoder
  and decoder) and `tokens_head`; with `share_token_embeddings` the decoder's
  embedding is the encoder's module, so torch's state dict has it under both
  names: modules/common/megatron/token_level_encoder_decoder.py,
  models/language_modeling/megatron_lm_encoder_decoder_model.py.
- `encoder.model.` / `decoder.model.` (a ParallelTransformer), its `layers.{i}`
  and `final_layernorm`, each layer's `input_layernorm`, `self_attention`,
  `post_attention_layernorm`, `inter_attention`, `post_inter_attention_layernorm`,
  `mlp` and the pre-LN order they run in: megatron_transformer_encoder.py,
  megatron_transformer_decoder.py, transformer.py (`ParallelTransformerLayer_`).
- `word_embeddings`, `position_embeddings` and no LayerNorm on their sum:
  language_model.py (`Embedding`); position ids are arange from 0 (utils.py
  `build_position_ids`).
- `query_key_value` rows per head [heads, 3, head_dim], the cross attention's
  `query` and `key_value` rows per head [heads, 2, head_dim]: attention.py
  (`ParallelAttention.forward`). NVIDIA/FasterTransformer
  examples/pytorch/t5/utils/nemo_t5_ckpt_convert.py reads the same keys from
  .nemo files ("enc_dec_model.encoder_embedding.word_embeddings.weight",
  "enc_dec_model.encoder_embedding.position_embeddings.weight",
  "enc_dec_model.tokens_head.bias", "enc_dec_model.enc_dec_model.encoder.model.")
  and unpacks them the same way.
- `dense_h_to_4h`, `dense_4h_to_h`; `bias_activation_fusion` is Megatron's
  fused bias-GELU, the tanh approximation, as is `openai_gelu`; otherwise
  erf: mlp.py, fused_bias_gelu.py.
- `tokens_head`: logits are hidden @ W^T, plus its `bias` if `tokens_head_bias`;
  W is the encoder's word embeddings with `share_decoder_tokens_head_embeddings`
  (token_level_encoder_decoder.py; module.py `word_embeddings_weight`), else
  the head's own `weight`.
- The config: per-half fields in `encoder:`/`decoder:` sections, the
  embedding's size and sharing at the top level; a config without sections
  has its top level copied to both halves, `bias_gelu_fusion` (else `bias`)
  for `bias_activation_fusion`, `{encoder,decoder}_arch` for `arch` and
  `tokens_head_bias` = `share_decoder_tokens_head_embeddings`
  (megatron_lm_encoder_decoder_model.py,
  `_populate_encoder_decoder_configs_for_backward_compatibility`).
- The vocabulary file: `MegatronBaseModel._build_tokenizer` registers
  `tokenizer.vocab_file` (models/language_modeling/megatron_base_model.py).
  MegaMolBART's is its regex vocabulary (our bionemo_serving/preprocessing/vocab/megamolbart.vocab);
  ProtT5nv's a sentencepiece one (tokenizers/protein/prott5nv/vocab/
  protein_sequence_sentencepiece.vocab in BioNeMo 1.x).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bionemo_serving.exporter.exportable import MEGAMOLBART_COMMON, ExportableModel, encoder_graphs, hidden_layers
from bionemo_serving.exporter.incremental_decoder import IncrementalDecoder, seq2seq_sizes
from bionemo_serving.exporter.nemo.archive import (
    Convert,
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
from bionemo_serving.model_catalog import GraphRole, ModelDescription
from bionemo_serving.preprocessing.smiles import MEGAMOLBART_TOKENS
from bionemo_serving.preprocessing.vocabularies import PROTT5_BASE_VOCABULARY, PROTT5_TOKENS

MODULE = "enc_dec_model."
TOKENS_HEAD = f"{MODULE}tokens_head."
MBART_POSITION_OFFSET = 2
"""MBartLearnedPositionalEmbedding.offset: MBart's first position reads row 2."""
MEGAMOLBART_VOCABULARY_SOURCE = "MegaMolBART's regex vocabulary (bionemo_serving/preprocessing/vocab/megamolbart.vocab)"
PROTT5_VOCABULARY_SOURCE = (
    "ProtT5's sentencepiece vocabulary (bionemo_serving/preprocessing/vocabularies.py PROTT5_BASE_VOCABULARY)"
)

# Settings MBart reproduces only with these values, which are also NeMo's defaults (token_level_encoder_decoder.py).
_MBART_SETTINGS: dict[str, object] = {
    "transformer_block_type": "pre_ln",
    "normalization": "layernorm",
    "activation": "gelu",
    "position_embedding_type": "learned_absolute",
    "bias": True,
    "normalize_attention_scores": True,
    "megatron_legacy": False,
    "headscale": False,
    "num_moe_experts": 1,
}

# Megatron's modules of a layer -> MBart's; pre-LN, so each LayerNorm goes with the block it feeds.
_LAYER_MODULES = {
    "encoder": {
        "input_layernorm": "self_attn_layer_norm",
        "self_attention.dense": "self_attn.out_proj",
        "post_attention_layernorm": "final_layer_norm",
        "mlp.dense_h_to_4h": "fc1",
        "mlp.dense_4h_to_h": "fc2",
    },
    "decoder": {
        "input_layernorm": "self_attn_layer_norm",
        "self_attention.dense": "self_attn.out_proj",
        "post_attention_layernorm": "encoder_attn_layer_norm",
        "inter_attention.query": "encoder_attn.q_proj",
        "inter_attention.dense": "encoder_attn.out_proj",
        "post_inter_attention_layernorm": "final_layer_norm",
        "mlp.dense_h_to_4h": "fc1",
        "mlp.dense_4h_to_h": "fc2",
    },
}
_SELF_ATTENTION = {"self_attention.query_key_value": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")}
_PACKED_MODULES = {
    "encoder": _SELF_ATTENTION,
    "decoder": {**_SELF_ATTENTION, "inter_attention.key_value": ("encoder_attn.k_proj", "encoder_attn.v_proj")},
}


@dataclass(frozen=True)
class _Stack:
    """Megatron's encoder or decoder as model_config.yaml describes it."""

    hidden_size: int
    layers: int
    heads: int
    ffn_hidden_size: int
    layernorm_epsilon: float
    tanh_gelu: bool


def _sectioned(archive: NemoArchive) -> bool:
    return archive.has_section("encoder") and archive.has_section("decoder")


def _half(archive: NemoArchive, half: str) -> NemoArchive:
    """The `encoder:` or `decoder:` section; a config without them (older NeMo) serves both halves from the top."""
    return archive.section(half) if _sectioned(archive) else archive


def _fused_bias_gelu(settings: NemoArchive) -> bool:
    """bias_activation_fusion, which a config without sections names as NeMo's backward compatibility reads it."""
    if settings.prefix:
        return settings.field("bias_activation_fusion", bool, True)
    gelu_fusion = settings.field("bias_gelu_fusion", bool, None)
    if gelu_fusion is not None:
        return gelu_fusion
    return settings.field("bias_activation_fusion", bool, settings.field("bias", bool, True))


def _stack(archive: NemoArchive, half: str, model: str) -> _Stack:
    """The half's sizes; a setting MBart cannot reproduce is refused, naming the field."""
    settings = _half(archive, half)
    requirements = {"arch" if settings.prefix else f"{half}_arch": "transformer", **_MBART_SETTINGS}
    for key, required in requirements.items():
        value = settings.field(key, type(required), required)
        if value != required:
            raise settings.invalid(key, value, f"{model} needs {required!r}")
    hidden_size = settings.field("hidden_size", int)
    return _Stack(
        hidden_size=hidden_size,
        layers=settings.field("num_layers", int),
        heads=attention_heads(settings, hidden_size),
        ffn_hidden_size=settings.field("ffn_hidden_size", int),
        layernorm_epsilon=settings.field("layernorm_epsilon", float, 1e-5),
        tanh_gelu=_fused_bias_gelu(settings) or settings.field("openai_gelu", bool, False),
    )


def _stack_rules(half: str, target: str, layers: int, heads: int, vocabulary: int, tied: tuple[str, ...]) -> list[Rule]:
    """Megatron's `half` (embedding, layers, final LayerNorm) onto the MBart half at `target`.

    `tied` are further MBart keys that hold the half's word embeddings.
    """
    embedding, stack = f"{MODULE}{half}_embedding.", f"{MODULE}enc_dec_model.{half}.model."
    modules, packed = _LAYER_MODULES[half], _PACKED_MODULES[half]
    positions = prepend_rows(MBART_POSITION_OFFSET)
    return [
        Rule(f"{embedding}word_embeddings.weight", (f"{target}embed_tokens.weight", *tied), first_rows(vocabulary)),
        Rule(f"{embedding}position_embeddings.weight", (f"{target}embed_positions.weight",), positions),
        Rule(f"{stack}final_layernorm.weight", (f"{target}layer_norm.weight",)),
        Rule(f"{stack}final_layernorm.bias", (f"{target}layer_norm.bias",)),
        *layer_rules(f"{stack}layers.{{layer}}.", f"{target}layers.{{layer}}.", modules, packed, heads, layers),
    ]


def _logits_bias(vocabulary: int) -> Convert:
    """tokens_head.bias is padded like the embedding; MBart's final_logits_bias is a (1, vocabulary) buffer."""
    rows = first_rows(vocabulary)
    return lambda tensor: (rows(tensor)[0].unsqueeze(0),)


def _as_megatron(half: torch.nn.Module, stack: _Stack) -> None:
    """What MBartConfig cannot say per half: no embedding LayerNorm, Megatron's epsilon and GELU."""
    half.layernorm_embedding = torch.nn.Identity()
    for module in half.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.eps = stack.layernorm_epsilon
    for layer in half.layers:
        layer.activation_fn = torch.nn.GELU(approximate="tanh" if stack.tanh_gelu else "none")


def _mbart_sizes(stack: _Stack, archive: NemoArchive) -> dict[str, object]:
    """MBartConfig's encoder sizes; eager attention traces to plain ONNX ops."""
    return {
        "d_model": stack.hidden_size,
        "encoder_layers": stack.layers,
        "encoder_attention_heads": stack.heads,
        "encoder_ffn_dim": stack.ffn_hidden_size,
        "max_position_embeddings": archive.field("max_position_embeddings", int),
        "attn_implementation": "eager",
    }


def load_megamolbart(description: ModelDescription, archive: NemoArchive) -> ExportableModel:
    from transformers import MBartConfig, MBartForConditionalGeneration

    check_unsplit(archive)
    check_vocabulary(archive, MEGAMOLBART_TOKENS, MEGAMOLBART_VOCABULARY_SOURCE)
    encoder, decoder = _stack(archive, "encoder", description.name), _stack(archive, "decoder", description.name)
    if decoder.hidden_size != encoder.hidden_size:
        raise _half(archive, "decoder").invalid("hidden_size", decoder.hidden_size, "must be the encoder's")
    shared_head = archive.field("share_decoder_tokens_head_embeddings", bool, True)
    head_bias = archive.field("tokens_head_bias", bool, True) if _sectioned(archive) else shared_head
    # Untied: every MBart tensor is filled from the Megatron tensor the forward pass of NeMo reads.
    config = MBartConfig(
        **{
            **MEGAMOLBART_COMMON,
            **_mbart_sizes(encoder, archive),
            "decoder_layers": decoder.layers,
            "decoder_attention_heads": decoder.heads,
            "decoder_ffn_dim": decoder.ffn_hidden_size,
            "tie_word_embeddings": False,
        }
    )
    model = MBartForConditionalGeneration(config)
    _as_megatron(model.model.encoder, encoder)
    _as_megatron(model.model.decoder, decoder)
    vocabulary = config.vocab_size
    # The shared head reads the encoder's word embeddings (MegatronModule.word_embeddings_weight).
    tied = ("model.shared.weight", "lm_head.weight") if shared_head else ("model.shared.weight",)
    rules = [
        *_stack_rules("encoder", "model.encoder.", encoder.layers, encoder.heads, vocabulary, tied),
        *_stack_rules("decoder", "model.decoder.", decoder.layers, decoder.heads, vocabulary, ()),
    ]
    if not shared_head:
        rules.append(Rule(f"{TOKENS_HEAD}weight", ("lm_head.weight",), first_rows(vocabulary)))
    if head_bias:
        rules.append(Rule(f"{TOKENS_HEAD}bias", ("final_logits_bias",), _logits_bias(vocabulary)))
    load_renamed(model, archive, rules, frozenset(), frozenset() if head_bias else frozenset({"final_logits_bias"}))
    graphs = {**encoder_graphs(model.get_encoder()), GraphRole.DECODER: IncrementalDecoder(model)}
    return ExportableModel(graphs, seq2seq_sizes(config) | hidden_layers(config), config.max_position_embeddings)


def load_prott5nv(description: ModelDescription, archive: NemoArchive) -> ExportableModel:
    from transformers import MBartConfig
    from transformers.models.mbart.modeling_mbart import MBartEncoder

    check_unsplit(archive)
    check_vocabulary(archive, PROTT5_BASE_VOCABULARY, PROTT5_VOCABULARY_SOURCE)
    stack = _stack(archive, "encoder", description.name)
    config = MBartConfig(
        **_mbart_sizes(stack, archive),
        vocab_size=len(PROTT5_TOKENS),
        pad_token_id=PROTT5_TOKENS.index("<pad>"),
        scale_embedding=False,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )
    encoder = MBartEncoder(config)
    _as_megatron(encoder, stack)
    rules = _stack_rules("encoder", "", stack.layers, stack.heads, config.vocab_size, ())
    # The encoder graph serves hidden states: the decoder (its table in load_megamolbart) and the token head are unused.
    decoder = _half(archive, "decoder")
    decoder_rules = _stack_rules(
        "decoder",
        "model.decoder.",
        decoder.field("num_layers", int),
        decoder.field("num_attention_heads", int),
        config.vocab_size,
        (),
    )
    unused = frozenset({rule.megatron for rule in decoder_rules} | {f"{TOKENS_HEAD}weight", f"{TOKENS_HEAD}bias"})
    load_renamed(encoder, archive, rules, unused, frozenset())
    sizes = {"hidden_size": config.d_model, **hidden_layers(config)}
    return ExportableModel(encoder_graphs(encoder), sizes, config.max_position_embeddings)
