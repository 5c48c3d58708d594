"""BioNeMo ESM `.nemo` checkpoints written here in Megatron's layout from a small random HF model, and the archive
as NeMo's save_to writes it (for the encoder-decoders' too, support/nemo_encoder_decoder.py).

The Megatron state dict is built by hand (the inverse of bionemo_serving/exporter/nemo/esm.py's table, with query_key_value packed
head by head as Megatron does, the masked-LM head as BioNeMo's HF -> .nemo converter writes it), so that a mistake in
the tables cannot cancel itself out. What the source model answers, to hold a loaded or exported language-model graph
to: `masked_batch`, `source_log_probs` (for tests/unit/test_nemo_checkpoints.py and its e2e/ counterpart).
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import torch
import yaml
from transformers import EsmConfig, EsmForMaskedLM

from bionemo_serving.exporter.graph_inputs import GraphInputs, encoder_inputs, language_model_inputs
from bionemo_serving.model_catalog import ModelDescription
from bionemo_serving.preprocessing.vocabularies import ESM_ALPHABET
from support.reference import AMINO_ACIDS

ARTIFACT_HEX = "0b5c1a6f2d3e4f5a6b7c8d9e0f1a2b3c"
"""NeMo names the files it packs `<uuid4 hex>_<file name>` and model_config.yaml refers to them as `nemo:<that>`."""
VOCABULARY_MEMBER = f"{ARTIFACT_HEX}_protein_sequence_sentencepiece.vocab"
"""The sentencepiece vocabulary an ESM-1nv archive packs, as its model_config.yaml's tokenizer names it."""

HIDDEN, LAYERS, HEADS, FFN = 32, 2, 4, 64
PAD_ID = ESM_ALPHABET.index("<pad>")
MEGATRON_POSITIONS = 512  # ESM-1nv's seq_length; the exporter verifies up to 300 residues
PADDED_VOCABULARY = 128  # make_vocab_size_divisible_by
LM = "model.language_model."

# What BioNeMo's ESM-1nv / ESM-2nv configs set (examples/protein/esm{1,2}nv/conf/base_config.yaml);
# layernorm_epsilon as YAML writes it, which PyYAML reads as a string.
ESM1_CONFIG = {"position_embedding_type": "learned_absolute", "max_position_embeddings": MEGATRON_POSITIONS}
ESM2_CONFIG = {
    "position_embedding_type": "rope",
    "max_position_embeddings": 1024,
    "normalize_attention_scores": False,
    "use_esm_attention": True,
    "esm_gelu": True,
    "bias_gelu_fusion": False,
    "embedding_token_dropout": True,
    "mask_token_id": ESM_ALPHABET.index("<mask>"),
}


def hf_model(name: str, seed: int) -> EsmForMaskedLM:
    """A small random ESM of `name`'s kind with its masked-LM head (decoder tied to the word embeddings, as in
    BioNeMo), every parameter perturbed so that no LayerNorm is the identity."""
    rotary = name == "esm2nv"
    config = EsmConfig(
        vocab_size=len(ESM_ALPHABET), pad_token_id=PAD_ID, mask_token_id=ESM_ALPHABET.index("<mask>"),
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FFN,
        position_embedding_type="rotary" if rotary else "absolute", token_dropout=rotary,
        max_position_embeddings=1024 if rotary else MEGATRON_POSITIONS + PAD_ID + 1,
        emb_layer_norm_before=False, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_eps=1e-5,
    )  # fmt: skip
    torch.manual_seed(seed)
    return perturbed(EsmForMaskedLM(config).eval())


