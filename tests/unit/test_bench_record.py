"""The fields every benchmark record opens with, the target checks every benchmark exits by, and its section of a
page."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks import record

CPUINFO = """processor\t: 0
model name\t: Intel(R) Xeon(R) Processor
cpu MHz\t\t: 2100.000
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_vnni amx_tile bmi2
"""


def test_the_header_says_what_ran_where_and_at_which_code() -> None:
    header = record.header("real-sizes", ["--size", "8M"], "abc1234+changes")
    assert header["benchmark"] == "real-sizes"
    assert header["command"] == "python -m benchmarks.real_sizes --size 8M"
    assert header["commit"] == "abc1234+changes"
    assert header["cpu"] and isinstance(header["cores"], int) and isinstance(header["flags"], list)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d .*", header["date"])
    assert re.fullmatch(r"\d+\.\d+\.\d+", header["python"])


def test_the_commit_is_the_head_marked_when_tracked_files_differ() -> None:
    assert re.fullmatch(r"[0-9a-f]{7,}(\+changes)?", record.commit())


def test_vector_flags_are_the_vector_and_matrix_extensions_only() -> None:
    assert record.vector_flags(CPUINFO) == ["amx_tile", "avx", "avx2", "avx512_vnni", "avx512f", "fma"]
    assert record.vector_flags("processor\t: 0\n") == []


def test_a_cpu_names_its_files_without_trademarks() -> None:
    assert record.cpu_slug("Intel(R) Xeon(R) Processor") == "intel-xeon"
    assert record.cpu_slug("AMD EPYC 7B13 64-Core Processor") == "amd-epyc-7b13-64-core"


def test_a_target_is_met_missed_not_measured_or_not_applicable() -> None:
    targets = {
        "ratio": record.Target(">=", 1.5),
        "errors": record.Target("<=", 0),
        "unmeasured": record.Target(">=", 1.0),
        "esm-cpp": record.Target(">=", 1.0),
    }
    checked = record.checked(targets, {"ratio": 1.49999, "errors": 0, "unmeasured": None}, {"esm-cpp": "no AVX-512"})
    assert checked["ratio"] == {"value": 1.5, "target": ">= 1.5", "met": False}  # rounded to show, checked unrounded
    assert checked["errors"]["met"] is True
    assert checked["unmeasured"] == {"value": None, "target": ">= 1", "met": False}
    assert checked["esm-cpp"] == {"value": None, "target": ">= 1", "met": None, "why": "no AVX-512"}
    assert record.missed(checked) == ["ratio", "unmeasured"]
    assert record.met_cell(checked["esm-cpp"]) == "not applicable: no AVX-512"


def test_a_nan_figure_misses() -> None:
    assert record.checked({"p50": record.Target("<=", 1.0)}, {"p50": float("nan")})["p50"]["met"] is False


def test_the_exit_status_is_1_on_a_miss_and_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert record.exit_status({"a": {"met": True}, "b": {"met": None}}) == 0
    assert record.exit_status({"a": {"met": True}, "b": {"met": False}}) == 1
    assert "missed: b" in capsys.readouterr().out


def test_a_record_is_written_as_json(tmp_path: Path) -> None:
    destination = record.write({"benchmark": "run", "samples": [1.5, 2.5]}, tmp_path / "results" / "bench.json")
    assert json.loads(destination.read_text()) == {"benchmark": "run", "samples": [1.5, 2.5]}


def test_a_page_without_the_markers_gets_the_section_at_its_end(tmp_path: Path) -> None:
    doc = tmp_path / "page.md"
    record.write_section(doc, "<!-- x: begin -->\nfirst\n<!-- x: end -->")
    assert doc.read_text() == "<!-- x: begin -->\nfirst\n<!-- x: end -->\n"
    doc.write_text("# Page\n")
    record.write_section(doc, "<!-- x: begin -->\nnew\n<!-- x: end -->")
    record.write_section(doc, "<!-- x: begin -->\nnewer\n<!-- x: end -->")
    assert doc.read_text() == "# Page\n\n<!-- x: begin -->\nnewer\n<!-- x: end -->\n"
