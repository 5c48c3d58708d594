"""benchmarks.real_sizes' pure parts: every timed call's outputs checked with the exporter's bounds, the ratios
repeat by repeat against the served runtime (not the fastest), the targets, the markdown from the JSON."""

from __future__ import annotations

import numpy as np
import pytest
from support.bench_records import real_sizes_record

from benchmarks.real_sizes import (
    ESM_CPP_FP32,
    ESM_CPP_INT8,
    TRANSFORMERS,
    check_call,
    checked_targets,
    new_check,
    render,
    within,
)

FAST_FP32, SERVED_FP32, INT8 = "this FP32 (openvino)", "this FP32 (onnxruntime)", "this INT8 (onnxruntime)"
SECONDS = {
    TRANSFORMERS: [3.0, 3.0, 3.0, 3.0, 9.0],  # one repeat on a busy machine
    FAST_FP32: [1.0, 1.0, 1.0, 1.0, 1.0],
    SERVED_FP32: [1.5, 1.5, 1.5, 1.5, 1.5],
    INT8: [1.0, 1.0, 1.0, 1.0, 1.0],
    ESM_CPP_INT8: [1.2, 1.2, 1.2, 1.2, 1.2],
}


def embeddings(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 320)).astype(np.float32)


def test_each_call_is_held_to_the_bound_of_what_the_contender_runs() -> None:
    expected = (embeddings(4, 0), np.zeros((4, 10, 33), dtype=np.float32))
    fp32, int8 = new_check("FP32"), new_check("INT8")
    check_call(fp32, "FP32", expected[0] + 5e-5, expected)
    check_call(fp32, "FP32", expected[0] + 2e-4, expected)  # a later call past the parity tolerance
    check_call(int8, "INT8", expected[0] + 0.01 * embeddings(4, 1), expected)
    assert (fp32.worst, fp32.calls) == (pytest.approx(2e-4, rel=1e-3), 2)
    assert within("FP32", fp32) is False
    assert int8.figure == "worst cosine" and within("INT8", int8) is True  # cosine about 0.99995 >= 0.999
    logits = [np.zeros((8, 33), dtype=np.float32) for _ in range(4)]
    esm_fp32, esm_int8 = new_check(ESM_CPP_FP32), new_check(ESM_CPP_INT8)
    check_call(esm_fp32, ESM_CPP_FP32, logits, expected)
    check_call(esm_int8, ESM_CPP_INT8, logits, expected)
    assert within(ESM_CPP_FP32, esm_fp32) is True and within(ESM_CPP_INT8, esm_int8) is None


def test_the_headline_ratio_is_the_served_runtimes_median_of_paired_repeats() -> None:
    run = real_sizes_record(SECONDS, {"FP32": SERVED_FP32, "INT8": INT8}, ["avx2", "avx512f", "fma"])
    ratios = run["workloads"]["8 x 256"]["figures"]["ratios"]
    assert ratios["served FP32 / transformers"]["median"] == pytest.approx(2.0)  # not 3.0: the faster one is not served
    assert ratios["served FP32 / transformers"]["high"] == pytest.approx(6.0)
    assert ratios["served INT8 / esm-cpp INT8"]["median"] == pytest.approx(1.2)
    share = run["workloads"]["8 x 256"]["figures"]["share"]["served FP32 of the matmul reference"]
    assert share == pytest.approx(100 / 1.5 / 100)  # 100 GFLOP in 1.5 s against a 100 GFLOP/s reference


def test_targets_are_checked_per_workload_and_esm_cpp_needs_avx512() -> None:
    run = real_sizes_record(SECONDS, {"FP32": SERVED_FP32, "INT8": INT8}, ["avx2", "avx512f", "fma"])
    checked = checked_targets(run)
    assert checked["served FP32 / transformers, 8 x 256"]["met"] is True
    assert checked["served FP32 share of the matmul reference, 8 x 256"]["met"] is False  # 0.67 < 0.85
    assert checked["served INT8 / esm-cpp INT8, 8 x 256"]["met"] is True
    assert checked["repeats, 8 x 256"]["met"] is True
    avx2 = checked_targets(real_sizes_record(SECONDS, {"FP32": SERVED_FP32, "INT8": INT8}, ["avx2", "fma"]))
    assert avx2["served INT8 / esm-cpp INT8, 8 x 256"]["met"] is None
    no_int8 = checked_targets(real_sizes_record(SECONDS, {"FP32": SERVED_FP32}, ["avx512f"]))
    assert no_int8["served INT8 / esm-cpp INT8, 8 x 256"]["why"] == "no INT8 repository (--int8)"


def test_an_output_off_the_bound_in_a_served_contender_misses() -> None:
    run = real_sizes_record(SECONDS, {"FP32": SERVED_FP32}, ["avx512f"])
    run["workloads"]["8 x 256"]["checks"][SERVED_FP32]["within"] = False
    run["workloads"]["8 x 256"]["checks"][FAST_FP32]["within"] = False  # not served: reported, no target
    assert checked_targets(run)["served contenders with an output off transformers', 8 x 256"]["value"] == 1


def test_the_markdown_comes_from_the_json() -> None:
    run = real_sizes_record(SECONDS, {"FP32": SERVED_FP32, "INT8": INT8}, ["avx512f"])
    run["targets"] = checked_targets(run)
    text = render(run)
    assert f"| {TRANSFORMERS} |  | max abs difference 1.00e-06 (5 calls) | yes | 3.00 (3.00-9.00) | 33 |" in text
    assert "served FP32 / transformers 2.00 (2.00-6.00)x" in text
    assert "| served FP32 share of the matmul reference, 8 x 256 | 0.6667 | >= 0.85 | **missed** |" in text
