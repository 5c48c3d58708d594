"""The FMA ceiling's arithmetic and the matmul reference's shapes: the model's own GEMMs, their FLOPs the model's."""

from __future__ import annotations

import pytest

from benchmarks.flops import EncoderShape, GemmReference, ReferenceSamples, cpu_mhz, fma_ceiling, layer_gemms

ESM2_8M = EncoderShape(layers=6, hidden=320, intermediate=1280)


def test_the_fma_ceiling_is_cores_times_flop_a_cycle_times_the_clock() -> None:
    avx512 = fma_ceiling(2, ["avx", "avx2", "avx512f", "fma"], 2100.0)
    assert avx512 == {"cores": 2, "flop_per_cycle": 64, "flag": "avx512f", "mhz": 2100.0,
                      "gflops": pytest.approx(268.8)}  # fmt: skip
    avx2 = fma_ceiling(4, ["avx", "avx2", "fma"], 3000.0)
    assert (avx2["flop_per_cycle"], avx2["flag"], avx2["gflops"]) == (32, "fma", pytest.approx(384.0))
    assert fma_ceiling(1, [], 1000.0)["gflops"] == pytest.approx(8.0)


def test_the_clock_is_the_mean_of_the_cpus_mhz_lines() -> None:
    assert cpu_mhz("cpu MHz\t\t: 2000.000\ncpu MHz\t\t: 2200.000\n") == pytest.approx(2100.0)
    assert cpu_mhz("model name\t: a CPU\n") is None


def test_a_layers_gemms_are_its_projections_and_feed_forward_at_the_models_shape() -> None:
    assert layer_gemms(ESM2_8M) == [(4, 320, 320), (1, 320, 1280), (1, 1280, 320)]
    assert sum(count * k * n for count, k, n in layer_gemms(ESM2_8M)) == ESM2_8M.matmul_weights_per_layer


def test_the_reference_is_sampled_and_summarised_against_its_median() -> None:
    reference = ReferenceSamples(GemmReference(EncoderShape(1, 32, 64), tokens=16, repeats=1))
    assert reference.fp32.operations == 2 * 16 * (4 * 32 * 32 + 2 * 32 * 64)
    for moment in ("start", "after A", "after B"):
        reference.take(moment)
    summary = reference.summary(EncoderShape(1, 32, 64), ["avx2", "fma"])
    assert [sample["moment"] for sample in summary["samples"]] == ["start", "after A", "after B"]
    assert summary["gflops_median"] == sorted(sample["gflops"] for sample in summary["samples"])[1]
    assert summary["gemms"][0] == {"count": 4, "m": 16, "k": 32, "n": 32}
    assert summary["int8_gops_median"] is None
