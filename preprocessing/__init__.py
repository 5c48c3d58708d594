"""Tokenizers and post-processing that run in the service process, next to the Triton calls."""

from model_catalog import ModelDescription, TokenizerKind
from preprocessing.errors import SequenceError
from preprocessing.esm_tokenizer import ESM_ALPHABET, EsmTokenizer, TokenBatch
from preprocessing.pooling import mean_pool


def tokenizer_for(description: ModelDescription) -> EsmTokenizer:
    """The tokenizer a model description names, bound to the model's length limit."""
    tokenizers = {TokenizerKind.ESM: EsmTokenizer}
    return tokenizers[description.tokenizer](description.max_residues)


__all__ = ["ESM_ALPHABET", "EsmTokenizer", "SequenceError", "TokenBatch", "mean_pool", "tokenizer_for"]
