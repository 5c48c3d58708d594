"""BentoML front of the BioNeMo Triton models: validate, tokenize, call Triton, post-process.

Routes only; the logic lives in `serving/`, the tokenizers in `preprocessing/`.
Run with `make serve`, or `python -m serving.startup.launch service:svc` with
`tritonserver` on PATH; the settings (serving/startup/settings.py) come from the environment.
"""

from __future__ import annotations

import bentoml
import numpy as np

import serving.fronts.bentoml.grpc_stubs  # noqa: F401  (before any use of BentoML's gRPC stubs: the ones for protobuf 6)
from model_catalog import MODELS
from serving.engine.encoding import EncoderEngine
from serving.engine.generation import MoleculeGenerator
from serving.engine.language_model import ProteinLanguageModel
from serving.engine.payloads import encode_arrays
from serving.fronts.admission import Admission
from serving.fronts.bentoml.grpc_server import ServiceErrorInterceptor, serve_on_uvloop
from serving.fronts.bentoml.descriptors import (
    AdminJSON,
    AdminNoInput,
    JSONOutput,
    NdarrayOutput,
    NoInput,
    ValidatedJSON,
    ValidatedNdarray,
)
from serving.fronts.bentoml.endpoints import Endpoints
from serving.fronts.bentoml.schema import ServesSchemaJSON
from serving.fronts.bionemo_grpc import servicers as bionemo_grpc
from serving.fronts.openai_api import (
    OpenAIEmbeddingRequest,
    OpenAIEmbeddingResponse,
    OpenAIFront,
    OpenAIJSONOutput,
    OpenAIModelList,
)
from serving.metrics import MergeTritonMetrics
from serving.protocol import (
    MEGAMOLBART,
    AdminModelRequest,
    ContactsRequest,
    ContactsResponse,
    DecodeRequest,
    DecodeResponse,
    EmbedRequest,
    EmbedResponse,
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
from serving.startup.settings import current_settings
from serving.triton.registry import ModelRegistry

settings = current_settings()
serve_on_uvloop()
triton = bentoml.triton.Runner(
    "triton",
    model_repository=settings.model_repository,
    # http binds tritonserver to 127.0.0.1 (grpc would bind 0.0.0.0).
    tritonserver_type="http",
    cli_args=settings.triton_arguments(),
)
# The runner appends its own --log-verbose after cli_args, and tritonserver keeps the last one.
triton.cli_args.append(f"--log-verbose={settings.triton_log_verbose}")
svc = bentoml.legacy.Service("bionemo", runners=[triton])
svc.add_asgi_middleware(MergeTritonMetrics, port=settings.triton_metrics_port)  # Triton's families in GET /metrics
svc.add_grpc_interceptor(ServiceErrorInterceptor)  # `bentoml serve-grpc`: typed errors as gRPC codes
svc.add_asgi_middleware(ServesSchemaJSON, service=svc)  # GET /schema.json, for bentoml.SyncHTTPClient/AsyncHTTPClient
admission = Admission(settings.max_in_flight, settings.request_timeout_s)
endpoint = Endpoints(svc, admission)
registry = ModelRegistry(triton)
engine = EncoderEngine(triton, registry)
generator = MoleculeGenerator(engine)
language_model = ProteinLanguageModel(engine, settings.max_score_passes)
bionemo_grpc.mount(svc, engine, generator, admission, settings.esm1nv_grpc_model)  # BioNeMo 1.x's gRPC services
openai_front = OpenAIFront(engine, registry)


@endpoint("/embed", ValidatedJSON(pydantic_model=EmbedRequest), JSONOutput(pydantic_model=EmbedResponse))
async def embed(request: EmbedRequest) -> EmbedResponse:
    """One embedding per sequence: by default the mean of the final hidden states over the residues."""
    embedded = await engine.embed(request)
    return EmbedResponse(
        model=embedded.model.name,
        model_version=embedded.model.version,
        dim=embedded.vectors.shape[-1],
        encoding_format=request.encoding_format,
        dtype=request.dtype,
        embeddings=encode_arrays(embedded.vectors, request.encoding_format, request.dtype),
        layers=embedded.layers,
        truncated=embedded.truncated,
    )


@endpoint(
    "/embed/ndarray",
    ValidatedJSON(pydantic_model=EmbedRequest),
    NdarrayOutput(dtype=np.float32, shape=(-1, -1)),
)
async def embed_ndarray(request: EmbedRequest) -> np.ndarray:
    """The embeddings of /embed as one float32 array [batch, dim] ([batch, layers, dim] with `layers`)."""
    return (await engine.embed(request)).vectors


@endpoint("/hidden", ValidatedJSON(pydantic_model=HiddenRequest), JSONOutput(pydantic_model=HiddenResponse))
async def hidden(request: HiddenRequest) -> HiddenResponse:
    """Final hidden states of every token, with the mask of real tokens."""
    return await engine.hidden(request)


@endpoint("/logits", ValidatedJSON(pydantic_model=LogitsRequest), JSONOutput(pydantic_model=LogitsResponse))
async def logits(request: LogitsRequest) -> LogitsResponse:
    """Log-probabilities of the 20 amino acids at every residue position; `<mask>` may stand for any residue."""
    return await language_model.logits(request)


@endpoint("/score", ValidatedJSON(pydantic_model=ScoreRequest), JSONOutput(pydantic_model=ScoreResponse))
async def score(request: ScoreRequest) -> ScoreResponse:
    """Zero-shot variant-effect scores of mutations of one wild type, or its whole single-substitution scan."""
    return await language_model.score(request)


@endpoint("/contacts", ValidatedJSON(pydantic_model=ContactsRequest), JSONOutput(pydantic_model=ContactsResponse))
async def contacts(request: ContactsRequest) -> ContactsResponse:
    """Contact probabilities between every pair of residues, from the attention maps (ESM's contact head)."""
    return await language_model.contacts(request)


@endpoint("/decode", ValidatedJSON(pydantic_model=DecodeRequest), JSONOutput(pydantic_model=DecodeResponse))
async def decode(request: DecodeRequest) -> DecodeResponse:
    """Greedy decoding of encoder hidden states (e.g. from /hidden) back to SMILES."""
    return await generator.decode(request)


@endpoint(
    "/decode/ndarray",
    ValidatedNdarray(dtype=np.float32, shape=(-1, -1, -1)),
    JSONOutput(pydantic_model=DecodeResponse),
    model=MEGAMOLBART,
)
async def decode_ndarray(hidden_states: np.ndarray) -> DecodeResponse:
    """Greedy decoding of a [batch, length, dim] float32 array with megamolbart; all-zero vectors are padding."""
    return await generator.decode_array(hidden_states)


@endpoint("/generate", ValidatedJSON(pydantic_model=GenerateRequest), JSONOutput(pydantic_model=GenerateResponse))
async def generate(request: GenerateRequest) -> GenerateResponse:
    """New molecules around each seed: its latent perturbed by Gaussian noise, then decoded."""
    return await generator.generate(request)


@endpoint("/models", NoInput(), JSONOutput(pydantic_model=ModelsResponse))
async def models(_: None) -> ModelsResponse:
    """The served models: version, capabilities, length limit, hidden size, tokenizer."""
    return await registry.catalog()


@endpoint(
    "/v1/embeddings",
    ValidatedJSON(pydantic_model=OpenAIEmbeddingRequest),
    OpenAIJSONOutput(pydantic_model=OpenAIEmbeddingResponse),
)
async def openai_embeddings(request: OpenAIEmbeddingRequest) -> OpenAIEmbeddingResponse:
    """OpenAI's embeddings API: /embed's embeddings (mean pooling) as OpenAI's clients ask and read them."""
    return await openai_front.embeddings(request)


@endpoint("/v1/models", NoInput(), OpenAIJSONOutput(pydantic_model=OpenAIModelList))
async def openai_models(_: None) -> OpenAIModelList:
    """The served models, as OpenAI's API lists them."""
    return await openai_front.models()


# The admin endpoints exist only when BIONEMO_ADMIN_TOKEN is set, and answer 401 without it.
if settings.admin_token is not None:

    @endpoint("/admin/repository", AdminNoInput(), JSONOutput(pydantic_model=RepositoryResponse))
    async def admin_repository(_: None) -> RepositoryResponse:
        """Admin: every catalogued Triton model in the repository, loaded or not, with Triton's state."""
        return RepositoryResponse(entries=await registry.repository())

    @endpoint("/admin/load", AdminJSON(pydantic_model=AdminModelRequest), JSONOutput(pydantic_model=ModelsResponse))
    async def admin_load(request: AdminModelRequest) -> ModelsResponse:
        """Admin: load (or reload from the repository) every Triton model of a catalogued model; the served models."""
        await registry.load(MODELS[request.model])
        return await registry.catalog()

    @endpoint("/admin/unload", AdminJSON(pydantic_model=AdminModelRequest), JSONOutput(pydantic_model=ModelsResponse))
    async def admin_unload(request: AdminModelRequest) -> ModelsResponse:
        """Admin: unload every Triton model of a catalogued model; requests for it are then 422s. The served models."""
        await registry.unload(MODELS[request.model])
        return await registry.catalog()
