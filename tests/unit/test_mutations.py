"""Variants in the standard notation (A23G, A23G:K45R) read against a wild type: what they change, and every way one
can be wrong, each reported under the variant's index with the reason."""

from __future__ import annotations

import pytest

from bionemo_serving.model_catalog import SCORED_AMINO_ACIDS
from bionemo_serving.engine.mutations import Substitution, all_substitutions, apply, parse_variants
from bionemo_serving.errors import InvalidRequest, http_status

WILD_TYPE = "MKTAYIAKQR"


def test_a_single_substitution_is_its_0_based_position_wild_type_and_mutant() -> None:
    assert parse_variants(["K2R"], WILD_TYPE) == [(Substitution(1, "K", "R"),)]


def test_a_multi_mutant_is_its_substitutions_in_position_order_whatever_the_order_written() -> None:
    (variant,) = parse_variants(["Q9A:M1V:T3W"], WILD_TYPE)
    assert variant == (Substitution(0, "M", "V"), Substitution(2, "T", "W"), Substitution(8, "Q", "A"))


def test_letters_and_the_wild_type_are_read_in_either_case() -> None:
    assert parse_variants(["k2r"], WILD_TYPE.lower()) == parse_variants(["K2R"], WILD_TYPE)


def test_a_synonymous_substitution_is_a_variant() -> None:
    """Its score is 0 by every method; refusing it would make a scan's own column special for clients."""
    assert parse_variants(["K2K"], WILD_TYPE) == [(Substitution(1, "K", "K"),)]


@pytest.mark.parametrize(
    ("mutation", "reason"),
    [
        ("M1", "'M1' is not a substitution like A23G (wild type, 1-based position, mutant)"),
        ("1MA", "'1MA' is not a substitution like A23G"),
        ("M1A:", "'' is not a substitution like A23G"),
        ("M-1A", "'M-1A' is not a substitution like A23G"),
        ("M0A", "position 0 is outside the sequence (1 to 10)"),
        ("R11A", "position 11 is outside the sequence (1 to 10)"),
        ("A1G", "position 1 is M in the sequence, not A"),
        ("M1J", "'J' is not one of the 20 amino acids ACDEFGHIKLMNPQRSTVWY"),
        ("M1X", "'X' is not one of the 20 amino acids"),
        ("M1A:M1C", "position 1 is substituted twice"),
    ],
)
def test_a_bad_variant_is_a_422_naming_it_by_index_and_saying_why(mutation: str, reason: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        parse_variants(["K2R", mutation], WILD_TYPE)
    (problem,) = raised.value.problems
    assert http_status(raised.value) == 422
    assert problem.field == "mutations[1]"
    assert problem.message.startswith(f"{mutation!r}: {reason}"), problem.message


def test_a_wild_type_that_is_not_an_amino_acid_is_refused_where_the_sequence_has_it() -> None:
    """B is a residue letter the tokenizer reads (an ambiguity code), but no amino acid a score can compare."""
    with pytest.raises(InvalidRequest, match="'B' is not one of the 20 amino acids"):
        parse_variants(["B2A"], "MBT")


def test_every_bad_variant_is_reported_at_once_under_the_field_asked() -> None:
    with pytest.raises(InvalidRequest) as raised:
        parse_variants(["M1", "K2R", "A1G", "T3W:T3A"], WILD_TYPE, field="variants")
    assert [problem.field for problem in raised.value.problems] == ["variants[0]", "variants[2]", "variants[3]"]


def test_all_substitutions_are_every_position_by_every_other_amino_acid_in_order() -> None:
    variants = all_substitutions("mka")
    assert len(variants) == 3 * (len(SCORED_AMINO_ACIDS) - 1)
    assert all(len(variant) == 1 for variant in variants)
    expected = [
        (position, wild_type, mutant)
        for position, wild_type in enumerate("MKA")
        for mutant in SCORED_AMINO_ACIDS
        if mutant != wild_type
    ]
    assert [(s.position, s.wild_type, s.mutant) for (s,) in variants] == expected


def test_apply_makes_the_mutant_sequence_and_leaves_the_rest() -> None:
    (single, double) = parse_variants(["K2R", "M1V:R10W"], WILD_TYPE)
    assert apply(WILD_TYPE, single) == "MRTAYIAKQR"
    assert apply(WILD_TYPE.lower(), double) == "VKTAYIAKQW"
    assert apply(WILD_TYPE, ()) == WILD_TYPE
