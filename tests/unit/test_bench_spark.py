"""The Spark benchmark's check of an answer and its markdown (benchmarks/spark_throughput.py), without Spark."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from benchmarks.spark_throughput import answer_is_complete, render


def write_answer(path: Path, ids: list[str], width: int = 4) -> Path:
    pd.DataFrame({"id": ids, "embedding": [[0.5] * width for _ in ids]}).to_parquet(path)
    return path


def test_an_answer_is_complete_only_with_every_protein_once_in_id_order(tmp_path: Path) -> None:
    ids = [f"p{row:06d}" for row in range(3)]
    assert answer_is_complete(write_answer(tmp_path / "whole.parquet", ids), 3)
    assert not answer_is_complete(write_answer(tmp_path / "short.parquet", ids[:2]), 3)
    assert not answer_is_complete(write_answer(tmp_path / "shuffled.parquet", [ids[1], ids[0], ids[2]]), 3)
    assert not answer_is_complete(write_answer(tmp_path / "twice.parquet", [ids[0], ids[0], ids[2]]), 3)
    assert not answer_is_complete(write_answer(tmp_path / "empty.parquet", ids, width=0), 3)


def test_the_markdown_shows_each_place_and_whether_its_answer_was_whole() -> None:
    run = {
        "sequences": 2000, "residues": 642223, "partitions": 2, "records_per_batch": 250, "cpu": "Test CPU", "cores": 2,
        "date": "today", "commit": "abc", "command": "python -m benchmarks.spark_throughput --cluster 2",
        "runs": [
            {"where": "local[2]", "seconds": 163.0, "sequences_per_s": 12.27, "shipping": None, "complete_in_order": True},
            {"where": "a standalone cluster of 2 one-core workers", "seconds": 190.7, "sequences_per_s": 10.49,
             "shipping": {"export_s": 20.8, "archive_mb": 12.0, "bento_mb": 33.0}, "complete_in_order": False},
        ],
    }  # fmt: skip
    lines = render(run).splitlines()
    assert lines[0] == "<!-- spark: begin -->" and lines[-1] == "<!-- spark: end -->"
    assert "| local[2] | 163.0 s | 12.27 | none (local mode reads the driver's store) | yes |" in lines
    assert "| a standalone cluster of 2 one-core workers | 190.7 s | 10.49 | 20.8 s (33.0 MB bento, 12.0 MB as xz) | **no** |" in lines
