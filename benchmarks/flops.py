"""The physical limit: ESM-2's useful FLOPs per request, and this CPU's float32 matrix-multiply throughput."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.torch_esm import CHECKPOINT

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


def matmul_gflops(size: int = 2048, repeats: int = 10) -> float:
    """Best float32 GFLOP/s of a size×size torch.matmul with torch's default threads (2·n³ FLOPs a product)."""
    left, right = torch.randn(size, size), torch.randn(size, size)
    for _ in range(2):
        torch.matmul(left, right)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        torch.matmul(left, right)
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best / 1e9
