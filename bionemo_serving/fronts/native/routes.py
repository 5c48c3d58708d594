"""The native API's routes: each turns its validated request into the engine's input, calls the engine (or the
registry) and renders the result (render.py). Over HTTP, and over `serve-grpc`'s BentoService/Call with the same
descriptors."""

from __future__ import annotations

import functools
from dataclasses import fields
from typing import TypeVar

import numpy as np
from pydantic import BaseModel

from bionemo_serving.model_catalog import DEFAULT_MOLECULE_MODEL, MODELS
from bionemo_serving.engine.engine import Engine
from bionemo_serving.engine.limits import RequestLimits
from bionemo_serving.errors import FieldProblem, InvalidRequest, ServiceError
from bionemo_serving.engine.inputs import (
    DecodeInput,
    DecodingMethod,
    EmbedInput,
    GenerateInput,
    HiddenInput,
    OptimizeInput,
    ScoreInput,
    SequencesInput,
)
from bionemo_serving.fronts.bentoml.admin import AdminJSON, AdminNoInput
from bionemo_serving.fronts.bentoml.descriptors import (
    JSONOutput,
    NdarrayOutput,
    NoInput,
    ValidatedJSON,
    ValidatedNdarray,
)
from bionemo_serving.fronts.bentoml.endpoints import Endpoints
from bionemo_serving.fronts.field_names import named
from bionemo_serving.fronts.native import render
from bionemo_serving.fronts.native.protocol import (
    AdminModelRequest,
    ContactsRequest,
    ContactsResponse,
    DecodeRequest,
    DecodeResponse,
    EmbedRequest,
    EmbedResponse,
    GenerateOptimization,
    GenerateRequest,
    GenerateResponse,
    HiddenRequest,
    HiddenResponse,
    LogitsRequest,
    LogitsResponse,
    ModelsResponse,
    RepositoryResponse,
    ScoreRequest,
    ScoreResponse,
)
from bionemo_serving.triton.registry import ModelRegistry

InputT = TypeVar("InputT")

OPTIMIZE_NAMES = {
    "smiles": "smiles[0]",
    "num_molecules": "num_samples",
    "particles": "optimize.particles",
    "iterations": "optimize.iterations",
    "min_similarity": "optimize.min_similarity",
}
"""/generate's names of the search's fields that the engine names otherwise (its one seed: `smiles`)."""


def engine_input(request: BaseModel, input_type: type[InputT]) -> InputT:
    """The engine's input for `request`: each of its fields that the request has, by name (the native API names them
    as the engine does, so its errors name the request's fields)."""
    values = {field.name: getattr(request, field.name) for field in fields(input_type) if hasattr(request, field.name)}
    return input_type(**values)


def optimize_input(request: GenerateRequest, asked: GenerateOptimization) -> OptimizeInput:
    """The engine's search for a /generate with `optimize` (`asked`): its one seed, decoded greedily, the best
    `num_samples` molecules answered; what else the request asks is refused, every problem named at once."""
    problems = []
    if len(request.smiles) != 1:
        problems.append(
            FieldProblem("smiles", f"has {len(request.smiles)} seeds; with `optimize`, send one: a search per request")
        )
    if request.method is not DecodingMethod.GREEDY:
        problems.append(FieldProblem("method", "with `optimize`, every latent is decoded greedily: send `greedy`"))
    if problems:
        raise InvalidRequest(problems)
    return OptimizeInput(
        request.smiles[0], request.model, request.model_version, asked.property, asked.minimize, asked.min_similarity,
        asked.particles, asked.iterations, request.scaled_radius, request.num_samples, asked.algorithm, request.seed,
        request.max_length,
    )  # fmt: skip


