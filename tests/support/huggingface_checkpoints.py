"""HuggingFace checkpoint folders as users bring them, written with `save_pretrained` of the real classes: small,
random and perturbed, for the checkpoint loader's tests and for the one that serves every kind of checkpoint."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    EsmConfig,
    EsmForMaskedLM,
    EsmModel,
    EsmTokenizer,
    PreTrainedModel,
    T5Config,
    T5EncoderModel,
    T5ForConditionalGeneration,
    T5Tokenizer,
)
from transformers.utils.sentencepiece_model_pb2_new import ModelProto

from bionemo_serving.preprocessing.vocabularies import ESM_ALPHABET, PROTT5_BASE_VOCABULARY, PROTT5_TOKENS
from support.checkpoints import TINY_SIZES

T5_SIZES = {"d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_decoder_layers": 1, "num_heads": 4}
"""ProtT5 at 2 encoder layers of width 32; a whole T5 has a decoder too, which the loader drops: one layer."""


def perturbed(model: PreTrainedModel, seed: int) -> PreTrainedModel:
    """Every parameter moved off its initial value, so that no LayerNorm is the identity and no bias zero."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    return model.eval()


def esm_checkpoint(
    folder: Path, name: str, model_class: type[PreTrainedModel], max_position_embeddings: int = 1026
) -> EsmModel:
    """An ESM folder as transformers saves it, with its vocab.txt; returns the encoder to compare with."""
    config = EsmConfig(
        vocab_size=len(ESM_ALPHABET), pad_token_id=1, mask_token_id=32, token_dropout=name == "esm2nv",
        position_embedding_type="rotary" if name == "esm2nv" else "absolute",
        max_position_embeddings=max_position_embeddings,
        emb_layer_norm_before=False, layer_norm_eps=1e-5, **TINY_SIZES[name],
    )  # fmt: skip
    model = perturbed(model_class(config), seed=3)
    model.save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(ESM_ALPHABET) + "\n")
    EsmTokenizer(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    return model.esm if isinstance(model, EsmForMaskedLM) else model


def write_spiece_model(path: Path, pieces: tuple[str, ...]) -> None:
    """A sentencepiece model file with `pieces` in id order: <pad>, </s> control, <unk> unknown, the residues."""
    model = ModelProto()
    kind = ModelProto.SentencePiece
    kinds = {0: kind.CONTROL, 1: kind.CONTROL, 2: kind.UNKNOWN}
    for token_id, piece in enumerate(pieces):
        model.pieces.add(piece=piece, score=0.0, type=kinds.get(token_id, kind.NORMAL))
    path.write_bytes(model.SerializeToString())


def t5_checkpoint(folder: Path, whole_seq2seq: bool) -> T5EncoderModel:
    """ProtT5 as a whole T5 with spiece.model only, or as an encoder with tokenizer.json; returns the encoder."""
    config = T5Config(vocab_size=len(PROTT5_TOKENS), feed_forward_proj="relu", dropout_rate=0.0, **T5_SIZES)
    model = perturbed((T5ForConditionalGeneration if whole_seq2seq else T5EncoderModel)(config), seed=4)
    model.save_pretrained(folder)
    if whole_seq2seq:
        write_spiece_model(folder / "spiece.model", PROTT5_BASE_VOCABULARY)
    else:
        sentinels = [token for token in PROTT5_TOKENS if token.startswith("<extra_id_")]
        vocabulary = [(token, 0.0) for token in PROTT5_TOKENS]
        T5Tokenizer(vocab=vocabulary, extra_ids=0, additional_special_tokens=sentinels).save_pretrained(folder)
    encoder = T5EncoderModel(config).eval()
    encoder.load_state_dict(model.state_dict(), strict=False)  # the encoder half of the same weights
    return encoder
