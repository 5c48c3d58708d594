"""The growth benchmark's verdicts and markdown (benchmarks/growth.py), without a service."""

from __future__ import annotations

from benchmarks.growth import checked, render


def row(size: str, residues: int, not_answered: dict[str, int], scan: dict[str, object]) -> dict:
    return {"size": size, "residues": residues, "tokens_per_s": 1234.5, "not_answered": not_answered, "scan": scan}


ROWS = [
    row("8M", 100, {}, {"status": 200, "seconds": 1.4}),
    row("8M", 1000, {"503": 3}, {"status": 422, "seconds": 0.21, "estimate_s": 354, "message": "would take about 354 s"}),
    row("150M", 1000, {"504": 10}, {"status": 422, "seconds": 4.0, "estimate_s": 5272, "message": "would take about 5,272 s"}),
]


def test_a_504_or_a_slow_refusal_is_a_miss_a_prompt_refusal_is_not() -> None:
    missed = [name for name, target in checked(ROWS).items() if not target["met"]]
    assert missed == ["150M, 1,000 residues: /embed 504s", "150M, 1,000 residues: scan answered, or refused within 1 s"]


def test_each_row_says_whether_its_targets_were_met() -> None:
    run = {
        "users": 16, "seconds": 20, "cpu": "Test CPU", "cores": 2, "date": "today", "commit": "abc",
        "command": "python -m benchmarks.growth 8M=model_repository", "rows": ROWS, "targets": checked(ROWS),
    }  # fmt: skip
    lines = render(run).splitlines()
    assert lines[0] == "<!-- growth: begin -->" and lines[-1] == "<!-- growth: end -->"
    assert "| 8M | 1,000 | 1,234 | 3 x 503 | refused in 0.21 s: about 354 s estimated | met |" in lines
    assert "| 150M | 1,000 | 1,234 | 10 x 504 | refused in 4.00 s: about 5,272 s estimated | **missed** |" in lines
