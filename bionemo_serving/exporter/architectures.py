"""How each architecture is created at random, saved, loaded and wrapped for tracing.

A checkpoint is an ordinary HuggingFace folder (`config.json`, weights,
tokenizer files): the default random models are written in that form so that
a user's own checkpoint takes exactly the same path.
"""

from __future__ import annotations

import filecmp
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from google.protobuf.message import DecodeError
from safetensors import SafetensorError

from bionemo_serving.exporter.errors import CheckpointError
from bionemo_serving.exporter.exportable import (
    ESM_COMMON,
    ESM_POSITIONS,
    MEGAMOLBART_COMMON,
    ExportableModel,
    check_token_ids,
    encoder_graphs,
    encoder_only,
    hidden_layers,
)
from bionemo_serving.exporter.incremental_decoder import IncrementalDecoder, seq2seq_sizes
from bionemo_serving.exporter.nemo import NEMO_SUFFIX, load_nemo
from bionemo_serving.model_catalog import Architecture, GraphRole, ModelDescription, TrainedDefault
from bionemo_serving.preprocessing import tokenizer_for
from bionemo_serving.preprocessing.smiles import MEGAMOLBART_TOKENS, VOCABULARY_FILE
from bionemo_serving.preprocessing.vocabularies import (
    ESM_ALPHABET,
    PROTT5_BASE_VOCABULARY,
    PROTT5_TOKENS,
    read_vocabulary,
)


# Heads a saved EsmForMaskedLM or EsmModel may lack or carry beyond what is served: the masked-LM head (without
# it, no language-model graph), the contact head and the pooler (an EsmModel's, under its own name or under "esm.").
ESM_LM_HEAD, ESM_CONTACT_HEAD = "lm_head.", "esm.contact_head."
ESM_OPTIONAL_HEADS = (ESM_LM_HEAD, ESM_CONTACT_HEAD, "contact_head.", "esm.pooler.", "pooler.")

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


@dataclass(frozen=True)
class _Family:
    create: Callable[[ModelDescription, Path], None]
    load: Callable[[ModelDescription, Path], ExportableModel]


def _create_esm(description: ModelDescription, folder: Path) -> None:
    from transformers import EsmConfig, EsmForMaskedLM, EsmTokenizer

    config = EsmConfig(**ESM_COMMON, **ESM_POSITIONS[description.architecture], **description.default_checkpoint_config)
    EsmForMaskedLM(config).eval().save_pretrained(folder)
    vocab_file = folder / "vocab.txt"
    vocab_file.write_text("\n".join(ESM_ALPHABET) + "\n")
    EsmTokenizer(vocab_file=str(vocab_file)).save_pretrained(folder)


def _load_esm(description: ModelDescription, folder: Path) -> ExportableModel:
    from transformers import EsmConfig, EsmForMaskedLM

    config = EsmConfig.from_pretrained(folder)
    expected = ESM_POSITIONS[description.architecture]["position_embedding_type"]
    if config.model_type != "esm" or config.position_embedding_type != expected:
        raise CheckpointError(
            f"{folder / 'config.json'}: model_type={config.model_type!r}, position_embedding_type="
            f"{config.position_embedding_type!r}; {description.name} needs 'esm' with {expected!r}"
        )
    _check_vocab_size(folder, config.vocab_size, len(ESM_ALPHABET))
    if (folder / "vocab.txt").is_file():
        check_token_ids(folder / "vocab.txt", read_vocabulary(folder / "vocab.txt"), ESM_ALPHABET)
    masked_lm, lacking = _from_pretrained(EsmForMaskedLM, folder, ESM_OPTIONAL_HEADS)
    return encoder_only(
        masked_lm.esm, None if ESM_LM_HEAD in lacking else masked_lm, contacts=ESM_CONTACT_HEAD not in lacking
    )


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
    _check_t5_vocabulary(folder)
    # Eager attention by default (plain ONNX ops); the exporter switches to sdpa for the runtimes that fuse it.
    return encoder_only(_from_pretrained(T5EncoderModel, folder, attn_implementation="eager")[0])


