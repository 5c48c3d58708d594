"""The engine's results, and the registry's records, as the native API's responses: arrays as JSON numbers or base64
in the encoding and precision each request asked for."""

from __future__ import annotations

from dataclasses import asdict

from bionemo_serving.engine.limits import RequestLimits
from bionemo_serving.engine.results import (
    ContactMaps,
    Decoded,
    Embeddings,
    Generated,
    HiddenStates,
    LogProbs,
    Optimized,
    Scores,
)
from bionemo_serving.fronts.array_encoding import encode_arrays
from bionemo_serving.fronts.native.protocol import (
    ContactsResponse,
    DecodeResponse,
    EmbedResponse,
    GenerateResponse,
    GraphRuntime,
    HiddenResponse,
    LogitsResponse,
    ModelInfo,
    ModelsResponse,
    OptimizedMolecule,
    OptimizedResult,
    RepositoryEntry,
    RepositoryResponse,
    RequestLimitsInfo,
    ScoreResponse,
    VectorsRequest,
)
from bionemo_serving.runtimes.record import RuntimeRecord
from bionemo_serving.triton.models import ServedModel
from bionemo_serving.triton.registry import GraphState


def embed_response(embedded: Embeddings, asked: VectorsRequest) -> EmbedResponse:
    return EmbedResponse(
        model=embedded.model,
        model_version=embedded.model_version,
        precision=embedded.precision,
        dim=embedded.vectors.shape[-1],
        encoding_format=asked.encoding_format,
        dtype=asked.dtype,
        embeddings=encode_arrays(embedded.vectors, asked.encoding_format, asked.dtype),
        layers=embedded.layers,
        truncated=embedded.truncated,
    )


def hidden_response(hidden: HiddenStates, asked: VectorsRequest) -> HiddenResponse:
    return HiddenResponse(
        model=hidden.model,
        model_version=hidden.model_version,
        precision=hidden.precision,
        dim=hidden.states.shape[-1],
        encoding_format=asked.encoding_format,
        dtype=asked.dtype,
        hiddens=encode_arrays(hidden.states, asked.encoding_format, asked.dtype),
        mask=hidden.mask.tolist(),
        layers=hidden.layers,
        truncated=hidden.truncated,
    )


def logits_response(log_probs: LogProbs, asked: VectorsRequest) -> LogitsResponse:
    return LogitsResponse(
        model=log_probs.model,
        model_version=log_probs.model_version,
        precision=log_probs.precision,
        encoding_format=asked.encoding_format,
        dtype=asked.dtype,
        log_probs=encode_arrays(log_probs.log_probs, asked.encoding_format, asked.dtype),
        truncated=log_probs.truncated,
    )


def contacts_response(contacts: ContactMaps, asked: VectorsRequest) -> ContactsResponse:
    return ContactsResponse(
        model=contacts.model,
        model_version=contacts.model_version,
        precision=contacts.precision,
        encoding_format=asked.encoding_format,
        dtype=asked.dtype,
        contacts=encode_arrays(contacts.contacts, asked.encoding_format, asked.dtype),
        truncated=contacts.truncated,
    )


def score_response(scores: Scores) -> ScoreResponse:
    return ScoreResponse(
        model=scores.model,
        model_version=scores.model_version,
        precision=scores.precision,
        method=scores.method,
        scan_positions=scores.scan_positions,
        scores=scores.scores.tolist(),
        passes=scores.passes,
    )


def decode_response(decoded: Decoded) -> DecodeResponse:
    return DecodeResponse(
        model=decoded.model, model_version=decoded.model_version, precision=decoded.precision, smiles=decoded.smiles
    )


def generate_response(generated: Generated) -> GenerateResponse:
    """Molecules and seeds have the response's field names: pydantic reads them from the dataclasses."""
    return GenerateResponse.model_validate(generated, from_attributes=True)


def optimized_response(optimized: Optimized) -> GenerateResponse:
    """The search's molecules as /generate's samples of its one seed, each valid, canonical and scored."""
    samples = [
        OptimizedMolecule(
            smiles=molecule.smiles, valid=True, canonical=molecule.smiles, tanimoto=molecule.similarity,
            score=molecule.score,
        )  # fmt: skip
        for molecule in optimized.molecules
    ]
    return GenerateResponse(
        model=optimized.model,
        model_version=optimized.model_version,
        precision=optimized.precision,
        seed=optimized.seed,
        results=[OptimizedResult(seed_smiles=optimized.seed_smiles, samples=samples, decoded=optimized.decoded)],
    )


def models_response(served: list[ServedModel], limits: RequestLimits) -> ModelsResponse:
    return ModelsResponse(
        limits=RequestLimitsInfo(
            max_sequences=limits.max_sequences,
            max_score_passes=limits.max_score_passes,
            max_request_bytes=limits.max_request_bytes,
            request_timeout_s=limits.request_seconds,
        ),
        models=[
            ModelInfo(
                name=model.name,
                version=model.version,
                versions=list(model.versions),
                summary=model.description.summary,
                capabilities=sorted(capability.value for capability in model.capabilities),
                max_length=model.description.max_length,
                hidden_size=model.sizes["hidden_size"],
                tokenizer=model.description.tokenizer.value,
                weights=model.weights,
                runtimes=[_runtime(graph.runtime, graph.precision(model.version)) for graph in model.graphs.values()],
            )
            for model in served
        ]
    )


def _runtime(record: RuntimeRecord, precision: str) -> GraphRuntime:
    return GraphRuntime.model_validate({**asdict(record), "precision": precision})


def repository_response(graphs: list[GraphState]) -> RepositoryResponse:
    return RepositoryResponse(entries=[RepositoryEntry.model_validate(graph, from_attributes=True) for graph in graphs])
