"""What every family shares: reading a `.nemo` archive, its config fields, and the rename from Megatron names.

A `.nemo` file is a tar (plain or gzipped) holding `model_config.yaml`,
`model_weights.ckpt` (a torch-saved state dict with Megatron names) and the
files NeMo registered as artifacts, such as the tokenizer's vocabulary
(`model_config.yaml` names them `nemo:<32 hex>_<file name>`; NVIDIA/NeMo
nemo/core/connectors/save_restore_connector.py, `_handle_artifacts` and
`_update_artifact_paths`). Each family is a table of `Rule`s from Megatron
names to HuggingFace ones; `rename` refuses a key no rule knows unless the
family lists it as unused, a key a rule needs that is missing, and a tensor of
another shape than the HuggingFace model's, naming the key and the file.
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable

import torch
import yaml

from bionemo_serving.exporter.errors import CheckpointError
from bionemo_serving.exporter.exportable import check_token_ids

NEMO_SUFFIX = ".nemo"
CONFIG_MEMBER = "model_config.yaml"
WEIGHTS_MEMBER = "model_weights.ckpt"
ARTIFACT_PREFIX = "nemo:"
"""How model_config.yaml names a file of the archive (NeMo's save_restore_connector)."""
REQUIRED = object()
"""The default of a config field that NeMo has no default for."""


@dataclass(frozen=True)
class NemoArchive:
    """What a `.nemo` file holds: its model config (or one section of it), its state dict and its other files."""

    path: Path
    config: dict[str, Any]
    state_dict: dict[str, torch.Tensor]
    artifacts: dict[str, bytes]
    """The members besides the config and the weights, by name (tokenizer files)."""
    prefix: str = ""
    """Where `config` sits in model_config.yaml ("encoder." for the encoder section), for error messages."""

    def field(self, key: str, kind: type, default: Any = REQUIRED) -> Any:
        """`key` as a `kind`; `default` only where NeMo itself has one. A YAML null counts as unset."""
        value = self.config.get(key)
        if value is None:
            if default is REQUIRED:
                raise CheckpointError(f"{self.path}: {CONFIG_MEMBER}: '{self.prefix}{key}' is missing")
            return default
        if kind is float and isinstance(value, str):  # PyYAML reads 1e-5 (no dot) as a string, OmegaConf as a float
            try:
                value = float(value)
            except ValueError:
                pass
        # bool is an int in Python, but a flag given for a size (or the reverse) is a mistake.
        numeric = (int, float) if kind is float else kind
        if isinstance(value, bool) != (kind is bool) or not isinstance(value, numeric):
            expected = f"expected {kind.__name__}"
            raise CheckpointError(f"{self.path}: {CONFIG_MEMBER}: '{self.prefix}{key}'={value!r}, {expected}")
        return kind(value)

    def invalid(self, key: str, value: Any, requirement: str) -> CheckpointError:
        """The error for a field whose value the HuggingFace model cannot reproduce."""
        return CheckpointError(f"{self.path}: {CONFIG_MEMBER}: '{self.prefix}{key}'={value!r}; {requirement}")

    def has_section(self, name: str) -> bool:
        return isinstance(self.config.get(name), dict)

    def section(self, name: str) -> NemoArchive:
        """The same archive, reading the fields of the `name:` section."""
        return replace(self, config=self.config[name], prefix=f"{self.prefix}{name}.")


def read_nemo(path: Path) -> NemoArchive:
    """Read the config, weights and other files of a single-shard `.nemo` file."""
    try:
        with tarfile.open(path, "r:*") as archive:
            members = {str(PurePosixPath(member.name)): member for member in archive.getmembers() if member.isfile()}
            shards = sorted(name for name in members if PurePosixPath(name).name == WEIGHTS_MEMBER)
            if len(shards) > 1:
                raise CheckpointError(f"{path}: model-parallel shards {shards}; merge them into one {WEIGHTS_MEMBER}")
            for needed in (CONFIG_MEMBER, shards[0] if shards else WEIGHTS_MEMBER):
                if needed not in members:
                    raise CheckpointError(f"{path}: no member '{needed}' in the archive")
            contents = {name: archive.extractfile(member).read() for name, member in members.items()}
    except (tarfile.TarError, OSError) as error:
        raise CheckpointError(f"{path}: not a readable .nemo archive ({error})") from error
    config_text, weights_bytes = contents.pop(CONFIG_MEMBER), contents.pop(shards[0])
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
    return NemoArchive(path, config, state_dict, contents)


def check_unsplit(archive: NemoArchive) -> None:
    """The tables read whole tensors, not the slices of tensor- or pipeline-parallel ranks."""
    for parallel in ("tensor_model_parallel_size", "pipeline_model_parallel_size"):
        size = archive.field(parallel, int, 1)
        if size != 1:
            raise archive.invalid(parallel, size, "must be 1 (merge the shards first)")


def attention_heads(settings: NemoArchive, hidden_size: int) -> int:
    """num_attention_heads; HuggingFace attention has no head size but hidden_size / heads (Megatron's kv_channels)."""
    heads = settings.field("num_attention_heads", int)
    kv_channels = settings.field("kv_channels", int, None)
    if kv_channels is not None and kv_channels * heads != hidden_size:
        requirement = "HuggingFace attention needs hidden_size / num_attention_heads"
        raise settings.invalid("kv_channels", kv_channels, requirement)
    return heads


def check_vocabulary(archive: NemoArchive, tokens: tuple[str, ...], source: str) -> None:
    """The vocabulary file the archive carries (`tokenizer.vocab_file: nemo:<member>`) must be the served one.

    The service tokenizes with `tokens` (`source` says which they are); a model
    trained with other ids would read the wrong embedding rows. An archive that
    carries no vocabulary file is taken as it is.
    """
    tokenizer = archive.config.get("tokenizer")
    reference = tokenizer.get("vocab_file") if isinstance(tokenizer, dict) else None
    if not isinstance(reference, str) or not reference.startswith(ARTIFACT_PREFIX):
        return  # none, or a path on the machine that trained it: nothing here to compare
    member = reference.removeprefix(ARTIFACT_PREFIX)
    if member not in archive.artifacts:
        raise archive.invalid("tokenizer.vocab_file", reference, f"the archive has no member '{member}'")
    try:
        lines = archive.artifacts[member].decode("utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise CheckpointError(f"{archive.path / member}: not a text vocabulary ({error})") from error
    # One token per line; a sentencepiece .vocab adds a tab and the piece's score.
    found = [line.split("\t", 1)[0].strip() for line in lines if line.strip()]
    try:
        check_token_ids(archive.path / member, found, tokens)
    except CheckpointError as error:
        raise CheckpointError(
            f"{error}. The service tokenizes with {source} and serves no other: export a checkpoint trained with it"
        ) from error


Convert = Callable[[torch.Tensor], tuple[torch.Tensor, ...]]
"""Megatron tensor -> the HuggingFace tensors, one per target of the rule or one that every target receives.

It raises ValueError (with the reason) for a tensor it cannot use; a reshape
that does not fit (RuntimeError) is reported as a wrong shape.
"""


def _same(tensor: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (tensor,)


def first_rows(count: int) -> Convert:
    """Megatron pads the vocabulary to `make_vocab_size_divisible_by` rows; the rows past `count` are unused."""

    def convert(tensor: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if len(tensor) < count:
            raise ValueError(f"{len(tensor)} rows, fewer than the {count} tokens of the served vocabulary")
        return (tensor[:count],)

    return convert


def prepend_rows(count: int) -> Convert:
    """Megatron numbers positions from 0; HuggingFace models that start later keep `count` unused rows before."""
    return lambda tensor: (torch.cat((torch.zeros(count, *tensor.shape[1:], dtype=tensor.dtype), tensor)),)


def split_heads(heads: int, parts: int) -> Convert:
    """Megatron packs fused projections head by head, rows [heads, parts, head_dim]; HF keeps `parts` matrices."""

    def convert(tensor: torch.Tensor) -> tuple[torch.Tensor, ...]:
        rest = tensor.shape[1:]
        per_head = tensor.reshape(heads, parts, -1, *rest)
        return tuple(per_head[:, part].reshape(-1, *rest) for part in range(parts))

    return convert


@dataclass(frozen=True)
class Rule:
    """One Megatron key (`{layer}` for every layer, see `per_layer`) and the HuggingFace keys it becomes."""

    megatron: str
    huggingface: tuple[str, ...]
    convert: Convert = _same


def per_layer(rules: Iterable[Rule], layers: int) -> list[Rule]:
    """Each rule once per layer, `{layer}` filled in."""
    return [
        Rule(rule.megatron.format(layer=n), tuple(key.format(layer=n) for key in rule.huggingface), rule.convert)
        for n in range(layers)
        for rule in rules
    ]


def layer_rules(
    megatron: str,
    huggingface: str,
    modules: dict[str, str],
    packed: dict[str, tuple[str, ...]],
    heads: int,
    layers: int,
) -> list[Rule]:
    """Weight and bias of each layer's modules (prefixes hold `{layer}`); `packed` ones fuse projections per head."""
    rules = []
    for name in ("weight", "bias"):
        rules += [Rule(f"{megatron}{module}.{name}", (f"{huggingface}{hf}.{name}",)) for module, hf in modules.items()]
        rules += [
            Rule(
                f"{megatron}{source}.{name}",
                tuple(f"{huggingface}{target}.{name}" for target in targets),
                split_heads(heads, len(targets)),
            )
            for source, targets in packed.items()
        ]
    return per_layer(rules, layers)


def rename(
    archive: NemoArchive, rules: list[Rule], unused: frozenset[str], targets: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """The HuggingFace state dict: every rule's key must be there with the shape of its targets, nothing else."""
    known = {rule.megatron for rule in rules}
    for key in archive.state_dict:
        if key not in known and key not in unused:
            raise CheckpointError(f"{archive.path}: {WEIGHTS_MEMBER}: unknown key '{key}'")
    renamed: dict[str, torch.Tensor] = {}
    for rule in rules:
        if rule.megatron not in archive.state_dict:
            raise CheckpointError(f"{archive.path}: {WEIGHTS_MEMBER}: missing key '{rule.megatron}'")
        source = archive.state_dict[rule.megatron]
        expected = [tuple(targets[name].shape) for name in rule.huggingface]
        try:
            converted = rule.convert(source)
        except ValueError as error:
            raise CheckpointError(f"{archive.path}: {WEIGHTS_MEMBER}: '{rule.megatron}' has {error}") from error
        except RuntimeError:  # a reshape that does not fit: the same mistake as a wrong shape
            converted = ()
        if len(converted) == 1:
            converted *= len(rule.huggingface)
        if [tuple(tensor.shape) for tensor in converted] != expected:
            raise CheckpointError(
                f"{archive.path}: {WEIGHTS_MEMBER}: '{rule.megatron}' has shape {tuple(source.shape)}; "
                f"{CONFIG_MEMBER} implies {' + '.join(map(str, expected))} for {', '.join(rule.huggingface)}"
            )
        renamed.update({name: tensor.float() for name, tensor in zip(rule.huggingface, converted)})
    return renamed


def load_renamed(
    model: torch.nn.Module, archive: NemoArchive, rules: list[Rule], unused: frozenset[str], untouched: frozenset[str]
) -> None:
    """Fill `model` from the archive: every tensor of its state dict comes from a rule but those in `untouched`."""
    outcome = model.load_state_dict(rename(archive, rules, unused, model.state_dict()), strict=False)
    assert not outcome.unexpected_keys and set(outcome.missing_keys) <= untouched, outcome
