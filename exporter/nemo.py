"""BioNeMo `.nemo` checkpoints (NeMo 1 Megatron) loaded as the HuggingFace models the exporter traces.

A `.nemo` file is a tar (plain or gzipped) holding `model_config.yaml` and
`model_weights.ckpt`, a torch-saved state dict with Megatron names. Each
family is one table from those names to the HuggingFace ones; a key the table
does not know is an error unless it belongs to a head the encoder graph does
not use, and those are listed explicitly.

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
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable

import torch
import yaml

from exporter.architectures import _ESM_COMMON, _ESM_POSITIONS, CheckpointError, ExportableModel, _encoder_only
from model_catalog import Architecture, ModelDescription
from preprocessing.vocabularies import ESM_ALPHABET

NEMO_SUFFIX = ".nemo"
CONFIG_MEMBER = "model_config.yaml"
WEIGHTS_MEMBER = "model_weights.ckpt"
REQUIRED = object()
"""The default of a config field that NeMo has no default for."""


@dataclass(frozen=True)
class NemoArchive:
    """What a `.nemo` file holds: its model config and its state dict."""

    path: Path
    config: dict[str, Any]
    state_dict: dict[str, torch.Tensor]

    def field(self, key: str, kind: type, default: Any = REQUIRED) -> Any:
        """`model_config.yaml`'s `key` as a `kind`; `default` only where NeMo itself has one."""
        if key not in self.config:
            if default is REQUIRED:
                raise CheckpointError(f"{self.path}: {CONFIG_MEMBER}: '{key}' is missing")
            return default
        value = self.config[key]
        if kind is float and isinstance(value, str):  # PyYAML reads 1e-5 (no dot) as a string, OmegaConf as a float
            try:
                value = float(value)
            except ValueError:
                pass
        # bool is an int in Python, but a flag given for a size (or the reverse) is a mistake.
        numeric = (int, float) if kind is float else kind
        if isinstance(value, bool) != (kind is bool) or not isinstance(value, numeric):
            raise CheckpointError(f"{self.path}: {CONFIG_MEMBER}: '{key}'={value!r}, expected {kind.__name__}")
        return kind(value)


