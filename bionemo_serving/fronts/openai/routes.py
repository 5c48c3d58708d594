"""OpenAI's embeddings API as a dialect of this service: POST /v1/embeddings and GET /v1/models.

A thin adapter for the pipelines and clients built on that API (OpenAI's own
`openai` package, vector databases, LangChain): a request becomes the engine's
`EmbedInput`, so validation, tokenization and errors are the service's own. Only
the names change (`input[i]` where /embed says `sequences[i]`) and the error body
takes the shape OpenAI's clients parse; the status of every error is the one of
bionemo_serving/errors.py.
"""

from __future__ import annotations

import time
from typing import Any

from bionemo_serving.engine.engine import Engine
from bionemo_serving.engine.inputs import EmbedInput
from bionemo_serving.engine.results import Embeddings
from bionemo_serving.errors import ERROR_TYPES, ServiceError, http_status
from bionemo_serving.fronts.array_encoding import EncodingFormat, FloatType, encode_arrays
from bionemo_serving.fronts.bentoml.descriptors import JSONOutput, NoInput, ValidatedJSON
from bionemo_serving.fronts.bentoml.endpoints import Endpoints
from bionemo_serving.fronts.openai.protocol import (
    OpenAIEmbedding,
    OpenAIEmbeddingRequest,
    OpenAIEmbeddingResponse,
    OpenAIModel,
    OpenAIModelList,
    OpenAIUsage,
)
from bionemo_serving.triton.registry import ModelRegistry

STARTED_AT = int(time.time())
"""`created` of every model in GET /v1/models: when this API worker started (Triton keeps no creation time)."""
OWNER = "bionemo"


def openai_error_body(error: ServiceError) -> dict[str, Any]:
    """`{"error": {"message", "type", "param", "code"}}`: OpenAI's error shape, which its clients read into their
    exceptions. `param` is the first field at fault, `code` the service's own error type."""
    return {
        "error": {
            "message": str(error),
            "type": "invalid_request_error" if http_status(error) < 500 else "server_error",
            "param": error.problems[0].field if error.problems else None,
            "code": ERROR_TYPES[type(error)],
        }
    }


class OpenAIJSONOutput(JSONOutput):
    """A JSON answer whose errors are in OpenAI's shape."""

    error_shape = staticmethod(openai_error_body)


def embeddings_response(embedded: Embeddings, encoding: EncodingFormat) -> OpenAIEmbeddingResponse:
    """The embeddings in OpenAI's shape: float32, as numbers or base64."""
    vectors = encode_arrays(embedded.vectors, encoding, FloatType.FLOAT32)
    return OpenAIEmbeddingResponse(
        data=[OpenAIEmbedding(index=index, embedding=vector) for index, vector in enumerate(vectors)],
        model=embedded.model,
        usage=OpenAIUsage(prompt_tokens=embedded.tokens, total_tokens=embedded.tokens),
    )


def mount(endpoint: Endpoints, engine: Engine, registry: ModelRegistry, max_request_bytes: int) -> None:
    """Register /v1/embeddings and /v1/models; bodies over `max_request_bytes` are refused (413)."""

    @endpoint(
        "/v1/embeddings",
        ValidatedJSON(pydantic_model=OpenAIEmbeddingRequest, max_bytes=max_request_bytes),
        OpenAIJSONOutput(pydantic_model=OpenAIEmbeddingResponse),
    )
    async def openai_embeddings(request: OpenAIEmbeddingRequest) -> OpenAIEmbeddingResponse:
        """OpenAI's embeddings API: /embed's embeddings (mean pooling) as OpenAI's clients ask and read them."""
        # No truncation: this API has no field to ask for it, and a refusal must not suggest one.
        asked = EmbedInput(request.input, request.model, truncate=None, dimensions=request.dimensions)
        try:
            embedded = await engine.embed(asked)
        except ServiceError as error:
            raise error.renamed(request.field_name) from None
        return embeddings_response(embedded, request.encoding_format)

    @endpoint("/v1/models", NoInput(), OpenAIJSONOutput(pydantic_model=OpenAIModelList))
    async def openai_models(_: None) -> OpenAIModelList:
        """The served models, as OpenAI's API lists them."""
        served = await registry.served_now()
        listed = [OpenAIModel(id=model.name, created=STARTED_AT, owned_by=OWNER) for model in served]
        return OpenAIModelList(data=listed)
