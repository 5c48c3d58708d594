"""The incremental decoder step's per-layer cache inputs by name, in its order: numpy only, so that the runtime timings
at start-up (bionemo_serving.runtimes.choice) lay them out as the exporter traced them, where torch is not installed."""

from __future__ import annotations

import numpy as np


def layer_caches(self_kv: np.ndarray, cross_kv: np.ndarray) -> dict[str, np.ndarray]:
    """The decoder step's per-layer cache inputs, in its order, from [batch, layers, 2, heads, positions, head_dim]."""
    layers = range(self_kv.shape[1])
    return {
        **{f"self_keys_{layer}": np.ascontiguousarray(self_kv[:, layer, 0]) for layer in layers},
        **{f"self_values_{layer}": np.ascontiguousarray(self_kv[:, layer, 1]) for layer in layers},
        **{f"cross_keys_{layer}": np.ascontiguousarray(cross_kv[:, layer, 0]) for layer in layers},
        **{f"cross_values_{layer}": np.ascontiguousarray(cross_kv[:, layer, 1]) for layer in layers},
    }