def read_nemo(path: Path) -> NemoArchive:
    """Read the config and weights of a single-shard `.nemo` file."""
    try:
        with tarfile.open(path, "r:*") as archive:
            members = {str(PurePosixPath(member.name)): member for member in archive.getmembers() if member.isfile()}
            shards = sorted(name for name in members if PurePosixPath(name).name == WEIGHTS_MEMBER)
            if len(shards) > 1:
                raise CheckpointError(f"{path}: model-parallel shards {shards}; merge them into one {WEIGHTS_MEMBER}")
            for needed in (CONFIG_MEMBER, shards[0] if shards else WEIGHTS_MEMBER):
                if needed not in members:
                    raise CheckpointError(f"{path}: no member '{needed}' in the archive")
            config_text = archive.extractfile(members[CONFIG_MEMBER]).read()
            weights_bytes = archive.extractfile(members[shards[0]]).read()
    except (tarfile.TarError, OSError) as error:
        raise CheckpointError(f"{path}: not a readable .nemo archive ({error})") from error
    try:
        config = yaml.safe_load(config_text)
    except yaml.YAMLError as error:
        raise CheckpointError(f"{path}: {CONFIG_MEMBER}: not valid YAML ({error})") from error
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: {CONFIG_MEMBER}: expected a mapping of model settings")
    try:
        state_dict = torch.load(io.BytesIO(weights_bytes), map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds for a damaged or foreign pickle
        raise CheckpointError(f"{path}: {shards[0]}: not a torch state dict ({error})") from error
    if not isinstance(state_dict, dict) or not all(isinstance(value, torch.Tensor) for value in state_dict.values()):
        raise CheckpointError(f"{path}: {shards[0]}: expected a flat state dict of tensors")
    return NemoArchive(path, config, state_dict)


Convert = Callable[[torch.Tensor, Any], tuple[torch.Tensor, ...]]
"""(Megatron tensor, HuggingFace config) -> the HuggingFace tensors, in the order of the rule's targets."""


def _same(tensor: torch.Tensor, config: Any) -> tuple[torch.Tensor, ...]:
    return (tensor,)


def _split_interleaved_qkv(tensor: torch.Tensor, config: Any) -> tuple[torch.Tensor, ...]:
    """Megatron packs query_key_value rows per head as [heads, 3 (q, k, v), head_dim]; HF keeps three matrices."""
    heads = config.num_attention_heads
    per_head = tensor.reshape(heads, 3, config.hidden_size // heads, *tensor.shape[1:])
    return tuple(per_head[:, part].reshape(config.hidden_size, *tensor.shape[1:]) for part in range(3))


def _first_vocabulary_rows(tensor: torch.Tensor, config: Any) -> tuple[torch.Tensor, ...]:
    """Megatron pads the embedding to `make_vocab_size_divisible_by` rows; the rows past the vocabulary are unused."""
    return (tensor[: config.vocab_size],)


def _offset_positions(tensor: torch.Tensor, config: Any) -> tuple[torch.Tensor, ...]:
    """Megatron numbers positions from 0; HF ESM from padding_idx + 1 (fairseq), with the rows before unused."""
    unused = torch.zeros(config.pad_token_id + 1, tensor.shape[1], dtype=tensor.dtype)
    return (torch.cat((unused, tensor)),)


@dataclass(frozen=True)
class Rule:
    """One Megatron key (`{layer}` for every layer) and the HuggingFace keys it becomes."""

    megatron: str
    huggingface: tuple[str, ...]
    convert: Convert = _same


def _esm_rules(position_embedding_type: str) -> tuple[Rule, ...]:
    embedding = "model.language_model.embedding."
    rules = [
        Rule(f"{embedding}word_embeddings.weight", ("embeddings.word_embeddings.weight",), _first_vocabulary_rows),
        Rule("model.language_model.encoder.final_layernorm.weight", ("encoder.emb_layer_norm_after.weight",)),
        Rule("model.language_model.encoder.final_layernorm.bias", ("encoder.emb_layer_norm_after.bias",)),
    ]
    if position_embedding_type == "absolute":
        positions = ("embeddings.position_embeddings.weight",)
        rules.append(Rule(f"{embedding}position_embeddings.weight", positions, _offset_positions))
    else:
        rules.append(Rule("model.language_model.rotary_pos_emb.inv_freq", ("rotary_embeddings.inv_freq",)))
    layer = "model.language_model.encoder.layers.{layer}."
    for name in ("weight", "bias"):
        rules += [
            Rule(f"{layer}input_layernorm.{name}", (f"encoder.layer.{{layer}}.attention.LayerNorm.{name}",)),
            Rule(
                f"{layer}self_attention.query_key_value.{name}",
                tuple(f"encoder.layer.{{layer}}.attention.self.{part}.{name}" for part in ("query", "key", "value")),
                _split_interleaved_qkv,
            ),
            Rule(f"{layer}self_attention.dense.{name}", (f"encoder.layer.{{layer}}.attention.output.dense.{name}",)),
            Rule(f"{layer}post_attention_layernorm.{name}", (f"encoder.layer.{{layer}}.LayerNorm.{name}",)),
            Rule(f"{layer}mlp.dense_h_to_4h.{name}", (f"encoder.layer.{{layer}}.intermediate.dense.{name}",)),
            Rule(f"{layer}mlp.dense_4h_to_h.{name}", (f"encoder.layer.{{layer}}.output.dense.{name}",)),
        ]
    return tuple(rules)


# The masked-LM head (BertLMHead) and an untied output layer: the encoder graph serves hidden states, not logits.
ESM_UNUSED_HEAD_KEYS = frozenset(
    {
        "model.lm_head.bias",
        "model.lm_head.dense.weight",
        "model.lm_head.dense.bias",
        "model.lm_head.layernorm.weight",
        "model.lm_head.layernorm.bias",
        "model.language_model.output_layer.weight",
    }
)


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
        raise CheckpointError(
            f"{archive.path}: {CONFIG_MEMBER}: 'position_embedding_type'={position_embedding_type!r}; "
            f"{description.name} needs {expected!r}"
        )
    hidden_size, heads = archive.field("hidden_size", int), archive.field("num_attention_heads", int)
    kv_channels = archive.config.get("kv_channels")
    if kv_channels is not None and kv_channels * heads != hidden_size:
        raise CheckpointError(
            f"{archive.path}: {CONFIG_MEMBER}: 'kv_channels'={kv_channels!r}; ESM needs hidden_size / num_attention_heads"
        )
    for parallel in ("tensor_model_parallel_size", "pipeline_model_parallel_size"):
        if archive.field(parallel, int, 1) != 1:
            raise CheckpointError(f"{archive.path}: {CONFIG_MEMBER}: '{parallel}' must be 1 (merge the shards first)")
    # Attention is scaled by 1/sqrt(head_dim) exactly once: by Megatron (normalize_attention_scores)
    # or by ESM's query scaling (use_esm_attention).
    if archive.field("normalize_attention_scores", bool, True) == archive.field("use_esm_attention", bool, False):
        raise CheckpointError(
            f"{archive.path}: {CONFIG_MEMBER}: exactly one of 'normalize_attention_scores' and 'use_esm_attention' "
            "must be true"
        )
    token_dropout = archive.field("embedding_token_dropout", bool, False)
    mask_id = ESM_ALPHABET.index("<mask>")
    if token_dropout and archive.field("mask_token_id", int, mask_id) != mask_id:
        raise CheckpointError(f"{archive.path}: {CONFIG_MEMBER}: 'mask_token_id' must be {mask_id}, ESM's <mask>")
    positions = _ESM_POSITIONS[description.architecture]
    max_positions = archive.field("max_position_embeddings", int)
    if positions["position_embedding_type"] == "absolute":
        max_positions += _ESM_COMMON["pad_token_id"] + 1  # see _offset_positions
    return EsmConfig(
        **{
            **_ESM_COMMON,
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


def _load_esm(description: ModelDescription, archive: NemoArchive) -> ExportableModel:
    from transformers import EsmModel

    config = _esm_config(description, archive)
    model = EsmModel(config, add_pooling_layer=False)
    if archive.field("bias_gelu_fusion", bool, True):  # Megatron's fused bias-GELU; ESM-2nv turns it off for erf GELU
        for layer in model.encoder.layer:
            layer.intermediate = TanhGeluIntermediate(config)
    rules = _esm_rules(config.position_embedding_type)
    state = _rename(archive, rules, config.num_hidden_layers, ESM_UNUSED_HEAD_KEYS, model.state_dict(), config)
    outcome = model.load_state_dict(state, strict=False)
    assert not outcome.unexpected_keys and all(key.startswith("contact_head.") for key in outcome.missing_keys), outcome
    return _encoder_only(model)


def _rename(
    archive: NemoArchive,
    rules: tuple[Rule, ...],
    layers: int,
    unused: frozenset[str],
    targets: dict[str, torch.Tensor],
    config: Any,
) -> dict[str, torch.Tensor]:
    """The HuggingFace state dict: every rule's key must be there with the shape the config implies, nothing else."""
    expanded = [
        (rule.megatron.format(layer=layer), tuple(name.format(layer=layer) for name in rule.huggingface), rule.convert)
        for rule in rules
        for layer in (range(layers) if "{layer}" in rule.megatron else [None])
    ]
    known = {megatron for megatron, _, _ in expanded}
    for key in archive.state_dict:
        if key not in known and key not in unused:
            raise CheckpointError(f"{archive.path}: {WEIGHTS_MEMBER}: unknown key '{key}'")
    renamed: dict[str, torch.Tensor] = {}
    for megatron, huggingface, convert in expanded:
        if megatron not in archive.state_dict:
            raise CheckpointError(f"{archive.path}: {WEIGHTS_MEMBER}: missing key '{megatron}'")
        source = archive.state_dict[megatron]
        expected = [tuple(targets[name].shape) for name in huggingface]
        try:
            converted = convert(source, config)
        except RuntimeError:  # a reshape that does not fit: the same mistake as a wrong shape
            converted = ()
        if [tuple(tensor.shape) for tensor in converted] != expected:
            raise CheckpointError(
                f"{archive.path}: {WEIGHTS_MEMBER}: '{megatron}' has shape {tuple(source.shape)}; "
                f"{CONFIG_MEMBER} implies {' + '.join(map(str, expected))} for {', '.join(huggingface)}"
            )
        renamed.update({name: tensor.float() for name, tensor in zip(huggingface, converted)})
    return renamed


_NEMO_FAMILIES: dict[Architecture, Callable[[ModelDescription, NemoArchive], ExportableModel]] = {
    Architecture.ESM1: _load_esm,
    Architecture.ESM2: _load_esm,
}


def load_nemo(description: ModelDescription, path: Path) -> ExportableModel:
    """Load a BioNeMo `.nemo` file as the graphs to export."""
    load = _NEMO_FAMILIES.get(description.architecture)
    if load is None:
        raise CheckpointError(
            f"{path}: .nemo checkpoints of {description.name} are not supported yet; convert it to a HuggingFace folder"
        )
    return load(description, read_nemo(path))
