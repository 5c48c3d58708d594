"""Request and response types of the public API; they are also its OpenAPI schema."""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from model_catalog import DEFAULT_MODEL
from serving.settings import SETTINGS


class _Strict(BaseModel):
    """Unknown fields are an error: nothing a client sends is silently ignored."""

    model_config = ConfigDict(extra="forbid")


class Pooling(str, enum.Enum):
    MEAN = "mean"
    CLS = "cls"


class SequencesRequest(_Strict):
    sequences: list[StrictStr] = Field(
        min_length=1,
        max_length=SETTINGS.max_sequences_per_request,
        description="Protein sequences as one-letter amino-acid codes (either case), "
        "each within the model's length limit (see GET /models).",
        examples=[["MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL"]],
    )
    model: StrictStr = Field(default=DEFAULT_MODEL, description="A served model name (see GET /models).")


class EmbedRequest(SequencesRequest):
    pooling: Pooling = Field(
        default=Pooling.MEAN,
        description="`mean`: mean of the final hidden states over the residues (BioNeMo's definition); "
        "`cls`: the hidden state of the leading <cls> token, for models that have one.",
    )
    normalize: StrictBool = Field(default=False, description="Scale each embedding to unit L2 norm.")


class EmbedResponse(BaseModel):
    model: str = Field(description="The model that computed the embeddings.")
    dim: int = Field(description="Length of each embedding vector.")
    embeddings: list[list[float]] = Field(description="One vector per input sequence, in input order.")


class HiddenRequest(SequencesRequest):
    pass


class HiddenResponse(BaseModel):
    model: str
    dim: int
    hiddens: list[list[list[float]]] = Field(
        description="[batch, length, dim] final hidden states of every token, special tokens included; "
        "length is the longest tokenized input, shorter ones are zero-padded."
    )
    mask: list[list[int]] = Field(description="[batch, length]: 1 at real tokens, 0 at padding.")


class ModelInfo(BaseModel):
    name: str
    version: int = Field(description="The version Triton serves (the newest in the repository).")
    summary: str
    capabilities: list[str] = Field(description="Endpoints this model answers: embed, hidden, decode, generate.")
    max_length: int = Field(description="Most residues (or SMILES tokens) one input may have.")
    hidden_size: int
    tokenizer: str


class ModelsResponse(BaseModel):
    models: list[ModelInfo]


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
