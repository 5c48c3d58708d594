"""BioNeMo MegaMolBART and ProtT5nv `.nemo` checkpoints: NeMo's Megatron encoder-decoder, written from a small random
MBart computing as Megatron does (no embedding LayerNorm, Megatron's GELU).

As for ESM (support/nemo_checkpoints.py, whose archive this uses), the Megatron state dict is written by hand (the
inverse of bionemo_serving/exporter/nemo/encoder_decoder.py's tables, the fused projections packed head by head), so that a mistake in
the tables cannot cancel itself out.
"""

from __future__ import annotations

import torch
from transformers import MBartConfig, MBartForConditionalGeneration

from support.nemo_checkpoints import ARTIFACT_HEX, pack_per_head, perturbed

HIDDEN, LAYERS, HEADS, FFN = 32, 2, 4, 64
POSITIONS = 512  # BioNeMo's seq_length, for MegaMolBART and ProtT5nv (511 residues and </s>)
MODULE, STACKS = "enc_dec_model.", "enc_dec_model.enc_dec_model."
MEGAMOLBART_VOCABULARY = f"{ARTIFACT_HEX}_megamolbart.vocab"
PROTT5_VOCABULARY = f"{ARTIFACT_HEX}_protein_sequence_sentencepiece.vocab"
Weights = dict[str, torch.Tensor]

# The fields of one half (NeMo's megatron_t5_config.yaml and BioNeMo's MegaMolBART/ProtT5nv configs).
HALF = {
    "num_layers": LAYERS,
    "hidden_size": HIDDEN,
    "ffn_hidden_size": FFN,
    "num_attention_heads": HEADS,
    "kv_channels": None,
    "init_method_std": 0.02,
    "hidden_dropout": 0.1,
    "attention_dropout": 0.1,
    "position_embedding_type": "learned_absolute",
    "apply_query_key_layer_scaling": True,
    "layernorm_epsilon": "1e-5",
    "masked_softmax_fusion": True,
    "bias_dropout_add_fusion": True,
    "bias": True,
    "normalization": "layernorm",
    "activation": "gelu",
    "headscale": False,
    "transformer_block_type": "pre_ln",
}


def megatron_config(
    sectioned: bool, encoder: dict[str, object] | None = None, decoder: dict[str, object] | None = None, **top: object
) -> dict[str, object]:
    """model_config.yaml with `encoder:`/`decoder:` sections (as NeMo saves it), or one set of fields for both halves
    (BioNeMo's MegaMolBART pretrain_base.yaml: bias_gelu_fusion, {encoder,decoder}_arch)."""
    config: dict[str, object] = {
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 1,
        "make_vocab_size_divisible_by": 128,
        "seq_length": POSITIONS,
        "max_position_embeddings": POSITIONS,
        "share_token_embeddings": True,
        "share_decoder_tokens_head_embeddings": True,
    }
    if sectioned:
        config["tokens_head_bias"] = True
        for half, changes in (("encoder", encoder), ("decoder", decoder)):
            config[half] = {**HALF, "arch": "transformer", "bias_activation_fusion": True, **(changes or {})}
    else:
        config |= {**HALF, "encoder_arch": "transformer", "decoder_arch": "transformer", "bias_gelu_fusion": True}
        config |= {**(encoder or {}), **(decoder or {})}
    return config | top


