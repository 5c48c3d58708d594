"""Tokenizers and post-processing that run in the service process, next to the Triton calls."""

from model_catalog import ModelDescription, TokenizerKind
from preprocessing.errors import SequenceError
from preprocessing.pooling import l2_normalize, mean_pool
from preprocessing.protein_tokenizer import (
    ESM_VOCABULARY,
    PROTT5_VOCABULARY,
    ProteinTokenizer,
    TokenBatch,
)

_VOCABULARIES = {TokenizerKind.ESM: ESM_VOCABULARY, TokenizerKind.PROTT5: PROTT5_VOCABULARY}


def tokenizer_for(description: ModelDescription) -> ProteinTokenizer:
    """The tokenizer a model description names, bound to the model's length limit."""
    return ProteinTokenizer(_VOCABULARIES[description.tokenizer], description.max_residues)


__all__ = ["ProteinTokenizer", "SequenceError", "TokenBatch", "l2_normalize", "mean_pool", "tokenizer_for"]
