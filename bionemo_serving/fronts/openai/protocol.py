"""Request and response types of OpenAI's embeddings API (POST /v1/embeddings, GET /v1/models), as OpenAI's clients
send and read them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    StrictStr,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from bionemo_serving.fronts.array_encoding import EncodingFormat


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
    Field(min_length=1),  # the most: the engine's limit, the same for every front
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
        """This request's name for a field the engine names: `sequences[i]` is `input[i]`."""
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