def hf_model(
    vocabulary: int,
    seed: int,
    *,
    tanh_gelu: bool,
    shared_tokens: bool,
    shared_head: bool,
    head_bias: bool,
    positions: int = POSITIONS,
) -> MBartForConditionalGeneration:
    """A small random MBart computing as Megatron does, its embeddings shared as the Megatron flags say."""
    config = MBartConfig(
        vocab_size=vocabulary, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN,
        max_position_embeddings=positions, activation_function="gelu_pytorch_tanh" if tanh_gelu else "gelu",
        scale_embedding=False, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, pad_token_id=0,
        tie_word_embeddings=False, attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(seed)
    model = MBartForConditionalGeneration(config).eval()
    encoder, decoder = model.model.encoder, model.model.decoder
    encoder.layernorm_embedding = decoder.layernorm_embedding = torch.nn.Identity()
    perturbed(model)
    with torch.no_grad():
        if shared_tokens:  # one Embedding module, words and positions, for both halves
            decoder.embed_tokens.weight.copy_(encoder.embed_tokens.weight)
            decoder.embed_positions.weight.copy_(encoder.embed_positions.weight)
        if shared_head:
            model.lm_head.weight.copy_(encoder.embed_tokens.weight)
        if head_bias:
            model.final_logits_bias.normal_()
    return model


def megatron_state_dict(model: MBartForConditionalGeneration, padded_vocabulary: int, head: tuple[str, ...]) -> Weights:
    """`model`'s weights under the names of NeMo's MegatronTokenLevelEncoderDecoderModule; `head`: tokens_head's."""
    hf = model.state_dict()

    def padded(rows: torch.Tensor) -> torch.Tensor:  # make_vocab_size_divisible_by
        return torch.cat((rows, torch.randn(padded_vocabulary - len(rows), *rows.shape[1:])))

    head_tensors = {"weight": hf["lm_head.weight"], "bias": hf["final_logits_bias"][0]}
    state = {f"{MODULE}tokens_head.{name}": padded(head_tensors[name]) for name in head}
    for half in ("encoder", "decoder"):
        source = f"model.{half}."
        state[f"{MODULE}{half}_embedding.word_embeddings.weight"] = padded(hf[f"{source}embed_tokens.weight"])
        # MBart reads position p from row p + 2.
        state[f"{MODULE}{half}_embedding.position_embeddings.weight"] = hf[f"{source}embed_positions.weight"][2:]
        names = {
            "input_layernorm": "self_attn_layer_norm",
            "self_attention.dense": "self_attn.out_proj",
            "mlp.dense_h_to_4h": "fc1",
            "mlp.dense_4h_to_h": "fc2",
        }
        if half == "encoder":
            names["post_attention_layernorm"] = "final_layer_norm"
        else:  # pre-LN: the LayerNorm after self attention feeds the cross attention
            names["post_attention_layernorm"] = "encoder_attn_layer_norm"
            names["inter_attention.query"] = "encoder_attn.q_proj"
            names["inter_attention.dense"] = "encoder_attn.out_proj"
            names["post_inter_attention_layernorm"] = "final_layer_norm"
        for kind in ("weight", "bias"):
            state[f"{STACKS}{half}.model.final_layernorm.{kind}"] = hf[f"{source}layer_norm.{kind}"]
            for layer in range(LAYERS):
                megatron, mbart = f"{STACKS}{half}.model.layers.{layer}.", f"{source}layers.{layer}."
                state |= {f"{megatron}{name}.{kind}": hf[f"{mbart}{target}.{kind}"] for name, target in names.items()}
                qkv = tuple(hf[f"{mbart}self_attn.{part}_proj.{kind}"] for part in "qkv")
                state[f"{megatron}self_attention.query_key_value.{kind}"] = pack_per_head(qkv, HEADS)
                if half == "decoder":
                    kv = tuple(hf[f"{mbart}encoder_attn.{part}_proj.{kind}"] for part in "kv")
                    state[f"{megatron}inter_attention.key_value.{kind}"] = pack_per_head(kv, HEADS)
    return state


def regex_tokenizer() -> dict[str, object]:
    """MegaMolBART's `tokenizer:` section as saved: the regex and vocabulary files NeMo packed."""
    files = {"model": MEGAMOLBART_VOCABULARY.replace(".vocab", ".model"), "vocab_file": MEGAMOLBART_VOCABULARY}
    return {"library": "regex", "type": None, "merge_file": None} | {key: f"nemo:{m}" for key, m in files.items()}
