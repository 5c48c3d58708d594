"""Contender 4: BioNeMo 1.x's Triton approach. PyTriton binds the torch model; Triton batches dynamically.

    python -m benchmarks.contenders.pytriton_server --port 8000

As in BioNeMo's `bionemo/triton` servers (NVIDIA BioNeMo framework 1.x,
`bionemo/triton/embeddings.py` `triton_embedding_infer_fn` and
`bionemo/triton/utils.py` `register_str_embedding_infer_fn`, e.g. in
github.com/ynashed/bionemo-fw-ea): one input `sequences`, UTF-8 bytes of shape
(1,) per row; one output `embeddings`, float32 (-1,); an `@batch` inference
function that decodes the strings, tokenizes and embeds the whole batch
Triton's dynamic batcher formed. Where BioNeMo's `ModelConfig(max_batch_size=10)`
kept PyTriton's batcher defaults, this binds esm2nv's batching policy from
`model_catalog.py` (as the service's Triton model has), so both Triton servers
batch alike. Clients use Triton's HTTP API; the tritonserver is PyTriton's own,
on loopback only, with its statistics API open so that the driver can read the
batch sizes Triton formed.
"""

from __future__ import annotations

import argparse
import os
import sysconfig
from collections.abc import Callable

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import DEFAULT_PROTECTED_ENDPOINTS, Triton, TritonConfig, TritonSecurityConfig

from benchmarks.clients import PYTRITON_INPUT, PYTRITON_MODEL, PYTRITON_OUTPUT
from benchmarks.torch_esm import TorchEmbedder
from benchmarks.workload import MODEL
from bionemo_serving.model_catalog import MODELS


def infer_function(embedder: TorchEmbedder) -> Callable[..., dict[str, np.ndarray]]:
    """PyTriton's inference callable: `@batch` hands it the rows of every request Triton merged, as one array."""

    @batch
    def embed(sequences: np.ndarray) -> dict[str, np.ndarray]:
        texts = np.char.decode(sequences.astype(bytes), "utf-8").squeeze(1).tolist()
        return {PYTRITON_OUTPUT: embedder.embed(texts)}

    return embed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="Triton's HTTP port, on 127.0.0.1")
    args = parser.parse_args()
    # PyTriton's python backend stub embeds the first libpython3.x on the loader path; it must be this
    # interpreter's (not the system's of the same minor version), as in tritonserver_setup's wrapper.
    library_path = [sysconfig.get_config_var("LIBDIR"), os.environ.get("LD_LIBRARY_PATH", "")]
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, library_path))
    policy = MODELS[MODEL].batching
    config = TritonConfig(
        http_address="127.0.0.1", http_port=args.port, allow_grpc=False, allow_metrics=False, exit_on_error=True
    )
    # PyTriton guards the statistics API with a token; the driver reads Triton's batch sizes from it (on loopback).
    security = TritonSecurityConfig(restricted_endpoints=[e for e in DEFAULT_PROTECTED_ENDPOINTS if e != "statistics"])
    with Triton(config=config, security_config=security) as triton:
        triton.bind(
            model_name=PYTRITON_MODEL,
            infer_func=infer_function(TorchEmbedder()),
            inputs=[Tensor(name=PYTRITON_INPUT, dtype=bytes, shape=(1,))],
            outputs=[Tensor(name=PYTRITON_OUTPUT, dtype=np.float32, shape=(-1,))],
            config=ModelConfig(
                max_batch_size=policy.max_batch_size,
                batcher=DynamicBatcher(
                    max_queue_delay_microseconds=policy.max_queue_delay_microseconds,
                    preferred_batch_size=list(policy.preferred_batch_sizes),
                ),
            ),
        )
        triton.serve()


if __name__ == "__main__":
    main()
