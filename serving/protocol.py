"""Request and response types of the public API; they are also its OpenAPI schema."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from model_catalog import DEFAULT_MODEL
from serving.settings import SETTINGS


class _Strict(BaseModel):
    """Unknown fields are an error: nothing a client sends is silently ignored."""

    model_config = ConfigDict(extra="forbid")


class EmbedRequest(_Strict):
    sequences: list[StrictStr] = Field(
        min_length=1,
        max_length=SETTINGS.max_sequences_per_request,
        description="Protein sequences as one-letter amino-acid codes (either case); "
        "each within the model's length limit.",
        examples=[["MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL"]],
    )
    model: StrictStr = Field(default=DEFAULT_MODEL, description="A served model name (see GET /models).")


class EmbedResponse(BaseModel):
    model: str = Field(description="The model that computed the embeddings.")
    dim: int = Field(description="Length of each embedding vector.")
    embeddings: list[list[float]] = Field(
        description="One vector per input sequence, in input order: the mean of the final hidden states "
        "over the residue positions (not <cls>, <eos> or padding)."
    )


class ErrorDetail(BaseModel):
    field: str = Field(description="Where the problem is, e.g. `sequences[2]` or `model`.")
    message: str


class ErrorInfo(BaseModel):
    type: str
    message: str
    details: list[ErrorDetail]


class ErrorResponse(BaseModel):
    """The body of every 4xx and 5xx answer."""

    error: ErrorInfo
