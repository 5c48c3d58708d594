"""benchmarks.served_memory's figures: the whole service's memory, API side included, at its highest during or after
the load, against the weights; its markdown from the JSON."""

from __future__ import annotations

import pytest

from benchmarks.record import checked
from benchmarks.served_memory import API_SIDE, TARGETS, figures, render, total_mib

MIB = 1024  # KiB


def sample(t: float, triton_mib: int, api_mib: int) -> dict:
    return {"t": t, "groups": {"tritonserver": [[40 * MIB, 30 * MIB]], "stub esm2nv": [[900 * MIB, triton_mib * MIB]],
                               API_SIDE: [[400 * MIB, api_mib * MIB], [100 * MIB, 0]]}}  # fmt: skip


def run(during: list[dict], after: dict) -> dict:
    return {
        "cpu": "a CPU", "cores": 2, "date": "today", "commit": "abc1234", "command": "python -m x",
        "repository": "model_repository-150M", "weights_mib": 563.0, "users": 16, "ready_s": 9.5,
        "pss": {"idle": sample(20, 500, 290), "during": during, "after": after},
        "load": {"seconds": 30, "tokens_per_s": 400.0, "refused": {"504": 2}, "drained_s": 3.0},
        "scan": {"status": 422, "seconds": 0.02, "message": "too long: e.g. [1, 59]",
                 "range": {"positions": [1, 59], "status": 200, "seconds": 42.0, "error": None}},
    }  # fmt: skip


def test_the_api_side_counts_and_the_peak_under_load_is_what_is_held() -> None:
    assert total_mib(sample(0, 500, 290)) == 820
    assert total_mib(sample(0, 500, 290), api_side=False) == 530
    measured = run([sample(30, 600, 300), sample(32, 700, 310)], sample(60, 650, 300))
    assert figures(measured)["whole service PSS at its peak, during and after the load / the FP32 weights"] == (
        pytest.approx((30 + 700 + 310) / 563)
    )
    targets = checked(TARGETS, figures(measured))
    assert targets["start-up to ready (s)"]["met"] is True
    assert targets["whole service PSS at its peak, during and after the load / the FP32 weights"]["met"] is False


def test_memory_growing_after_the_load_counts_too() -> None:
    measured = run([sample(30, 500, 290)], sample(60, 900, 290))
    assert figures(measured)["whole service PSS at its peak, during and after the load / the FP32 weights"] == (
        pytest.approx((30 + 900 + 290) / 563)
    )


def test_the_markdown_comes_from_the_json() -> None:
    measured = run([sample(30, 600, 300)], sample(60, 650, 300))
    measured["targets"] = checked(TARGETS, figures(measured))
    text = render(measured)
    assert "| peak during the load (t 30 s) | 930 | 630 | 1.65 |" in text
    assert "| API side (bentoml, workers) | 2 | 500 | 300 |" in text
    assert "its first suggested range, [1, 59]: answered in 42.0 s" in text
    assert "| start-up to ready (s) | 9.5 | <= 120 | met |" in text
