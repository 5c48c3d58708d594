"""OpenAI's embeddings API as a dialect of this service: POST /v1/embeddings and GET /v1/models.

A thin adapter for the pipelines and clients built on that API (OpenAI's own
`openai` package, vector databases, LangChain): a request becomes an
`EmbedRequest` for `EncoderEngine.embed`, so validation, tokenization and
errors are the service's own. Only the names change (`input[i]` where /embed
says `sequences[i]`) and the error body takes the shape OpenAI's clients parse;
the status of every error is the one of serving/errors.py.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from model_catalog import Capability
from serving.engine.encoding import EncoderEngine
from serving.engine.payloads import encode_arrays
from serving.errors import ERROR_TYPES, InvalidRequest, ServiceError, http_status
from serving.fronts.bentoml.descriptors import JSONOutput, validation_error
from serving.protocol import EmbedRequest, EncodingFormat, FloatType
from serving.triton.registry import ModelRegistry

STARTED_AT = int(time.time())
"""`created` of every model in GET /v1/models: when this API worker started (Triton keeps no creation time)."""
OWNER = "bionemo"


def _is_token_ids(item: Any) -> bool:
    """One token id, or one input as a list of them."""
    return isinstance(item, int) or (isinstance(item, list) and all(isinstance(token, int) for token in item))


def _strings_only(value: Any) -> Any:
    """One string is one input. Token ids, which OpenAI's API also takes, are refused by name: this service
    tokenizes, with the model's own tokenizer."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise PydanticCustomError("input_type", "should be a string or a list of strings")
    if value and all(_is_token_ids(item) for item in value):
        raise PydanticCustomError(
            "token_ids", "token ids are not accepted: this service tokenizes; send each sequence or SMILES as a string"
        )
    return value


EmbeddingInput = Annotated[
    list[StrictStr],
    BeforeValidator(_strings_only),
    WithJsonSchema(
        {
            "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
            "description": "One protein sequence (or SMILES, for megamolbart), or a list of 1 to "
            "BIONEMO_MAX_SEQUENCES_PER_REQUEST of them; not token ids.",
            "examples": [["MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL", "MKTAYIAKQR"]],
        }
    ),
]


class OpenAIEmbeddingRequest(BaseModel):
    """OpenAI's embeddings request. Unknown fields are an error, as in OpenAI's API."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: StrictStr = Field(description="A served model name (see GET /v1/models).")
    input: EmbeddingInput
    encoding_format: EncodingFormat = Field(
        default=EncodingFormat.FLOAT,
        description="`float`: JSON numbers; `base64`: each embedding as base64 of its little-endian float32 values "
        "(what OpenAI's python client asks for unless told otherwise).",
    )
    dimensions: StrictInt | None = Field(
        default=None, description="If given, must be the model's embedding size: embeddings are not shortened."
    )
    user: StrictStr | None = Field(default=None, description="Accepted and ignored, as OpenAI's API treats it.")
    _one_string: bool = PrivateAttr(default=False)

    @model_validator(mode="wrap")
    @classmethod
    def _remember_one_string(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> OpenAIEmbeddingRequest:
        """Whether `input` was one string, so that its errors name `input` rather than `input[0]`."""
        request = handler(data)
        request._one_string = isinstance(data, dict) and isinstance(data.get("input"), str)
        return request

    def field_name(self, field: str) -> str:
        """This request's name for a field of the `EmbedRequest` it became: `sequences[i]` is `input[i]`."""
        if not field.startswith("sequences"):
            return field
        item = field.removeprefix("sequences")
        return "input" if self._one_string and item == "[0]" else f"input{item}"


class OpenAIEmbedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int = Field(description="Position of the input it embeds.")
    embedding: list[float] | str = Field(description="The vector: numbers, or base64 of little-endian float32.")


class OpenAIUsage(BaseModel):
    prompt_tokens: int = Field(description="Tokens the model read, special tokens included (<cls>, <eos>, </s>).")
    total_tokens: int = Field(description="The same: nothing is generated.")


class OpenAIEmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[OpenAIEmbedding] = Field(description="One embedding per input, in input order.")
    model: str
    usage: OpenAIUsage


class OpenAIModel(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(description="Unix time this API worker started: Triton records none for a model.")
    owned_by: str


class OpenAIModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[OpenAIModel]


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


class OpenAIFront:
    """/v1/embeddings and /v1/models over the engine and the registry that /embed and /models use."""

    def __init__(self, engine: EncoderEngine, registry: ModelRegistry) -> None:
        self.engine, self.registry = engine, registry

    async def embeddings(self, request: OpenAIEmbeddingRequest) -> OpenAIEmbeddingResponse:
        """The embeddings of /embed (mean pooling, float32) in OpenAI's shape; errors name the request's fields."""
        try:
            return await self._embeddings(request)
        except ServiceError as error:
            raise error.renamed(request.field_name) from None

    async def _embeddings(self, request: OpenAIEmbeddingRequest) -> OpenAIEmbeddingResponse:
        try:
            embed = EmbedRequest(sequences=request.input, model=request.model, encoding_format=request.encoding_format)
        except ValidationError as error:  # the limits of /embed's `sequences`: 1 to max_sequences_per_request
            raise validation_error(error) from None
        if request.dimensions is not None:
            model = await self.engine.model(request.model, Capability.EMBED)
            if request.dimensions != model.sizes["hidden_size"]:
                raise InvalidRequest.at(
                    "dimensions",
                    f"{model.name} embeddings have {model.sizes['hidden_size']} dimensions, not {request.dimensions}; "
                    "they cannot be shortened (leave dimensions out)",
                )
        embedded = await self.engine.embed(embed, offers_truncation=False)
        vectors = encode_arrays(embedded.vectors, request.encoding_format, FloatType.FLOAT32)
        return OpenAIEmbeddingResponse(
            data=[OpenAIEmbedding(index=index, embedding=vector) for index, vector in enumerate(vectors)],
            model=embedded.model.name,
            usage=OpenAIUsage(prompt_tokens=embedded.tokens, total_tokens=embedded.tokens),
        )

    async def models(self) -> OpenAIModelList:
        """The served models of GET /models in the shape of OpenAI's GET /v1/models."""
        served = (await self.registry.catalog()).models
        return OpenAIModelList(data=[OpenAIModel(id=model.name, created=STARTED_AT, owned_by=OWNER) for model in served])
