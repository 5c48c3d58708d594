"""Contenders in alternation and what their repeats say: no figure rests on one stretch of the machine."""

from __future__ import annotations

import pytest

from benchmarks.repeats import Spread, alternating, paired_ratios


def test_contenders_alternate_a_b_c_a_b_c() -> None:
    order = alternating(["A", "B", "C"], 2)
    assert order == [(0, "A"), (0, "B"), (0, "C"), (1, "A"), (1, "B"), (1, "C")]


def test_a_spread_is_the_median_and_range_of_its_samples() -> None:
    spread = Spread.of([3.0, 1.0, 2.0, 10.0, 2.5])
    assert (spread.median, spread.low, spread.high, spread.count) == (2.5, 1.0, 10.0, 5)
    assert spread.shown(1) == "2.5 (1.0-10.0)"
    assert Spread.of([4.0]).shown(1) == "4.0 (1 run)"
    with pytest.raises(ValueError):
        Spread.of([])


def test_ratios_pair_each_repeat_with_its_neighbour_not_the_best_with_the_worst() -> None:
    service, baseline = [10.0, 10.0, 10.0, 10.0, 10.0], [5.0, 5.0, 5.0, 5.0, 1.0]  # one slow baseline repeat
    ratios = paired_ratios(service, baseline)
    assert ratios == [2.0, 2.0, 2.0, 2.0, 10.0]
    assert Spread.of(ratios).median == 2.0  # the slow repeat shows in the range, not in the figure
    assert paired_ratios([1.0, 2.0], [0.0, 4.0]) == [0.5]
