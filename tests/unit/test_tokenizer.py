"""Protein tokenizers against the transformers tokenizers saved with each architecture's checkpoint (a tiny one here:
the exporter writes the same tokenizer at any size)."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoTokenizer

from bionemo_serving.model_catalog import MODELS, TokenizerKind
from bionemo_serving.preprocessing import ProteinTokenizer, SequenceError, SmilesTokenizer, l2_normalize, tokenizer_for
from bionemo_serving.preprocessing.batching import bucket_width, bucketed_chunks
from bionemo_serving.preprocessing.protein_tokenizer import RESIDUES
from bionemo_serving.preprocessing.vocabularies import ESM_ALPHABET, PROTT5_TOKENS
from support.checkpoints import TinyModels

SEQUENCES = ["MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL", "A", "XBUZOACDEFGHIKLMNPQRSTVWY", "MKT" * 50]
TOKENIZER_MODELS = {TokenizerKind.ESM: "esm2nv", TokenizerKind.PROTT5: "prott5nv"}


def reference_text(kind: TokenizerKind, sequence: str) -> str:
    """How each family's own tokenizer expects a sequence: ProtT5 wants spaced residues with UZOB as X."""
    if kind is TokenizerKind.PROTT5:
        return " ".join("X" if residue in "UZOB" else residue for residue in sequence)
    return sequence


@pytest.fixture(scope="module", params=list(TOKENIZER_MODELS))
def kind(request: pytest.FixtureRequest) -> TokenizerKind:
    return request.param


@pytest.fixture(scope="module")
def pair(kind: TokenizerKind, tiny_models: TinyModels) -> tuple[ProteinTokenizer, object]:
    name = TOKENIZER_MODELS[kind]
    return tokenizer_for(MODELS[name]), AutoTokenizer.from_pretrained(tiny_models.checkpoint(name))


def test_vocabularies_have_the_released_sizes() -> None:
    assert len(ESM_ALPHABET) == 33 and ESM_ALPHABET[0] == "<cls>" and ESM_ALPHABET[32] == "<mask>"
    assert len(PROTT5_TOKENS) == 128 and PROTT5_TOKENS[3] == "▁A" and PROTT5_TOKENS[127] == "<extra_id_0>"


def test_whole_vocabulary_matches(kind: TokenizerKind, pair: tuple[ProteinTokenizer, object]) -> None:
    ours, theirs = pair
    assert list(ours.vocabulary.tokens) == theirs.convert_ids_to_tokens(list(range(len(theirs))))


@pytest.mark.parametrize("sequence", SEQUENCES)
def test_ids_match_transformers(kind: TokenizerKind, pair: tuple[ProteinTokenizer, object], sequence: str) -> None:
    ours, theirs = pair
    assert ours.encode(sequence).tolist() == theirs(reference_text(kind, sequence))["input_ids"]


def test_padded_batch_matches_transformers(kind: TokenizerKind, pair: tuple[ProteinTokenizer, object]) -> None:
    ours, theirs = pair
    batch = ours.pad([ours.encode(sequence, index) for index, sequence in enumerate(SEQUENCES)])
    expected = theirs([reference_text(kind, s) for s in SEQUENCES], padding=True, return_tensors="np")
    np.testing.assert_array_equal(batch.input_ids, expected["input_ids"])
    np.testing.assert_array_equal(batch.attention_mask, expected["attention_mask"])
    assert batch.residue_mask.sum(axis=1).tolist() == [len(s) for s in SEQUENCES]


def test_lower_case_reads_as_upper_case() -> None:
    tokenizer = tokenizer_for(MODELS["esm2nv"])
    assert tokenizer.encode(RESIDUES.lower()).tolist() == tokenizer.encode(RESIDUES).tolist()


@pytest.mark.parametrize(
    ("sequence", "message"),
    [
        ("", "sequence is empty"),
        ("MKJ", "character 'J' at position 2 is not an amino acid"),
        ("MK-A", "character '-' at position 2"),
        ("MK A", "character ' ' at position 2"),
        ("MKé", "character 'é' at position 2"),
        ("<mask>", "character '<' at position 0"),
        ("A" * 11, "sequence has 11 residues; this model accepts at most 10"),
    ],
)
def test_bad_sequences_name_the_problem(sequence: str, message: str) -> None:
    tokenizer = ProteinTokenizer(tokenizer_for(MODELS["esm2nv"]).vocabulary, max_residues=10)
    with pytest.raises(SequenceError, match=message) as raised:
        [tokenizer.encode(each, index) for index, each in enumerate(["MK", sequence])]
    assert raised.value.index == 1


def test_truncate_keeps_the_first_residues_and_checks_them_all() -> None:
    tokenizer = ProteinTokenizer(tokenizer_for(MODELS["esm2nv"]).vocabulary, max_residues=10)
    assert tokenizer.encode("MKTAYIAKQRQISFVK", truncate=True).tolist() == tokenizer.encode("MKTAYIAKQR").tolist()
    assert tokenizer.is_over_limit("A" * 11) and not tokenizer.is_over_limit("A" * 10)
    with pytest.raises(SequenceError, match="'J' at position 12"):
        tokenizer.encode("MKTAYIAKQRQIJ", truncate=True)


def test_smiles_truncate_keeps_the_first_tokens_of_a_valid_smiles() -> None:
    tokenizer = SmilesTokenizer(max_tokens=4)
    assert tokenizer.encode("CCOc1ccccc1", truncate=True).tolist() == [tokenizer.ids[token] for token in "CCOc"]
    with pytest.raises(SequenceError, match="5 tokens; this model accepts at most 4"):
        tokenizer.encode("CCOCC")
    with pytest.raises(SequenceError, match="not a valid SMILES"):
        tokenizer.encode("CCOc1cc", truncate=True)


def test_l2_normalize() -> None:
    vectors = np.array([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32)
    np.testing.assert_allclose(l2_normalize(vectors), [[0.6, 0.8], [0.0, 0.0]])


def test_length_buckets_grow_by_at_most_a_quarter_and_stop_at_the_model_limit() -> None:
    widths = [bucket_width(length, 1024) for length in range(1, 1025)]
    assert sorted(set(widths))[:14] == [16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160]
    assert sorted(set(widths))[-3:] == [768, 896, 1024]
    assert all(length <= width <= max(16, length * 1.25) for length, width in zip(range(1, 1025), widths))
    assert bucket_width(700, 512) == 700 and bucket_width(500, 512) == 512  # never below the row, never over the cap


def test_a_request_is_cut_into_chunks_of_one_bucket_each() -> None:
    lengths = [300, 20, 900, 22, 310, 21, 19]
    chunks = bucketed_chunks(lengths, ceiling=1024, max_batch_size=2)
    assert chunks == [(20, [6, 1]), (24, [5, 3]), (320, [0, 4]), (1024, [2])]
    assert sorted(row for _, rows in chunks for row in rows) == list(range(len(lengths)))
