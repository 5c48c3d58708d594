"""BentoML front of the BioNeMo Triton models: validate, tokenize, call Triton, post-process.

Routes only; the logic lives in `serving/`, the tokenizers in `preprocessing/`.
Run with `make serve`, or `bentoml serve service:svc --production` with
`tritonserver` on PATH.
"""

from __future__ import annotations

import bentoml
import numpy as np

from serving.encoding import EncoderEngine
from serving.http_io import JSONOutput, NdarrayOutput, NoInput, ValidatedJSON, endpoint
from serving.protocol import EmbedRequest, EmbedResponse, HiddenRequest, HiddenResponse, ModelsResponse
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
engine = EncoderEngine(triton, discover_models(SETTINGS.model_repository))


@endpoint(svc, "/embed", ValidatedJSON(pydantic_model=EmbedRequest), JSONOutput(pydantic_model=EmbedResponse))
async def embed(request: EmbedRequest) -> EmbedResponse:
    """One embedding per sequence: by default the mean of the final hidden states over the residues."""
    vectors = await engine.embed(request)
    return EmbedResponse(model=request.model, dim=vectors.shape[1], embeddings=vectors.tolist())


@endpoint(
    svc,
    "/embed/ndarray",
    ValidatedJSON(pydantic_model=EmbedRequest),
    NdarrayOutput(dtype=np.float32, shape=(-1, -1)),
)
async def embed_ndarray(request: EmbedRequest) -> np.ndarray:
    """The embeddings of /embed as one float32 array [batch, dim]."""
    return await engine.embed(request)


@endpoint(svc, "/hidden", ValidatedJSON(pydantic_model=HiddenRequest), JSONOutput(pydantic_model=HiddenResponse))
async def hidden(request: HiddenRequest) -> HiddenResponse:
    """Final hidden states of every token, with the mask of real tokens."""
    return await engine.hidden(request)


@endpoint(svc, "/models", NoInput(), JSONOutput(pydantic_model=ModelsResponse))
async def models(_: None) -> ModelsResponse:
    """The served models: version, capabilities, length limit, hidden size, tokenizer."""
    return engine.catalog()
