"""MegaMolBART's SMILES tokenizer, and RDKit checks of molecules.

The regex and the vocabulary are MegaMolBART's (NVIDIA/MegaMolBART
`models/vocab/megamolbart.model`, MolecularAI/MolBART `bart_vocab.txt`; the
ids match those BioNeMo's MegaMolBART tests expect, e.g. C=272, c=273).
As in NeMo's RegExTokenizer, a character the regex does not cover is a token
of its own. The encoder reads the tokens alone; the decoder starts from the
begin token `^` and ends with `&`.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from rdkit import Chem, DataStructs, RDLogger
from rdkit.Chem import rdFingerprintGenerator

from bionemo_serving.preprocessing.batching import TokenBatch, pad_batch
from bionemo_serving.preprocessing.errors import SequenceError, SequenceTooLong
from bionemo_serving.preprocessing.vocabularies import read_vocabulary

RDLogger.DisableLog("rdApp.*")  # parse failures are answered to the client, not logged

SMILES_REGEX = re.compile(
    r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|\/|:|~|@|\?|>|\*|\$|\%[0-9]{2}|[0-9]|.)"
)
VOCABULARY_FILE = Path(__file__).parent / "vocab" / "megamolbart.vocab"
MEGAMOLBART_TOKENS: tuple[str, ...] = read_vocabulary(VOCABULARY_FILE)
PAD, UNKNOWN, BEGIN, END = "<PAD>", "?", "^", "&"
FIRST_CHEMISTRY_ID = 272
"""Ids below this are special, property and unused tokens; SMILES only produce ids from here on."""

_MORGAN = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)


def canonical_smiles(smiles: str) -> str | None:
    """RDKit's canonical form, or None when RDKit cannot parse `smiles` into a molecule."""
    molecule = Chem.MolFromSmiles(smiles) if smiles else None
    return Chem.MolToSmiles(molecule) if molecule is not None else None


def tanimoto_similarity(smiles: str, other: str) -> float | None:
    """Tanimoto similarity of Morgan fingerprints (radius 2, 2048 bits); None if either does not parse."""
    molecules = [Chem.MolFromSmiles(s) if s else None for s in (smiles, other)]
    if any(m is None for m in molecules):
        return None
    first, second = (_MORGAN.GetFingerprint(m) for m in molecules)
    return float(DataStructs.TanimotoSimilarity(first, second))


class SmilesTokenizer:
    """Regex tokens of a valid SMILES; refuses what RDKit cannot parse and tokens outside the vocabulary."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.tokens = MEGAMOLBART_TOKENS
        self.ids = {token: index for index, token in enumerate(self.tokens)}
        self.pad_id, self.begin_id, self.end_id = self.ids[PAD], self.ids[BEGIN], self.ids[END]
        self.content_ids = np.arange(FIRST_CHEMISTRY_ID, len(self.tokens), dtype=np.int64)

    @property
    def max_model_tokens(self) -> int:
        """Tokens of the longest encoder input: SMILES tokens alone."""
        return self.max_tokens

    @property
    def summary_position(self) -> int | None:
        """The encoder input has no whole-molecule token."""
        return None

    def split(self, smiles: str) -> list[str]:
        return SMILES_REGEX.findall(smiles)

    def encode(self, smiles: str, index: int = 0, truncate: bool = False) -> np.ndarray:
        """Token ids of one SMILES for the encoder (no begin or end token); `index` names it in errors. A SMILES
        over the limit is an error, or with `truncate` its first `max_tokens` tokens (the whole is checked)."""
        if not smiles:
            raise SequenceError(index, "SMILES is empty")
        if canonical_smiles(smiles) is None:
            raise SequenceError(index, f"{smiles!r} is not a valid SMILES: RDKit cannot parse it")
        tokens = self.split(smiles)
        unknown = [token for token in tokens if token not in self.ids or self.ids[token] < FIRST_CHEMISTRY_ID]
        if unknown:
            raise SequenceError(index, f"token {unknown[0]!r} is not in MegaMolBART's vocabulary")
        if len(tokens) > self.max_tokens and not truncate:
            raise SequenceTooLong(index, f"SMILES has {len(tokens)} tokens; this model accepts at most {self.max_tokens}")
        return np.array([self.ids[token] for token in tokens[: self.max_tokens]], dtype=np.int64)

    def is_over_limit(self, smiles: str) -> bool:
        return len(self.split(smiles)) > self.max_tokens

    def wrap(self, content_ids: np.ndarray) -> np.ndarray:
        """The encoder input for a run of content tokens: the tokens alone."""
        return content_ids

    def pad(self, encoded: list[np.ndarray], width: int | None = None) -> TokenBatch:
        """Right-pad encoder inputs; every real token counts for pooling, since there are no special ones."""
        return pad_batch(encoded, self.pad_id, 0, 0, width)

    def decode(self, ids: np.ndarray) -> str:
        """SMILES text of a decoded row: the tokens after the leading begin token, up to the end token.

        Every generated token is kept, special ones too, so that what the model produced is what the client sees.
        """
        tokens = ids.tolist()[1:] if len(ids) and ids[0] == self.begin_id else ids.tolist()
        if self.end_id in tokens:
            tokens = tokens[: tokens.index(self.end_id)]
        return "".join(self.tokens[token] for token in tokens)
