"""The client-on-files benchmark's targets and markdown (benchmarks/client_files.py), without a service."""

from __future__ import annotations

from benchmarks import record
from benchmarks.client_files import TARGETS, render


def test_a_cli_slower_than_the_service_or_growing_with_the_file_misses() -> None:
    targets = record.checked(TARGETS, {
        "CLI throughput / the service's saturation": 0.85,
        "peak RSS on the large file (MB)": 151.0,
        "peak RSS change, large file against small (either way)": 0.004,
    })  # fmt: skip
    assert [name for name, target in targets.items() if not target["met"]] == ["CLI throughput / the service's saturation"]
    grown = record.checked(TARGETS, {**{name: target["value"] for name, target in targets.items()},
                                     "peak RSS change, large file against small (either way)": 0.2})  # fmt: skip
    assert grown["peak RSS change, large file against small (either way)"]["met"] is False


def test_the_markdown_holds_every_figure_between_its_markers() -> None:
    run = {
        "lengths": [50, 150], "cpu": "Test CPU", "cores": 2, "date": "today", "commit": "abc", "command": "python -m ...",
        "sequences": 10000, "million": 1000000, "saturation_sequences_per_s": 77.8, "cli_seconds": 129.1,
        "cli_sequences_per_s": 77.4, "small_peak_rss_mb": 151.4, "large_file_mb": 110, "large_seconds": 600,
        "large_peak_rss_mb": 150.8,
        "targets": record.checked(TARGETS, {
            "CLI throughput / the service's saturation": 77.4 / 77.8, "peak RSS on the large file (MB)": 150.8,
            "peak RSS change, large file against small (either way)": 0.004,
        }),
    }  # fmt: skip
    lines = render(run).splitlines()
    assert lines[0] == "<!-- client files: begin -->" and lines[-1] == "<!-- client files: end -->"
    assert "| the CLI on the same FASTA, start-up to the finished Parquet file | 129.1 s, 77.4 sequences/s |" in lines
    assert "| CLI throughput / the service's saturation | 0.9949 | >= 0.9 | met |" in lines