def _check_t5_vocabulary(folder: Path) -> None:
    """Compare the checkpoint's tokenizer.json, or else its sentencepiece model, with ProtT5's vocabulary.

    spiece.model is read as the protobuf it is (the sentencepiece library is not
    needed): its pieces are the base vocabulary, before T5's <extra_id_N> sentinels.
    """
    if (folder / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        vocabulary = Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab(with_added_tokens=True)
        found = sorted(vocabulary, key=vocabulary.__getitem__)
        check_token_ids(folder / "tokenizer.json", found, PROTT5_TOKENS)
    elif (folder / "spiece.model").is_file():
        from transformers.utils.sentencepiece_model_pb2_new import ModelProto

        try:
            pieces = [piece.piece for piece in ModelProto.FromString((folder / "spiece.model").read_bytes()).pieces]
        except DecodeError as error:
            raise CheckpointError(f"{folder / 'spiece.model'}: not a sentencepiece model ({error})") from error
        check_token_ids(folder / "spiece.model", pieces, PROTT5_BASE_VOCABULARY)


def _create_mbart(description: ModelDescription, folder: Path) -> None:
    from transformers import MBartConfig, MBartForConditionalGeneration

    config = MBartConfig(**MEGAMOLBART_COMMON, **description.default_checkpoint_config)
    MBartForConditionalGeneration(config).eval().save_pretrained(folder)
    (folder / VOCABULARY_FILE.name).write_text(VOCABULARY_FILE.read_text())


def _load_mbart(description: ModelDescription, folder: Path) -> ExportableModel:
    from transformers import MBartConfig, MBartForConditionalGeneration

    config = MBartConfig.from_pretrained(folder)
    if config.model_type != "mbart":
        raise CheckpointError(f"{folder / 'config.json'}: model_type={config.model_type!r}; {description.name} needs 'mbart'")
    _check_vocab_size(folder, config.vocab_size, len(MEGAMOLBART_TOKENS))
    if (folder / VOCABULARY_FILE.name).is_file():
        vocabulary = read_vocabulary(folder / VOCABULARY_FILE.name)
        check_token_ids(folder / VOCABULARY_FILE.name, vocabulary, MEGAMOLBART_TOKENS)
    model, _ = _from_pretrained(MBartForConditionalGeneration, folder, attn_implementation="eager")
    return ExportableModel(
        graphs={**encoder_graphs(model.get_encoder()), GraphRole.DECODER: IncrementalDecoder(model)},
        sizes=seq2seq_sizes(config) | hidden_layers(config),
        max_positions=config.max_position_embeddings,
    )


def _from_pretrained(
    model_class: type, folder: Path, optional_heads: tuple[str, ...] = (), **options: Any
) -> tuple[Any, frozenset[str]]:
    """`model_class.from_pretrained(folder)`, where every weight the graphs use must come from the checkpoint; and
    which of `optional_heads` (key prefixes) it lacks, whose graphs are then not exported.

    transformers only warns about missing weights (it initialises them at
    random) and names no key for a shape mismatch; both are errors here, as is a
    weight the model does not know outside `optional_heads` (such as a pooler).
    """
    try:
        model, info = model_class.from_pretrained(
            folder, output_loading_info=True, ignore_mismatched_sizes=True, **options
        )
    except (OSError, ValueError, RuntimeError, SafetensorError) as error:
        raise CheckpointError(f"{folder}: cannot load {model_class.__name__} weights ({error})") from error
    if info["mismatched_keys"]:
        key, found, expected = min(info["mismatched_keys"], key=lambda mismatch: mismatch[0])
        raise CheckpointError(
            f"{folder}: weight '{key}' has shape {tuple(found)}, config.json implies {tuple(expected)}"
        )
    for problem, keys in (("missing", info["missing_keys"]), ("unknown to the model", info["unexpected_keys"])):
        relevant = sorted(key for key in keys if not key.startswith(optional_heads))
        if relevant:
            more = f" (and {len(relevant) - 1} more)" if len(relevant) > 1 else ""
            raise CheckpointError(f"{folder}: weight '{relevant[0]}' is {problem}{more}")
    lacking = frozenset(head for head in optional_heads if any(key.startswith(head) for key in info["missing_keys"]))
    return model.eval(), lacking


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


def copy_trained_default(trained: TrainedDefault, folder: Path) -> bool:
    """Make `folder` the shipped checkpoint `trained` names, file for file (a random-init one there before is
    replaced): the folder the defaults are exported from and the tests' transformers reference loads. Whether any file
    changed."""
    if not (trained.path / "config.json").is_file():
        raise CheckpointError(f"{trained.path}: the trained default the catalog names is missing")
    folder.mkdir(parents=True, exist_ok=True)
    changed = False
    for source in sorted(trained.path.iterdir()):
        target = folder / source.name
        if source.is_file() and not (target.is_file() and filecmp.cmp(source, target, shallow=False)):
            shutil.copyfile(source, target)
            changed = True
    return changed


def load_for_export(description: ModelDescription, folder: Path, attention: str | None = None) -> ExportableModel:
    """Load a checkpoint folder (or a BioNeMo `.nemo` file) as the graphs to export, in eval mode.

    `attention` is the transformers attention implementation to run ("sdpa", "eager"); None keeps each
    family's own (sdpa for ESM, eager for T5 and MBart). bionemo_serving.exporter.fused_attention needs "sdpa".
    """
    if folder.is_file() and folder.suffix == NEMO_SUFFIX:
        loaded = load_nemo(description, folder)
    elif not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder / 'config.json'}: missing; expected a HuggingFace checkpoint folder")
    else:
        loaded = _FAMILIES[description.architecture].load(description, folder)
    _check_positions(description, loaded, folder)
    for graph in loaded.graphs.values():
        graph.eval()
        if attention is not None:
            _set_attention(graph, attention)
    return loaded


def _set_attention(graph: torch.nn.Module, attention: str) -> None:
    """Switch every transformers model in `graph` to `attention`; after loading, so `.nemo` files follow too."""
    from transformers import PreTrainedModel

    for model in graph.modules():
        if isinstance(model, PreTrainedModel):
            model.set_attn_implementation(attention)


@contextmanager
def attention_implementation(graph: torch.nn.Module, attention: str) -> Iterator[None]:
    """Run `graph`'s transformers models under `attention` for the block, then under what they ran before."""
    from transformers import PreTrainedModel

    before = {model: model.config._attn_implementation for model in graph.modules() if isinstance(model, PreTrainedModel)}
    _set_attention(graph, attention)
    try:
        yield
    finally:
        for model, implementation in before.items():
            model.set_attn_implementation(implementation)


def _check_positions(description: ModelDescription, loaded: ExportableModel, checkpoint: Path) -> None:
    """The longest input the service accepts for the model must fit the checkpoint's position table."""
    longest = tokenizer_for(description).max_model_tokens
    if loaded.max_positions is not None and longest > loaded.max_positions:
        raise CheckpointError(
            f"{checkpoint}: the model has {loaded.max_positions} positions, but {description.name} accepts "
            f"{description.max_length} tokens of input ({longest} with its special tokens)"
        )
