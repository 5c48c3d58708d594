"""Tokenizers and post-processing that run in the service process, next to the Triton calls."""

from __future__ import annotations

from bionemo_serving.model_catalog import ModelDescription, TokenizerKind
from bionemo_serving.preprocessing.batching import TokenBatch
from bionemo_serving.preprocessing.errors import SequenceError, SequenceTooLong
from bionemo_serving.preprocessing.pooling import l2_normalize
from bionemo_serving.preprocessing.protein_tokenizer import ESM_VOCABULARY, PROTT5_VOCABULARY, ProteinTokenizer
from bionemo_serving.preprocessing.smiles import SmilesTokenizer

Tokenizer = ProteinTokenizer | SmilesTokenizer


def tokenizer_for(description: ModelDescription) -> Tokenizer:
    """The tokenizer a model description names, bound to the model's length limit."""
    if description.tokenizer is TokenizerKind.SMILES:
        return SmilesTokenizer(description.max_length)
    vocabularies = {TokenizerKind.ESM: ESM_VOCABULARY, TokenizerKind.PROTT5: PROTT5_VOCABULARY}
    return ProteinTokenizer(vocabularies[description.tokenizer], description.max_length)


__all__ = [
    "ProteinTokenizer",
    "SequenceError",
    "SequenceTooLong",
    "SmilesTokenizer",
    "TokenBatch",
    "Tokenizer",
    "l2_normalize",
    "tokenizer_for",
]
