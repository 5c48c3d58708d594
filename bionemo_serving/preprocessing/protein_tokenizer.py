"""A vectorised residue tokenizer, configured per model family (ESM, ProtT5).

Both families put one token per residue between fixed prefix and suffix
tokens and right-pad; they differ in vocabulary, in those special tokens and
in how rare residues map to tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bionemo_serving.model_catalog import SCORED_AMINO_ACIDS
from bionemo_serving.preprocessing.batching import TokenBatch, pad_batch
from bionemo_serving.preprocessing.errors import SequenceError, SequenceTooLong
from bionemo_serving.preprocessing.vocabularies import ESM_ALPHABET, PROTT5_TOKENS

# Letters a protein sequence may contain: the 20 standard amino acids plus the
# IUPAC ambiguity and rare codes (X B U Z O). Gap symbols and special tokens
# are not residues and are refused. Lower case reads as upper case.
STANDARD_RESIDUES = SCORED_AMINO_ACIDS
RESIDUES = STANDARD_RESIDUES + "XBUZO"


@dataclass(frozen=True)
class ProteinVocabulary:
    tokens: tuple[str, ...]
    residue_tokens: dict[str, str]
    """Each accepted upper-case letter -> its token."""
    prefix: tuple[str, ...]
    suffix: tuple[str, ...]
    pad: str
    mask: str | None = None
    """The token a masked language model predicts; written as itself within a sequence where masks are allowed."""


ESM_VOCABULARY = ProteinVocabulary(
    tokens=ESM_ALPHABET,
    residue_tokens={residue: residue for residue in RESIDUES},
    prefix=("<cls>",),
    suffix=("<eos>",),
    pad="<pad>",
    mask="<mask>",
)

# ProtT5 was trained with U, Z, O and B replaced by X (Elnaggar et al. 2021),
# and reads one "▁"-prefixed piece per residue, then </s>.
PROTT5_VOCABULARY = ProteinVocabulary(
    tokens=PROTT5_TOKENS,
    residue_tokens={residue: "▁" + (residue if residue in STANDARD_RESIDUES else "X") for residue in RESIDUES},
    prefix=(),
    suffix=("</s>",),
    pad="<pad>",
)


class ProteinTokenizer:
    """prefix + one token per residue + suffix, then padding up to the longest sequence.

    Anything outside `RESIDUES` (either case) is an error naming the character and its position.
    """

    def __init__(self, vocabulary: ProteinVocabulary, max_residues: int) -> None:
        self.vocabulary = vocabulary
        self.max_residues = max_residues
        ids = {token: index for index, token in enumerate(vocabulary.tokens)}
        self.prefix_ids = np.array([ids[token] for token in vocabulary.prefix], dtype=np.int64)
        self.suffix_ids = np.array([ids[token] for token in vocabulary.suffix], dtype=np.int64)
        self.pad_id = ids[vocabulary.pad]
        self.mask_id = ids[vocabulary.mask] if vocabulary.mask else None
        self.content_ids = np.unique([ids[token] for token in vocabulary.residue_tokens.values()])
        self._byte_to_id = np.full(256, -1, dtype=np.int64)
        for residue, token in vocabulary.residue_tokens.items():
            self._byte_to_id[ord(residue)] = self._byte_to_id[ord(residue.lower())] = ids[token]

    @property
    def max_model_tokens(self) -> int:
        """Tokens of the longest input the model is given: the most residues and the special tokens."""
        return len(self.prefix_ids) + self.max_residues + len(self.suffix_ids)

    @property
    def summary_position(self) -> int | None:
        """Where a whole-sequence token (<cls>) sits, if the model has one."""
        return 0 if len(self.prefix_ids) else None

    def encode(self, sequence: str, index: int = 0, truncate: bool = False, masks: bool = False) -> np.ndarray:
        """Token ids of one sequence without padding; `index` names it in errors. A sequence over the limit is an
        error, or with `truncate` its first `max_residues` residues (every character is checked either way).
        With `masks`, the vocabulary's mask token (`<mask>`) may stand for any residue."""
        if not sequence:
            raise SequenceError(index, "sequence is empty")
        mask = self.vocabulary.mask if masks else None
        pieces = sequence.split(mask) if mask else [sequence]
        residues = sum(map(len, pieces)) + len(pieces) - 1
        if self.is_over_limit(sequence, masks) and not truncate:
            raise SequenceTooLong(index, f"sequence has {residues} residues; this model accepts at most {self.max_residues}")
        ids, start = [], 0
        for piece in pieces:
            if ids:
                ids.append(np.array([self.mask_id], dtype=np.int64))
            ids.append(self._residue_ids(piece, index, start))
            start += len(piece) + len(mask or "")
        return self.wrap(np.concatenate(ids)[: self.max_residues])

    def _residue_ids(self, residues: str, index: int, offset: int) -> np.ndarray:
        """The ids of a run of residue letters that starts at character `offset` of sequence `index`."""
        if not residues.isascii():
            position, character = next((p, c) for p, c in enumerate(residues) if not c.isascii())
            raise SequenceError(index, self._bad_character_message(character, offset + position))
        residue_ids = self._byte_to_id[np.frombuffer(residues.encode("ascii"), dtype=np.uint8)]
        unknown = np.flatnonzero(residue_ids < 0)
        if unknown.size:
            position = int(unknown[0])
            raise SequenceError(index, self._bad_character_message(residues[position], offset + position))
        return residue_ids

    def is_over_limit(self, sequence: str, masks: bool = False) -> bool:
        """Over the residue limit, each `<mask>` counting as one residue where masks are allowed."""
        mask = self.vocabulary.mask if masks else None
        residues = len(sequence) - (sequence.count(mask) * (len(mask) - 1) if mask else 0)
        return residues > self.max_residues

    def wrap(self, content_ids: np.ndarray) -> np.ndarray:
        """The model input for a run of residue tokens: prefix + residues + suffix."""
        return np.concatenate((self.prefix_ids, content_ids, self.suffix_ids))

    def pad(self, encoded: list[np.ndarray], width: int | None = None) -> TokenBatch:
        """Right-pad sequences from `encode` to `width` (default: the longest of them)."""
        return pad_batch(encoded, self.pad_id, len(self.prefix_ids), len(self.suffix_ids), width)

    @staticmethod
    def _bad_character_message(character: str, position: int) -> str:
        return (
            f"character {character!r} at position {position} is not an amino acid; "
            f"allowed: {RESIDUES} (either case)"
        )
