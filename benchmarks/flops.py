"""The physical limit: ESM-2's useful FLOPs per request; this CPU's float32 and int8 rates on the model's own matrix
products, measured around every contender; and its FMA ceiling, what no product can pass."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil
import torch

from benchmarks.repeats import Spread
from benchmarks.torch_esm import CHECKPOINT
from bionemo_serving.exporter.quantize import Recipe, quantize_onnx

FORMULA = (
    "FLOPs = layers × (2 × P × tokens + 4 × d × Σ L²), with P = 4·d² + 2·d·d_ff the weights in a layer's "
    "matrix multiplies (Q, K, V and output projections, the two feed-forward matrices), one multiply-add (2 FLOPs) "
    "per weight per token, and 4·L·d per token per layer for QKᵀ and attention·V, L the sequence's own length in "
    "tokens (residues + <cls> + <eos>); padding, embeddings, LayerNorm, softmax and pooling are not counted"
)


@dataclass(frozen=True)
class EncoderShape:
    layers: int
    hidden: int
    intermediate: int

    @classmethod
    def from_checkpoint(cls, checkpoint: Path = CHECKPOINT) -> EncoderShape:
        config = json.loads((checkpoint / "config.json").read_text())
        return cls(config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"])

    @property
    def matmul_weights_per_layer(self) -> int:
        return 4 * self.hidden * self.hidden + 2 * self.hidden * self.intermediate

    def flops(self, tokens: int, token_pairs: int) -> float:
        """Useful FLOPs for sequences of `tokens` tokens in all, whose squared lengths sum to `token_pairs`."""
        return self.layers * (2 * self.matmul_weights_per_layer * tokens + 4 * self.hidden * token_pairs)


def _best_rate(product: Callable[[], object], operations: float, repeats: int) -> float:
    """Best G(FL)OP/s of `product`, `operations` operations a run, over `repeats` runs after one warm-up run (the
    caches after a contender's run are not the product's)."""
    product()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        product()
        best = min(best, time.perf_counter() - started)
    return operations / best / 1e9


def layer_gemms(shape: EncoderShape) -> list[tuple[int, int, int]]:
    """One layer's matrix products as (count, K, N), each [tokens, K] x [K, N]: the Q, K, V and output projections
    (hidden x hidden, four), the feed-forward's up (hidden x intermediate) and down (intermediate x hidden)."""
    return [
        (4, shape.hidden, shape.hidden),
        (1, shape.hidden, shape.intermediate),
        (1, shape.intermediate, shape.hidden),
    ]


class GemmReference:
    """This CPU's float32 rate on the model's own matrix products: one layer's GEMMs (`layer_gemms`) at `tokens` rows
    (a batch's tokens), torch.matmul with torch's default threads. What the model's FLOP/s are held to: a 2048 x 2048
    product runs faster than a layer's narrower ones, and a share of it would understate the model."""

    def __init__(self, shape: EncoderShape, tokens: int, repeats: int = 3) -> None:
        self.tokens = tokens
        self.repeats = repeats
        self.operations = 2 * tokens * shape.matmul_weights_per_layer
        self.products = [(count, torch.randn(tokens, k), torch.randn(k, n)) for count, k, n in layer_gemms(shape)]

    def _layer(self) -> None:
        for count, left, right in self.products:
            for _ in range(count):
                torch.matmul(left, right)

    def gflops(self) -> float:
        """One sample: the best of `repeats` runs of the layer's products."""
        return _best_rate(self._layer, self.operations, self.repeats)


class Int8GemmReference:
    """The int8 counterpart of GemmReference: the same products on onnxruntime, quantized by `recipe` as the INT8
    graphs are (weights per channel at export, the activation per tensor at run time, its quantization included), on
    every core."""

    def __init__(self, shape: EncoderShape, tokens: int, recipe: Recipe, repeats: int = 3) -> None:
        import onnxruntime

        self.repeats = repeats
        self.operations = 2 * tokens * shape.matmul_weights_per_layer
        rng = np.random.default_rng(0)
        self.sessions = []
        with tempfile.TemporaryDirectory() as folder:
            for index, (count, k, n) in enumerate(layer_gemms(shape)):
                path = _int8_matmul(Path(folder) / f"matmul{index}", rng.standard_normal((k, n)), recipe)
                session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
                feeds = {"left": rng.standard_normal((tokens, k)).astype(np.float32)}
                self.sessions.append((count, session, feeds))

    def _layer(self) -> None:
        for count, session, feeds in self.sessions:
            for _ in range(count):
                session.run(None, feeds)

    def gops(self) -> float:
        """One sample: the best of `repeats` runs of the layer's products, in int8 GOP/s."""
        return _best_rate(self._layer, self.operations, self.repeats)


