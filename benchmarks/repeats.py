"""Repeats: contenders in alternation, and what a figure's repeats say (median and range), so that no figure rests on
one stretch of a machine whose speed drifts, nor on its one best moment."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

MIN_REPEATS = 5
"""Fewest repeats a compared figure may rest on: with 5, the median is the middle of five alternations, and one slow
or fast stretch of the machine moves it by at most one place."""

T = TypeVar("T")


def alternating(contenders: Sequence[T], repeats: int) -> list[tuple[int, T]]:
    """(repeat, contender) in the order to measure them: A, B, C, A, B, C, ... so that drift weighs on all alike
    (all of A then all of B would hand one of them the machine's quieter minutes)."""
    return [(repeat, contender) for repeat in range(repeats) for contender in contenders]


@dataclass(frozen=True)
class Spread:
    """A figure over its repeats: the median, what a comparison uses, and the range, what it has to clear."""

    median: float
    low: float
    high: float
    count: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> Spread:
        if not samples:
            raise ValueError("no samples")
        return cls(float(statistics.median(samples)), float(min(samples)), float(max(samples)), len(samples))

    def shown(self, digits: int = 2) -> str:
        """`median (low-high)`; the median alone where there is one sample."""
        if self.count == 1:
            return f"{self.median:.{digits}f} (1 run)"
        return f"{self.median:.{digits}f} ({self.low:.{digits}f}-{self.high:.{digits}f})"


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Repeat by repeat, each numerator over the denominator measured next to it (the same repeat); repeats where
    either is missing or the denominator is 0 are left out."""
    return [top / bottom for top, bottom in zip(numerators, denominators, strict=False) if bottom]
