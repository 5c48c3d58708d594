"""The ESM tokenizer against transformers' EsmTokenizer built from the same vocabulary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from transformers import EsmTokenizer as HFEsmTokenizer

from preprocessing import ESM_ALPHABET, EsmTokenizer, SequenceError, mean_pool
from preprocessing.esm_tokenizer import RESIDUES

SEQUENCES = ["MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL", "A", "XBUZOACDEFGHIKLMNPQRSTVWY", "MKT" * 50]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> HFEsmTokenizer:
    vocab = Path(tmp_path_factory.mktemp("vocab")) / "vocab.txt"
    vocab.write_text("\n".join(ESM_ALPHABET) + "\n")
    return HFEsmTokenizer(vocab_file=str(vocab))


def test_alphabet_is_the_33_token_esm_alphabet(reference: HFEsmTokenizer) -> None:
    assert len(ESM_ALPHABET) == 33
    assert reference.convert_tokens_to_ids(["<cls>", "<pad>", "<eos>", "<mask>"]) == [0, 1, 2, 32]


@pytest.mark.parametrize("sequence", SEQUENCES)
def test_ids_match_transformers(reference: HFEsmTokenizer, sequence: str) -> None:
    ours = EsmTokenizer(max_residues=1022).encode(sequence)
    assert ours.tolist() == reference(sequence)["input_ids"]


def test_padded_batch_matches_transformers(reference: HFEsmTokenizer) -> None:
    ours = EsmTokenizer(max_residues=1022).batch(SEQUENCES)
    theirs = reference(SEQUENCES, padding=True, return_tensors="np")
    np.testing.assert_array_equal(ours.input_ids, theirs["input_ids"])
    np.testing.assert_array_equal(ours.attention_mask, theirs["attention_mask"])
    assert ours.residue_mask.sum(axis=1).tolist() == [len(s) for s in SEQUENCES]
    assert not ours.residue_mask[:, 0].any()  # <cls> is never a residue


def test_lower_case_reads_as_upper_case() -> None:
    tokenizer = EsmTokenizer(max_residues=100)
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
    with pytest.raises(SequenceError, match=message) as raised:
        EsmTokenizer(max_residues=10).batch(["MK", sequence])
    assert raised.value.index == 1


def test_mean_pool_averages_only_masked_positions() -> None:
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(2, 6, 4)).astype(np.float32)
    mask = np.array([[0, 1, 1, 0, 0, 0], [0, 1, 1, 1, 1, 0]], dtype=bool)
    pooled = mean_pool(hidden, mask)
    np.testing.assert_allclose(pooled[0], hidden[0, 1:3].mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(pooled[1], hidden[1, 1:5].mean(axis=0), rtol=1e-6)
