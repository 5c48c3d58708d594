"""docs/benchmarks-<cpu>.md rendered from a run's JSON alone: the served runtime first, every figure the record's."""

from __future__ import annotations

import json
from pathlib import Path

from support.bench_records import run_record

from benchmarks import report
from benchmarks.run_figures import targets

RATES = {"service": [60, 62, 58, 61, 59], "direct-triton": [61, 61, 61, 61, 61], "naive": [20, 20, 20, 20, 20]}


def test_the_report_is_rendered_from_the_json_with_the_served_runtime_as_headline(tmp_path: Path) -> None:
    run = run_record(RATES, [1, 32], {"service": [{"latencies_ms": [50.0], "max_abs_difference": 1e-6,
                                                   "worst_cosine": 1.0}] * 5})  # fmt: skip
    run["targets"] = targets(run)
    source, out = tmp_path / "bench.json", tmp_path / "benchmarks-intel-xeon.md"
    source.write_text(json.dumps(run))
    assert report.main(["--render", str(source), "--out", str(out)]) == 0
    text = out.read_text()
    headline = text.index("## The served runtime")
    assert "**onnxruntime** (FP32; chosen by measurement on a CPU" in text[headline:]
    assert headline < text.index("## Targets") < text.index("## /embed")
    assert "| 32 | 6.0 (5.8-6.2) |" in text  # the service's seq/s: median and range of its 5 repeats
    assert "| service / naive, seq/s at the most users | 3 | >= 3 | met |" in text
    assert "| repeats | 5 | >= 5 | met |" in text
    assert "median 10 GFLOP/s" in text and "= **269 GFLOP/s**" in text  # the reference and the FMA ceiling
    assert out.with_suffix(".png").stat().st_size > 0


def test_a_new_report_keeps_the_pages_other_measurements(tmp_path: Path) -> None:
    """The overload step's and the other benchmarks' tables on the same CPU's page survive a new `make bench`."""
    run = run_record(RATES, [1, 32], {"service": [{"latencies_ms": [50.0], "max_abs_difference": 1e-6,
                                                   "worst_cosine": 1.0}] * 5})  # fmt: skip
    run["targets"] = targets(run)
    source, out = tmp_path / "bench.json", tmp_path / "benchmarks-intel-xeon.md"
    source.write_text(json.dumps(run))
    kept = f"{report.KEPT_SECTION}\n\n<!-- overload: begin -->\n| step |\n<!-- overload: end -->\n"
    out.write_text("# an older report\n\n" + kept)
    assert report.main(["--render", str(source), "--out", str(out)]) == 0
    text = out.read_text()
    assert "an older report" not in text and text.endswith(kept) and "## The served runtime" in text
