"""The ESM alphabet and a vectorised tokenizer for ESM-1 and ESM-2 models.

The alphabet is fair-esm's `Alphabet.from_architecture("ESM-1b")`, which both
ESM-1nv and ESM-2nv use: 33 tokens, `<cls>` first, `<mask>` last.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from preprocessing.errors import SequenceError

ESM_ALPHABET: tuple[str, ...] = (
    "<cls>", "<pad>", "<eos>", "<unk>",
    "L", "A", "G", "V", "S", "E", "R", "T", "I", "D", "P", "K", "Q", "N", "F", "Y", "M", "H", "W", "C",
    "X", "B", "U", "Z", "O", ".", "-",
    "<null_1>", "<mask>",
)  # fmt: skip

# Letters a protein sequence may contain: the 20 standard amino acids plus the
# IUPAC ambiguity and rare codes the alphabet has tokens for. Gap symbols and
# special tokens are not residues and are refused.
RESIDUES = "ACDEFGHIKLMNPQRSTVWYXBUZO"


@dataclass(frozen=True)
class TokenBatch:
    """A right-padded batch, ready for the Triton model."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    residue_mask: np.ndarray
    """True exactly at residue positions: not <cls>, <eos> or padding. Pooling uses it."""

    def model_inputs(self) -> dict[str, np.ndarray]:
        """The arrays the encoder takes, keyed by their tensor names in `model_catalog.TOKEN_INPUTS`."""
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask}


class EsmTokenizer:
    """`<cls>` + one token per residue + `<eos>`, then `<pad>` up to the longest sequence.

    Lower-case letters are accepted and read as their upper-case residue;
    anything else outside `RESIDUES` is an error naming the character and its position.
    """

    def __init__(self, max_residues: int) -> None:
        self.max_residues = max_residues
        self.token_ids = {token: index for index, token in enumerate(ESM_ALPHABET)}
        self.cls_id = self.token_ids["<cls>"]
        self.eos_id = self.token_ids["<eos>"]
        self.pad_id = self.token_ids["<pad>"]
        self._byte_to_id = np.full(256, -1, dtype=np.int64)
        for residue in RESIDUES:
            self._byte_to_id[ord(residue)] = self._byte_to_id[ord(residue.lower())] = self.token_ids[residue]

    def encode(self, sequence: str, index: int = 0) -> np.ndarray:
        """Token ids of one sequence without padding; `index` names it in errors."""
        if not sequence:
            raise SequenceError(index, "sequence is empty")
        if len(sequence) > self.max_residues:
            raise SequenceError(
                index, f"sequence has {len(sequence)} residues; this model accepts at most {self.max_residues}"
            )
        if not sequence.isascii():
            position, character = next((p, c) for p, c in enumerate(sequence) if not c.isascii())
            raise SequenceError(index, self._bad_character_message(character, position))
        residue_ids = self._byte_to_id[np.frombuffer(sequence.encode("ascii"), dtype=np.uint8)]
        unknown = np.flatnonzero(residue_ids < 0)
        if unknown.size:
            position = int(unknown[0])
            raise SequenceError(index, self._bad_character_message(sequence[position], position))
        return np.concatenate(([self.cls_id], residue_ids, [self.eos_id]))

    def batch(self, sequences: list[str]) -> TokenBatch:
        """Tokenize and right-pad `sequences`; the first bad sequence raises `SequenceError`."""
        return self.pad([self.encode(sequence, index) for index, sequence in enumerate(sequences)])

    def pad(self, encoded: list[np.ndarray]) -> TokenBatch:
        """Right-pad sequences from `encode` to the longest of them."""
        width = max(len(ids) for ids in encoded)
        input_ids = np.full((len(encoded), width), self.pad_id, dtype=np.int64)
        attention_mask = np.zeros((len(encoded), width), dtype=np.int64)
        residue_mask = np.zeros((len(encoded), width), dtype=bool)
        for row, ids in enumerate(encoded):
            input_ids[row, : len(ids)] = ids
            attention_mask[row, : len(ids)] = 1
            residue_mask[row, 1 : len(ids) - 1] = True
        return TokenBatch(input_ids, attention_mask, residue_mask)

    @staticmethod
    def _bad_character_message(character: str, position: int) -> str:
        return (
            f"character {character!r} at position {position} is not an amino acid; "
            f"allowed: {RESIDUES} (either case)"
        )
