"""Variants in the standard notation (`A23G`, multi-mutants `A23G:K45R`), read against a wild-type sequence.

Every problem is reported at once, each naming the variant by its index in the
request and saying why: a wild-type letter that does not match the sequence, a
position out of range, a letter that is not one of the 20 amino acids.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bionemo_serving.model_catalog import SCORED_AMINO_ACIDS
from bionemo_serving.errors import FieldProblem, InvalidRequest

_SUBSTITUTION = re.compile(r"([A-Za-z])([0-9]+)([A-Za-z])")


@dataclass(frozen=True)
class Substitution:
    position: int
    """0-based residue index."""
    wild_type: str
    mutant: str


Variant = tuple[Substitution, ...]
"""One or more substitutions at distinct positions, in position order."""


def parse_variants(mutations: list[str], sequence: str, field: str = "mutations") -> list[Variant]:
    """Each of `mutations` as the substitutions it makes to `sequence`; an InvalidRequest naming every bad one."""
    variants, problems = [], []
    for index, mutation in enumerate(mutations):
        try:
            variants.append(_variant(mutation, sequence.upper()))
        except ValueError as error:
            problems.append(FieldProblem(f"{field}[{index}]", f"{mutation!r}: {error}"))
    if problems:
        raise InvalidRequest(problems)
    return variants


def _variant(mutation: str, sequence: str) -> Variant:
    substitutions: dict[int, Substitution] = {}
    for part in mutation.split(":"):
        match = _SUBSTITUTION.fullmatch(part)
        if match is None:
            raise ValueError(f"{part!r} is not a substitution like A23G (wild type, 1-based position, mutant)")
        wild_type, number, mutant = match[1].upper(), int(match[2]), match[3].upper()
        if not 1 <= number <= len(sequence):
            raise ValueError(f"position {number} is outside the sequence (1 to {len(sequence)})")
        if sequence[number - 1] != wild_type:
            raise ValueError(f"position {number} is {sequence[number - 1]} in the sequence, not {wild_type}")
        for letter in (wild_type, mutant):
            if letter not in SCORED_AMINO_ACIDS:
                raise ValueError(f"{letter!r} is not one of the 20 amino acids {SCORED_AMINO_ACIDS}")
        if number - 1 in substitutions:
            raise ValueError(f"position {number} is substituted twice")
        substitutions[number - 1] = Substitution(number - 1, wild_type, mutant)
    return tuple(substitutions[position] for position in sorted(substitutions))


def all_substitutions(sequence: str, positions: range | None = None) -> list[Variant]:
    """Every single substitution of `sequence` by another of the 20 amino acids, position by position: at every
    residue, or at the 0-based `positions`."""
    residues = sequence.upper()
    return [
        (Substitution(position, residues[position], mutant),)
        for position in positions or range(len(residues))
        for mutant in SCORED_AMINO_ACIDS
        if mutant != residues[position]
    ]


def apply(sequence: str, variant: Variant) -> str:
    """The mutant sequence."""
    residues = list(sequence.upper())
    for substitution in variant:
        residues[substitution.position] = substitution.mutant
    return "".join(residues)
