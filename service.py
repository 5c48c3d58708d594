"""BentoML front of the BioNeMo Triton models: validate, tokenize, call Triton, post-process.

Routes only; the logic lives in `serving/`, the tokenizers in `preprocessing/`.
Run with `make serve`, or `bentoml serve service:svc --production` with
`tritonserver` on PATH.
"""

from __future__ import annotations

import bentoml

from serving.embedding import EmbeddingEngine
from serving.json_io import json_endpoint
from serving.protocol import EmbedRequest, EmbedResponse
from serving.settings import SETTINGS
from serving.triton_models import discover_models

triton = bentoml.triton.Runner(
    "triton",
    model_repository=str(SETTINGS.model_repository),
    # http binds tritonserver to 127.0.0.1 (grpc would bind 0.0.0.0); metrics stay off.
    tritonserver_type="http",
    cli_args=["--allow-metrics=false"],
)
svc = bentoml.legacy.Service("bionemo", runners=[triton])
engine = EmbeddingEngine(triton, discover_models(SETTINGS.model_repository))


@json_endpoint(svc, "/embed", EmbedRequest, EmbedResponse)
async def embed(request: EmbedRequest) -> EmbedResponse:
    """One embedding per sequence: the mean of the final hidden states over the residues."""
    return await engine.embed(request)
