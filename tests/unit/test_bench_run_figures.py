"""make bench's figures from its record: ratios repeat by repeat, the served runtime's share of the reference, the
lone-request latency against transformers, every answer held to the exporter's bound, and the targets."""

from __future__ import annotations

import pytest
from support.bench_records import REFERENCE_GFLOPS, probe, run_record

from benchmarks.run_figures import TARGETS, Figures, targets

USERS = [1, 16, 32]
GOOD = {
    "service": [60, 60, 60, 60, 60],
    "service-grpc": [61, 61, 61, 61, 61],
    "direct-triton": [60, 60, 60, 60, 60],
    "naive": [19, 19, 19, 19, 2],  # one repeat on a busy machine
    "pytriton": [40, 40, 40, 40, 40],
}
PROBES = {
    "service": [probe(50.0)] * 5,
    "direct-triton": [probe(49.0)] * 5,
    "naive": [probe(60.0)] * 5,
    "pytriton": [probe(70.0)] * 5,
    "service-grpc": [probe(51.0)] * 5,
}


def test_a_ratio_is_the_median_of_the_repeats_ratios() -> None:
    ratio = Figures(run_record(GOOD, USERS, PROBES)).ratio("service", "naive", 32)
    assert ratio is not None
    assert ratio.median == pytest.approx(60 / 19)
    assert ratio.high == pytest.approx(30.0)  # the slow naive repeat is in the range, not the figure


def test_the_share_is_of_the_runs_median_reference() -> None:
    share = Figures(run_record(GOOD, USERS)).share("service", 32)
    assert share is not None and share.median == pytest.approx(6.0 / REFERENCE_GFLOPS)  # 60 GFLOP in 10 s


def test_the_lone_request_is_compared_round_by_round() -> None:
    probes = {"service": [probe(50.0), probe(40.0)], "naive": [probe(100.0), probe(40.0)]}
    ratio = Figures(run_record(GOOD, USERS, probes)).lone_ratio("service", "naive")
    assert ratio is not None and (ratio.low, ratio.high) == (0.5, 1.0)


def test_int8_answers_are_held_to_the_gates_cosine_fp32_ones_to_the_parity_tolerance() -> None:
    probes = {"service": [probe(50.0, max_abs_difference=0.02, worst_cosine=0.9995)], "naive": [probe(60.0)]}
    assert Figures(run_record(GOOD, USERS, probes, precision="INT8")).answers_within("service")
    assert not Figures(run_record(GOOD, USERS, probes, precision="FP32")).answers_within("service")
    low = {**probes, "service": [probe(50.0, worst_cosine=0.99)]}
    assert not Figures(run_record(GOOD, USERS, low, precision="INT8")).answers_within("service")


def test_a_good_run_meets_every_target_it_measured() -> None:
    checked = targets(run_record(GOOD, USERS, PROBES))
    assert set(checked) == set(TARGETS)
    assert checked["service / naive, seq/s at the most users"]["met"] is True
    assert checked["lone request p50, service / naive (transformers)"] == {"value": 0.8333, "target": "<= 1",
                                                                          "met": True}  # fmt: skip
    assert checked["contenders with an answer off transformers'"]["value"] == 0
    assert checked["repeats"]["met"] is True
    assert checked["service model FLOP/s at its best users / the matmul reference"] == {"value": 0.6,
                                                                                      "target": ">= 0.5", "met": True}
    assert checked["service-generate / naive-generate, molecules/s at the most users"]["met"] is False  # not run


def test_too_few_repeats_a_slow_front_and_a_wrong_answer_miss() -> None:
    slow = {name: rates[:3] for name, rates in GOOD.items()} | {"direct-triton": [70, 70, 70]}
    wrong = {**PROBES, "pytriton": [probe(70.0, max_abs_difference=1e-2)]}
    checked = targets(run_record(slow, USERS, wrong))
    assert checked["repeats"] == {"value": 3, "target": ">= 5", "met": False}
    assert checked["service / direct-triton, seq/s at 16 users"]["met"] is False
    assert checked["contenders with an answer off transformers'"] == {"value": 1, "target": "<= 0", "met": False}


def test_a_concurrency_outside_the_sweep_is_not_measured_so_missed() -> None:
    checked = targets(run_record(GOOD, [1, 4], PROBES))
    assert checked["service / direct-triton, seq/s at 32 users"] == {"value": None, "target": ">= 0.95", "met": False}