def _int8_matmul(stem: Path, weight: np.ndarray, recipe: Recipe) -> Path:
    """An ONNX file of `left` [rows, K] x `weight` [K, N], quantized by `recipe`."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    k, n = weight.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["left", "weight"], ["product"], name="matmul")], "matmul",
        [helper.make_tensor_value_info("left", TensorProto.FLOAT, ["rows", k])],
        [helper.make_tensor_value_info("product", TensorProto.FLOAT, ["rows", n])],
        [numpy_helper.from_array(weight.astype(np.float32), "weight")],
    )  # fmt: skip
    fp32, int8 = stem.with_suffix(".onnx"), stem.with_suffix(".int8.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(fp32))
    quantize_onnx(fp32, int8, recipe)
    return int8


FLOP_PER_CYCLE = (("avx512f", 64), ("fma", 32))
"""FP32 FLOP one core can start per cycle, by the widest vector flag it has: FMA lanes x 2 (a multiply and an add) x
FMA units. Assumed: two FMA units a core, as on Xeon Scalable Gold and Platinum (Skylake-SP onwards), Haswell and
later, and AMD Zen 2 onwards: AVX-512, 16 lanes x 2 = 32 a unit, 64 a core; AVX2 with FMA, 8 x 2 = 16 a unit, 32 a
core. Parts with one AVX-512 unit (some Xeon Silver and Bronze) reach half; AMD Zen 4 runs AVX-512 on 256-bit units
(32). Neither flag: SSE_FLOP_PER_CYCLE."""
SSE_FLOP_PER_CYCLE = 8
"""4 lanes, a multiply and an add a cycle on separate ports."""


def flop_per_cycle(flags: list[str]) -> tuple[int, str]:
    """FP32 FLOP a core per cycle from the CPU's vector flags, and the flag it rests on."""
    return next(((flop, flag) for flag, flop in FLOP_PER_CYCLE if flag in flags), (SSE_FLOP_PER_CYCLE, "sse"))


def cpu_mhz(cpuinfo: str | None = None) -> float | None:
    """The mean of /proc/cpuinfo's `cpu MHz` lines: the clock now (read right after a reference sample, while the
    cores were busy); None where there are none."""
    text = Path("/proc/cpuinfo").read_text() if cpuinfo is None else cpuinfo
    values = [float(line.partition(":")[2]) for line in text.splitlines() if line.startswith("cpu MHz")]
    return sum(values) / len(values) if values else None


def fma_cores() -> int:
    """The cores this process may run on, counted once per physical core: two hyperthreads share one core's FMA
    units."""
    physical = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    return min(physical, len(os.sched_getaffinity(0)))


def fma_ceiling(cores: int, flags: list[str], mhz: float) -> dict[str, float | int | str]:
    """The FMA ceiling: cores x FLOP a cycle x the clock, in GFLOP/s, with what it is computed from."""
    flop, flag = flop_per_cycle(flags)
    return {
        "cores": cores,
        "flop_per_cycle": flop,
        "flag": flag,
        "mhz": round(mhz, 1),
        "gflops": cores * flop * mhz / 1e3,
    }


@dataclass
class ReferenceSamples:
    """The matmul reference, sampled before the first contender and after each one (`take`), with the clock at each
    sample: figures are held to the median of the run's own samples, never to one sample, nor to another run's."""

    fp32: GemmReference
    int8: Int8GemmReference | None = None
    samples: list[dict[str, float | str | None]] = field(default_factory=list)

    def take(self, moment: str) -> None:
        sample: dict[str, float | str | None] = {"moment": moment, "gflops": self.fp32.gflops()}
        if self.int8 is not None:
            sample["int8_gops"] = self.int8.gops()
        sample["mhz"] = cpu_mhz()
        self.samples.append(sample)

    def median(self, key: str = "gflops") -> float:
        return Spread.of([float(sample[key]) for sample in self.samples]).median

    def summary(self, shape: EncoderShape, flags: list[str]) -> dict[str, object]:
        """The record's part: the products and their rows, every sample, the medians and the FMA ceiling at the
        median clock of the samples."""
        clocks = [float(sample["mhz"]) for sample in self.samples if sample["mhz"] is not None]
        return {
            "tokens": self.fp32.tokens,
            "gemms": [{"count": count, "m": self.fp32.tokens, "k": k, "n": n} for count, k, n in layer_gemms(shape)],
            "samples": self.samples,
            "gflops_median": self.median(),
            "int8_gops_median": self.median("int8_gops") if self.int8 is not None else None,
            "fma_ceiling": fma_ceiling(fma_cores(), flags, Spread.of(clocks).median) if clocks else None,
        }