def mount(endpoint: Endpoints, engine: Engine, registry: ModelRegistry, max_request_bytes: int) -> None:
    """Register the native API's routes; bodies over `max_request_bytes` are refused (413) before they are read."""
    json_body = functools.partial(ValidatedJSON, max_bytes=max_request_bytes)

    @endpoint("/embed", json_body(pydantic_model=EmbedRequest), JSONOutput(pydantic_model=EmbedResponse))
    async def embed(request: EmbedRequest) -> EmbedResponse:
        """One embedding per sequence: by default the mean of the final hidden states over the residues."""
        return render.embed_response(await engine.embed(engine_input(request, EmbedInput)), request)

    @endpoint("/embed/ndarray", json_body(pydantic_model=EmbedRequest), NdarrayOutput(dtype=np.float32, shape=(-1, -1)))
    async def embed_ndarray(request: EmbedRequest) -> np.ndarray:
        """The embeddings of /embed as one float32 array [batch, dim] ([batch, layers, dim] with `layers`)."""
        return (await engine.embed(engine_input(request, EmbedInput))).vectors

    @endpoint("/hidden", json_body(pydantic_model=HiddenRequest), JSONOutput(pydantic_model=HiddenResponse))
    async def hidden(request: HiddenRequest) -> HiddenResponse:
        """Final hidden states of every token, with the mask of real tokens."""
        return render.hidden_response(await engine.hidden(engine_input(request, HiddenInput)), request)

    @endpoint("/logits", json_body(pydantic_model=LogitsRequest), JSONOutput(pydantic_model=LogitsResponse))
    async def logits(request: LogitsRequest) -> LogitsResponse:
        """Log-probabilities of the 20 amino acids at every residue position; `<mask>` may stand for any residue."""
        return render.logits_response(await engine.logits(engine_input(request, SequencesInput)), request)

    @endpoint("/score", json_body(pydantic_model=ScoreRequest), JSONOutput(pydantic_model=ScoreResponse))
    async def score(request: ScoreRequest) -> ScoreResponse:
        """Zero-shot variant-effect scores of mutations of one wild type, or its whole single-substitution scan."""
        return render.score_response(await engine.score(engine_input(request, ScoreInput)))

    @endpoint("/contacts", json_body(pydantic_model=ContactsRequest), JSONOutput(pydantic_model=ContactsResponse))
    async def contacts(request: ContactsRequest) -> ContactsResponse:
        """Contact probabilities between every pair of residues, from the attention maps (ESM's contact head)."""
        return render.contacts_response(await engine.contacts(engine_input(request, SequencesInput)), request)

    @endpoint("/decode", json_body(pydantic_model=DecodeRequest), JSONOutput(pydantic_model=DecodeResponse))
    async def decode(request: DecodeRequest) -> DecodeResponse:
        """Greedy decoding of encoder hidden states (e.g. from /hidden) back to SMILES."""
        return render.decode_response(await engine.decode(engine_input(request, DecodeInput)))

    @endpoint(
        "/decode/ndarray",
        ValidatedNdarray(dtype=np.float32, shape=(-1, -1, -1), max_bytes=max_request_bytes),
        JSONOutput(pydantic_model=DecodeResponse),
        model=DEFAULT_MOLECULE_MODEL,
    )
    async def decode_ndarray(hidden_states: np.ndarray) -> DecodeResponse:
        """Greedy decoding of a [batch, length, dim] float32 array with megamolbart; all-zero vectors are padding."""
        try:
            return render.decode_response(await engine.decode_array(hidden_states))
        except ServiceError as error:  # the array is the body itself
            raise error.renamed(lambda field: field.replace("hiddens", "body", 1)) from None

    @endpoint("/generate", json_body(pydantic_model=GenerateRequest), JSONOutput(pydantic_model=GenerateResponse))
    async def generate(request: GenerateRequest) -> GenerateResponse:
        """New molecules around each seed: its latent perturbed by Gaussian noise, then decoded; with `optimize`,
        those that improve a property near the one seed, found by CMA-ES in the latent space (MolMIM's search)."""
        if request.optimize is None:
            return render.generate_response(await engine.generate(engine_input(request, GenerateInput)))
        searched = engine.optimize(optimize_input(request, request.optimize))
        return render.optimized_response(await named(searched, OPTIMIZE_NAMES))

    @endpoint("/models", NoInput(), JSONOutput(pydantic_model=ModelsResponse))
    async def models(_: None) -> ModelsResponse:
        """The served models (version, capabilities, length limit, hidden size, tokenizer) and the request limits."""
        return render.models_response(await registry.served_now(), engine.limits)


def mount_admin(endpoint: Endpoints, registry: ModelRegistry, limits: RequestLimits, admin_token: str) -> None:
    """Register the admin routes, which answer 401 to a request without `Authorization: Bearer <admin_token>`; they
    answer the served models as GET /models does, `limits` included."""
    admin_body = functools.partial(AdminJSON, token=admin_token, max_bytes=limits.max_request_bytes)

    @endpoint("/admin/repository", AdminNoInput(token=admin_token), JSONOutput(pydantic_model=RepositoryResponse))
    async def admin_repository(_: None) -> RepositoryResponse:
        """Admin: every catalogued Triton model in the repository, loaded or not, with Triton's state."""
        return render.repository_response(await registry.repository())

    @endpoint("/admin/load", admin_body(pydantic_model=AdminModelRequest), JSONOutput(pydantic_model=ModelsResponse))
    async def admin_load(request: AdminModelRequest) -> ModelsResponse:
        """Admin: load (or reload from the repository) every Triton model of a catalogued model; the served models."""
        await registry.load(MODELS[request.model])
        return render.models_response(await registry.served_now(), limits)

    @endpoint("/admin/unload", admin_body(pydantic_model=AdminModelRequest), JSONOutput(pydantic_model=ModelsResponse))
    async def admin_unload(request: AdminModelRequest) -> ModelsResponse:
        """Admin: unload every Triton model of a catalogued model; requests for it are then 422s. The served models."""
        await registry.unload(MODELS[request.model])
        return render.models_response(await registry.served_now(), limits)
