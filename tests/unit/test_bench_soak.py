"""The soak's verdicts and markdown (benchmarks/soak.py), on made-up rounds: a failed request or a part's settled
memory grown past the margin is a miss; every part, and tritonserver with its stubs together, gets its row."""

from __future__ import annotations

from collections import Counter

from benchmarks.soak import API_SIDE, BEGIN, END, TRITON_TOGETHER, Round, render, summarized


def rounds(stub_mib: list[float]) -> list[Round]:
    return [
        Round(under_load=[{API_SIDE: 600.0, "esm2nv_0_0": mib + 10}], settled={API_SIDE: 500.0, "esm2nv_0_0": mib, "tritonserver": 150.0})
        for mib in stub_mib
    ]  # fmt: skip


def test_a_failed_request_or_a_part_grown_past_the_margin_is_a_miss() -> None:
    counts = Counter({("/embed", "requests"): 10, ("/embed", "failed"): 0, ("Aggregated", "requests"): 10})
    flat = summarized(rounds([100.0, 101.0, 104.0]), counts, margin=5)["targets"]
    assert flat["failed requests"]["met"] and flat["largest settled growth, first round to last (%)"] == {
        "value": 4.0, "target": "<= 5", "met": True,
    }  # fmt: skip
    grown = summarized(rounds([100.0, 103.0, 106.0]), counts, margin=5)["targets"]
    assert grown["largest settled growth, first round to last (%)"]["met"] is False
    counts["/embed", "failed"] = 1
    assert summarized(rounds([100.0, 100.0]), counts, margin=5)["targets"]["failed requests"]["met"] is False


def test_the_markdown_has_every_part_and_the_stubs_together_between_its_markers() -> None:
    counts = Counter({("/embed", "requests"): 10, ("Aggregated", "requests"): 10})
    run = {
        "cpu": "Test CPU", "cores": 2, "date": "today", "commit": "abc", "command": "python -m benchmarks.soak",
        "users": 24, "round_seconds": 60.0, "sample_s": 5.0, "runtimes": "each graph's",
        **summarized(rounds([100.0, 100.0]), counts, margin=5),
    }  # fmt: skip
    lines = render(run).splitlines()
    assert (lines[0], lines[-1]) == (BEGIN, END)
    assert f"| {TRITON_TOGETHER} | 250 | 250 | +0.0 % |" in lines
    assert "| esm2nv_0_0 | 100 | 100 | +0.0 % |" in lines and "| /embed | 10 requests, 0 failed |" in lines
    assert "| failed requests | 0 (wanted 0): met |" in lines