def perturbed(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with every parameter moved by noise, so that no LayerNorm is the identity and no bias zero."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    return model


def pack_per_head(parts: tuple[torch.Tensor, ...], heads: int) -> torch.Tensor:
    """Fused projection rows as Megatron keeps them: head 0's rows of each part, then head 1's, ..."""
    size = len(parts[0]) // heads
    return torch.cat([part[head * size : (head + 1) * size] for head in range(heads) for part in parts])


def padded(rows: torch.Tensor) -> torch.Tensor:
    """Vocabulary rows as Megatron keeps them, padded to PADDED_VOCABULARY; random padding, which must be dropped."""
    return torch.cat((rows, torch.randn(PADDED_VOCABULARY - len(rows), *rows.shape[1:])))


def megatron_state_dict(model: EsmForMaskedLM, head: bool = True) -> dict[str, torch.Tensor]:
    """`model`'s weights under NeMo 1 Megatron-BERT names; with `head`, its masked-LM head as BertLMHead's."""
    hf = model.esm.state_dict()
    state = {
        f"{LM}embedding.word_embeddings.weight": padded(hf["embeddings.word_embeddings.weight"]),
        f"{LM}encoder.final_layernorm.weight": hf["encoder.emb_layer_norm_after.weight"],
        f"{LM}encoder.final_layernorm.bias": hf["encoder.emb_layer_norm_after.bias"],
    }
    if head:
        lm_head = model.lm_head.state_dict()
        state |= {f"model.lm_head.{name}": lm_head[name] for name in ("dense.weight", "dense.bias")}
        state |= {f"model.lm_head.layernorm.{name}": lm_head[f"layer_norm.{name}"] for name in ("weight", "bias")}
        state["model.lm_head.bias"] = padded(lm_head["bias"])
    if model.config.position_embedding_type == "absolute":  # HF numbers positions from padding_idx + 1
        state[f"{LM}embedding.position_embeddings.weight"] = hf["embeddings.position_embeddings.weight"][PAD_ID + 1 :]
    else:
        state[f"{LM}rotary_pos_emb.inv_freq"] = hf["rotary_embeddings.inv_freq"]
    for layer in range(LAYERS):
        source, target = f"encoder.layer.{layer}.", f"{LM}encoder.layers.{layer}."
        for kind in ("weight", "bias"):
            qkv = tuple(hf[f"{source}attention.self.{part}.{kind}"] for part in ("query", "key", "value"))
            state[f"{target}self_attention.query_key_value.{kind}"] = pack_per_head(qkv, HEADS)
            state[f"{target}input_layernorm.{kind}"] = hf[f"{source}attention.LayerNorm.{kind}"]
            state[f"{target}self_attention.dense.{kind}"] = hf[f"{source}attention.output.dense.{kind}"]
            state[f"{target}post_attention_layernorm.{kind}"] = hf[f"{source}LayerNorm.{kind}"]
            state[f"{target}mlp.dense_h_to_4h.{kind}"] = hf[f"{source}intermediate.dense.{kind}"]
            state[f"{target}mlp.dense_4h_to_h.{kind}"] = hf[f"{source}output.dense.{kind}"]
    return state


def megatron_config(name: str, **changes: object) -> dict[str, object]:
    sizes = {"hidden_size": HIDDEN, "num_layers": LAYERS, "num_attention_heads": HEADS, "ffn_hidden_size": FFN}
    config = {**sizes, "layernorm_epsilon": "1e-5", **(ESM2_CONFIG if name == "esm2nv" else ESM1_CONFIG), **changes}
    return {key: value for key, value in config.items() if value is not None}


def write_nemo(
    path: Path,
    config: dict[str, object] | None,
    state: dict[str, torch.Tensor],
    compression: str = "",
    artifacts: dict[str, bytes] | None = None,
) -> Path:
    """A `.nemo` tar as NeMo's save_to writes it (members under ./); no config member when `config` is None."""
    members = {"./model_weights.ckpt": io.BytesIO()}
    torch.save(state, members["./model_weights.ckpt"])
    if config is not None:
        members["./model_config.yaml"] = io.BytesIO(yaml.safe_dump(config).replace("'1e-5'", "1e-5").encode())
    members.update({f"./{name}": io.BytesIO(content) for name, content in (artifacts or {}).items()})
    with tarfile.open(path, f"w:{compression}") as archive:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content.getvalue())
            content.seek(0)
            archive.addfile(info, content)
    return path


def sentencepiece_vocabulary(tokens: tuple[str, ...]) -> bytes:
    """A `.vocab` file as sentencepiece writes it: each piece, a tab, its score."""
    return "".join(f"{token}\t{-index}\n" for index, token in enumerate(tokens)).encode()


def tokenizer_config(vocabulary_member: str) -> dict[str, object]:
    """The `tokenizer:` section of a saved model: the files NeMo packed are `nemo:<member>` (ESM-1nv, ProtT5nv)."""
    files = {"model": vocabulary_member.replace(".vocab", ".model"), "vocab_file": vocabulary_member}
    return {"library": "sentencepiece", "type": None, **{key: f"nemo:{member}" for key, member in files.items()}}


def hidden_states(encoder: torch.nn.Module, description: ModelDescription) -> tuple[np.ndarray, np.ndarray]:
    """Final hidden states at the real tokens of a padded batch of mixed lengths."""
    batch = encoder_inputs(description, [1, 7, 40, 250], np.random.default_rng(3))
    with torch.inference_mode():
        states, _ = encoder(**{name: torch.from_numpy(array) for name, array in batch.feeds.items()})
    real = batch.compared["hidden_states"]
    return states.numpy()[real], real


def log_probs(logits: torch.Tensor) -> np.ndarray:
    """transformers' masked-LM logits as the language-model graph answers: log-softmax, at the 20 amino acids."""
    columns = [ESM_ALPHABET.index(residue) for residue in AMINO_ACIDS]
    return torch.log_softmax(logits, dim=-1)[..., columns].numpy()


def masked_batch(description: ModelDescription) -> GraphInputs:
    """A padded batch of mixed lengths, its first row without <mask>, the others with more and more; every row asks
    for the log-probabilities of every token, compared at its real ones."""
    feeds = language_model_inputs(description, [1, 7, 40, 250], np.random.default_rng(4)).feeds
    every = np.broadcast_to(np.arange(feeds["input_ids"].shape[1]), feeds["input_ids"].shape).copy()
    return GraphInputs(feeds | {"positions": every}, {"log_probs": feeds["attention_mask"].astype(bool)})


def tensors(batch: GraphInputs) -> dict[str, torch.Tensor]:
    return {name: torch.from_numpy(array) for name, array in batch.feeds.items()}


def source_log_probs(original: EsmForMaskedLM, batch: GraphInputs) -> np.ndarray:
    """transformers' answer at every token (the batch asks for every one)."""
    with torch.inference_mode():
        feeds = tensors(batch)
        return log_probs(original(input_ids=feeds["input_ids"], attention_mask=feeds["attention_mask"]).logits)
