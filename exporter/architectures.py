"""How each architecture is created at random, saved, loaded and wrapped for tracing.

A checkpoint is an ordinary HuggingFace folder (`config.json`, weights,
tokenizer files): the default random models are written in that form so that
a user's own checkpoint takes exactly the same path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from model_catalog import Architecture, ModelDescription
from preprocessing import ESM_ALPHABET


class CheckpointError(ValueError):
    """A checkpoint folder cannot be used for a model: the message names the file and the problem."""


class HiddenStatesEncoder(torch.nn.Module):
    """(input_ids, attention_mask) -> final hidden states: the graph Triton serves."""

    def __init__(self, encoder: torch.nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


# ESM-2 settings shared by every released size (facebook/esm2_t*_UR50D config.json).
_ESM2_FIXED_CONFIG: dict[str, Any] = {
    "vocab_size": len(ESM_ALPHABET),
    "pad_token_id": ESM_ALPHABET.index("<pad>"),
    "mask_token_id": ESM_ALPHABET.index("<mask>"),
    "position_embedding_type": "rotary",
    "max_position_embeddings": 1026,
    "layer_norm_eps": 1e-5,
    "emb_layer_norm_before": False,
    "token_dropout": True,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}


def _create_esm2(description: ModelDescription, folder: Path, seed: int) -> None:
    from transformers import EsmConfig, EsmForMaskedLM, EsmTokenizer

    torch.manual_seed(seed)
    config = EsmConfig(**_ESM2_FIXED_CONFIG, **description.default_checkpoint_config)
    EsmForMaskedLM(config).eval().save_pretrained(folder)
    vocab_file = folder / "vocab.txt"
    vocab_file.write_text("\n".join(ESM_ALPHABET) + "\n")
    EsmTokenizer(vocab_file=str(vocab_file)).save_pretrained(folder)


def _load_esm2(folder: Path) -> torch.nn.Module:
    from transformers import EsmConfig, EsmModel

    config = EsmConfig.from_pretrained(folder)
    if config.model_type != "esm" or config.position_embedding_type != "rotary":
        raise CheckpointError(
            f"{folder / 'config.json'}: model_type={config.model_type!r}, "
            f"position_embedding_type={config.position_embedding_type!r}; ESM-2 needs 'esm' with 'rotary'"
        )
    if config.vocab_size != len(ESM_ALPHABET):
        raise CheckpointError(
            f"{folder / 'config.json'}: vocab_size={config.vocab_size}, the ESM alphabet has {len(ESM_ALPHABET)} tokens"
        )
    return EsmModel.from_pretrained(folder, add_pooling_layer=False)


_CREATORS: dict[Architecture, Callable[[ModelDescription, Path, int], None]] = {Architecture.ESM2: _create_esm2}
_LOADERS: dict[Architecture, Callable[[Path], torch.nn.Module]] = {Architecture.ESM2: _load_esm2}


def create_default_checkpoint(description: ModelDescription, folder: Path, seed: int = 0) -> None:
    """Write a randomly initialised checkpoint of the real architecture and vocabulary (fixed seed)."""
    folder.mkdir(parents=True, exist_ok=True)
    _CREATORS[description.architecture](description, folder, seed)


def load_for_export(description: ModelDescription, folder: Path) -> HiddenStatesEncoder:
    """Load a checkpoint folder and wrap it as the graph to export, in eval mode."""
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder / 'config.json'}: missing; expected a HuggingFace checkpoint folder")
    return HiddenStatesEncoder(_LOADERS[description.architecture](folder)).eval()
