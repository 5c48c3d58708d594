"""The physical limit: ESM-2's useful FLOPs per request, and this CPU's float32 and int8 matrix-multiply throughput."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from benchmarks.torch_esm import CHECKPOINT
from exporter.quantize import Recipe, quantize_onnx

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


def _best_rate(product: Callable[[], object], size: int, repeats: int) -> float:
    """Best G(FL)OP/s of `product`, a size×size matrix product (2·n³ operations), after two warm-up runs."""
    for _ in range(2):
        product()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        product()
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best / 1e9


def matmul_gflops(size: int = 2048, repeats: int = 10) -> float:
    """Best float32 GFLOP/s of a size×size torch.matmul with torch's default threads."""
    left, right = torch.randn(size, size), torch.randn(size, size)
    return _best_rate(lambda: torch.matmul(left, right), size, repeats)


def int8_matmul_gops(recipe: Recipe, size: int = 2048, repeats: int = 10) -> float:
    """Best int8 GOP/s of a size×size product on onnxruntime, quantized by `recipe` as the INT8 graphs are (weights
    per channel at export, the activation per tensor at run time, its quantization included): the int8 counterpart
    of matmul_gflops, on every core."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((size, size)).astype(np.float32), "weight")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["left", "weight"], ["product"], name="matmul")], "matmul",
        [helper.make_tensor_value_info("left", TensorProto.FLOAT, [size, size])],
        [helper.make_tensor_value_info("product", TensorProto.FLOAT, [size, size])], [weight],
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        fp32, int8 = Path(folder) / "matmul.onnx", Path(folder) / "matmul.int8.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(fp32))
        quantize_onnx(fp32, int8, recipe)
        session = onnxruntime.InferenceSession(str(int8), providers=["CPUExecutionProvider"])
    feeds = {"left": rng.standard_normal((size, size)).astype(np.float32)}
    return _best_rate(lambda: session.run(None, feeds), size, repeats)
