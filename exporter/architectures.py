"""How each architecture is created at random, saved, loaded and wrapped for tracing.

A checkpoint is an ordinary HuggingFace folder (`config.json`, weights,
tokenizer files): the default random models are written in that form so that
a user's own checkpoint takes exactly the same path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from model_catalog import Architecture, GraphRole, ModelDescription
from preprocessing.smiles import MEGAMOLBART_TOKENS, VOCABULARY_FILE
from preprocessing.vocabularies import ESM_ALPHABET, PROTT5_TOKENS


class CheckpointError(ValueError):
    """A checkpoint folder cannot be used for a model: the message names the file and the problem."""


class HiddenStatesEncoder(torch.nn.Module):
    """(input_ids, attention_mask) -> final hidden states: the encoder graph Triton serves."""

    def __init__(self, encoder: torch.nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class DecoderStep(torch.nn.Module):
    """(decoder_ids, encoder_hidden_states, encoder_mask) -> logits of the next token.

    The whole prefix is decoded at every step (no key-value cache), which keeps
    the graph stateless so that Triton can batch steps of unrelated requests.
    """

    def __init__(self, seq2seq: torch.nn.Module) -> None:
        super().__init__()
        self.seq2seq = seq2seq

    def forward(
        self, decoder_ids: torch.Tensor, encoder_hidden_states: torch.Tensor, encoder_mask: torch.Tensor
    ) -> torch.Tensor:
        hidden = self.seq2seq.model.decoder(
            input_ids=decoder_ids,
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_mask,
            use_cache=False,
        ).last_hidden_state[:, -1]
        return self.seq2seq.lm_head(hidden) + self.seq2seq.final_logits_bias


@dataclass(frozen=True)
class ExportableModel:
    """The loaded checkpoint as the graphs to export, and the sizes their tensor dimensions name."""

    graphs: dict[GraphRole, torch.nn.Module]
    sizes: dict[str, int]


# Settings every released ESM checkpoint shares (facebook/esm*_UR50* config.json).
_ESM_COMMON: dict[str, Any] = {
    "vocab_size": len(ESM_ALPHABET),
    "pad_token_id": ESM_ALPHABET.index("<pad>"),
    "mask_token_id": ESM_ALPHABET.index("<mask>"),
    "max_position_embeddings": 1026,
    "layer_norm_eps": 1e-5,
    "token_dropout": True,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}
_ESM_POSITIONS = {
    # facebook/esm1v_t33_650M_UR90S_1 config.json: learned positions, no LayerNorm before the first layer.
    Architecture.ESM1: {"position_embedding_type": "absolute", "emb_layer_norm_before": False},
    Architecture.ESM2: {"position_embedding_type": "rotary", "emb_layer_norm_before": False},
}

# ProtT5-XL (Rostlab/prot_t5_xl_uniref50 config.json), less its sizes.
_PROTT5_COMMON: dict[str, Any] = {
    "vocab_size": len(PROTT5_TOKENS),
    "pad_token_id": 0,
    "eos_token_id": 1,
    "feed_forward_proj": "relu",
    "relative_attention_num_buckets": 32,
    "dropout_rate": 0.0,
    "layer_norm_epsilon": 1e-6,
}


# MegaMolBART: pre-LayerNorm encoder-decoder, learned positions, GELU; the
# MegaMolBART special tokens <PAD>=0, ^ (begin)=2, & (end)=3.
_MEGAMOLBART_COMMON: dict[str, Any] = {
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


@dataclass(frozen=True)
class _Family:
    create: Callable[[ModelDescription, Path], None]
    load: Callable[[ModelDescription, Path], ExportableModel]


def _create_esm(description: ModelDescription, folder: Path) -> None:
    from transformers import EsmConfig, EsmForMaskedLM, EsmTokenizer

    config = EsmConfig(**_ESM_COMMON, **_ESM_POSITIONS[description.architecture], **description.default_checkpoint_config)
    EsmForMaskedLM(config).eval().save_pretrained(folder)
    vocab_file = folder / "vocab.txt"
    vocab_file.write_text("\n".join(ESM_ALPHABET) + "\n")
    EsmTokenizer(vocab_file=str(vocab_file)).save_pretrained(folder)


def _load_esm(description: ModelDescription, folder: Path) -> ExportableModel:
    from transformers import EsmConfig, EsmModel

    config = EsmConfig.from_pretrained(folder)
    expected = _ESM_POSITIONS[description.architecture]["position_embedding_type"]
    if config.model_type != "esm" or config.position_embedding_type != expected:
        raise CheckpointError(
            f"{folder / 'config.json'}: model_type={config.model_type!r}, position_embedding_type="
            f"{config.position_embedding_type!r}; {description.name} needs 'esm' with {expected!r}"
        )
    _check_vocab_size(folder, config.vocab_size, len(ESM_ALPHABET))
    return _encoder_only(EsmModel.from_pretrained(folder, add_pooling_layer=False))


def _create_t5_encoder(description: ModelDescription, folder: Path) -> None:
    from transformers import T5Config, T5EncoderModel, T5Tokenizer

    config = T5Config(**_PROTT5_COMMON, **description.default_checkpoint_config)
    T5EncoderModel(config).eval().save_pretrained(folder)
    # The sentinels count down from the end, as in every T5 sentencepiece model.
    sentinels = [token for token in PROTT5_TOKENS if token.startswith("<extra_id_")]
    pieces = [(token, 0.0) for token in PROTT5_TOKENS]
    T5Tokenizer(vocab=pieces, extra_ids=0, additional_special_tokens=sentinels).save_pretrained(folder)


def _load_t5_encoder(description: ModelDescription, folder: Path) -> ExportableModel:
    from transformers import T5Config, T5EncoderModel

    config = T5Config.from_pretrained(folder)
    if config.model_type != "t5":
        raise CheckpointError(f"{folder / 'config.json'}: model_type={config.model_type!r}; {description.name} needs 't5'")
    _check_vocab_size(folder, config.vocab_size, len(PROTT5_TOKENS))
    # Eager attention traces to plain ONNX ops; sdpa's masking does not export cleanly for T5.
    return _encoder_only(T5EncoderModel.from_pretrained(folder, attn_implementation="eager"))


def _create_mbart(description: ModelDescription, folder: Path) -> None:
    from transformers import MBartConfig, MBartForConditionalGeneration

    config = MBartConfig(**_MEGAMOLBART_COMMON, **description.default_checkpoint_config)
    MBartForConditionalGeneration(config).eval().save_pretrained(folder)
    (folder / VOCABULARY_FILE.name).write_text(VOCABULARY_FILE.read_text())


def _load_mbart(description: ModelDescription, folder: Path) -> ExportableModel:
    from transformers import MBartConfig, MBartForConditionalGeneration

    config = MBartConfig.from_pretrained(folder)
    if config.model_type != "mbart":
        raise CheckpointError(f"{folder / 'config.json'}: model_type={config.model_type!r}; {description.name} needs 'mbart'")
    _check_vocab_size(folder, config.vocab_size, len(MEGAMOLBART_TOKENS))
    model = MBartForConditionalGeneration.from_pretrained(folder, attn_implementation="eager").eval()
    return ExportableModel(
        graphs={GraphRole.ENCODER: HiddenStatesEncoder(model.get_encoder()), GraphRole.DECODER_STEP: DecoderStep(model)},
        sizes={"hidden_size": config.d_model, "vocab_size": config.vocab_size},
    )


def _encoder_only(encoder: torch.nn.Module) -> ExportableModel:
    return ExportableModel(
        graphs={GraphRole.ENCODER: HiddenStatesEncoder(encoder)}, sizes={"hidden_size": encoder.config.hidden_size}
    )


def _check_vocab_size(folder: Path, found: int, expected: int) -> None:
    if found != expected:
        raise CheckpointError(f"{folder / 'config.json'}: vocab_size={found}, the tokenizer has {expected} tokens")


_FAMILIES: dict[Architecture, _Family] = {
    Architecture.ESM1: _Family(_create_esm, _load_esm),
    Architecture.ESM2: _Family(_create_esm, _load_esm),
    Architecture.T5_ENCODER: _Family(_create_t5_encoder, _load_t5_encoder),
    Architecture.MBART: _Family(_create_mbart, _load_mbart),
}


def create_default_checkpoint(description: ModelDescription, folder: Path, seed: int = 0) -> None:
    """Write a randomly initialised checkpoint of the real architecture and vocabulary (fixed seed)."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    _FAMILIES[description.architecture].create(description, folder)


def load_for_export(description: ModelDescription, folder: Path) -> ExportableModel:
    """Load a checkpoint folder (or a BioNeMo `.nemo` file) as the graphs to export, in eval mode."""
    from exporter.nemo import NEMO_SUFFIX, load_nemo  # imported here: exporter.nemo builds on this module

    if folder.is_file() and folder.suffix == NEMO_SUFFIX:
        loaded = load_nemo(description, folder)
    elif not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder / 'config.json'}: missing; expected a HuggingFace checkpoint folder")
    else:
        loaded = _FAMILIES[description.architecture].load(description, folder)
    for graph in loaded.graphs.values():
        graph.eval()
    return loaded
