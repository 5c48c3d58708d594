"""Inference calls on the request path, through the Triton runner's public client API: `triton.infer(...)`.

The runner (`bentoml.triton.Runner`) starts and supervises tritonserver, and in each
API worker its `infer` is tritonclient's asyncio HTTP client's, pointed at that
tritonserver. The per-model attribute, `triton.<model>.async_run(...)`, would do
three things no request here wants: ask Triton for the model's metadata before
every call, request every output of the model (an /embed would carry back every
token's hidden states beside the pooled vector it needs), and call the newest
version only (`model_version` is a request field). `infer` takes the version, the
one output wanted and the headers; docs/architecture.md ("Calls to Triton") gives
the measured difference.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tritonclient.http.aio as triton_http

from bionemo_serving.model_catalog import CallPriority
from bionemo_serving.triton.models import TritonGraph

UNCOMPRESSED = {"Accept-Encoding": "identity"}
"""The client's aiohttp session offers gzip by default, and Triton then gzips every output tensor (megabytes of
hidden states) for the API worker next to it to unzip: 93-178 ms per request in `make bench`."""


async def infer(
    runner: Any,
    graph: TritonGraph,
    version: int,
    arrays: dict[str, np.ndarray],
    output: str,
    priority: CallPriority = CallPriority.SHARED,
) -> np.ndarray:
    """Run `graph` at `version` on `arrays` (by input name) and return its `output`, queued in Triton at `priority`
    (a graph exported without priority levels ignores it). Triton's error answers raise tritonclient's
    InferenceServerException; an unreachable Triton, aiohttp's ClientError."""
    result = await runner.infer(
        model_name=graph.name,
        inputs=graph.infer_inputs(arrays),
        model_version=str(version),
        outputs=[triton_http.InferRequestedOutput(output, binary_data=True)],
        headers=UNCOMPRESSED,
        priority=int(priority),
    )
    return result.as_numpy(output)
