"""Contender 5: BentoML's own adaptive batching, without Triton, around the same torch model.

    bentoml serve benchmarks.contenders.bentoml_batching:Esm2Embedder --host 127.0.0.1 --port 3000

A new-style `@bentoml.service` (no Triton runner is involved, so bentoml 1.4's
new API applies) with one `@bentoml.api(batchable=True)`: BentoML's
CorkDispatcher merges the `sequences` lists of concurrent requests into one
call, up to esm2nv's `max_batch_size` from `model_catalog.py`. A batchable API
takes exactly one argument, so the body is `{"sequences": [...]}` (the `model`
field of the service's requests is ignored here) and the answer is the bare
list of embeddings.
"""

from __future__ import annotations

import bentoml
import numpy as np

from benchmarks.torch_esm import TorchEmbedder
from benchmarks.workload import MODEL
from bionemo_serving.model_catalog import MODELS


@bentoml.service(name="esm2_bentoml_batching")
class Esm2Embedder:
    def __init__(self) -> None:
        self.embedder = TorchEmbedder()

    @bentoml.api(batchable=True, max_batch_size=MODELS[MODEL].batching.max_batch_size)
    def embed(self, sequences: list[str]) -> np.ndarray:
        """[batch, hidden] embeddings of the merged batch; BentoML splits them back per request."""
        return self.embedder.embed(sequences)
