"""Which CPU runtimes each kind of graph is written for: what the runtime tests parametrize over."""

from __future__ import annotations

from bionemo_serving.runtimes.engines import Runtime

DECODER_RUNTIMES = [runtime for runtime in Runtime if runtime is not Runtime.ONNXRUNTIME_FUSED]
"""The incremental decoder's step computes its attention itself, not through sdpa: there is nothing for onnxruntime to
fuse, so it has no fused file."""
