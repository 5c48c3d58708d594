"""MolMIM's NIM API as a dialect of this service: POST /molmim/embedding, /molmim/hidden, /molmim/decode,
/molmim/sampling and /molmim/generate, over the same engine as every other front.

A thin adapter for clients of NVIDIA's MolMIM NIM, whose code needs only its base URL changed: each request
(protocol.py: the NIM's field names, defaults and ranges) becomes the engine's input for the default molecule model,
megamolbart, and each result is rendered in the NIM's shape. Errors name the NIM's fields (`smi`, `sequences[1]`,
`property_name`) in the service's one error body, with the status of bionemo_serving/errors.py: a bad field is a 422, as
the NIM's FastAPI answers it. What differs from the NIM (the latent's shape above all) is in docs/molmim.md.

The NIM's API as read from NVIDIA's documentation and examples:
- https://docs.nvidia.com/nim/bionemo/molmim/latest/endpoints.html: the five endpoints, their request bodies (fields,
  defaults, ranges) and response fields, with its example requests and answers (also kept, answers included, in
  github.com/UFResearchComputing/MolMIM-NIM, 02_Endpoints_Bechmarking.ipynb and 03_MolMIMGeneration.ipynb);
- github.com/NVIDIA/bionemo-examples, examples/nims/molmim/: molmim-client/guided_molecule_gen/inference_client.py
  (/hidden's answer sent back to /decode as it is, `mask` as booleans), oracles.py (MolMIM's QED and similarity
  scoring), MolMIMOracleControlledGeneration.ipynb (CMA-ES over /hidden and /decode), molmim-opt-api/
  inference_client.py (/generate's and /sampling's bodies with their defaults);
- https://docs.nvidia.com/bionemo-framework/1.10/notebooks/cma_es_guided_molecular_optimization_molmim.html (MolMIM's
  CMA-ES in the latent space);
- https://build.nvidia.com/nvidia/molmim-generate/deploy (the NIM, nvcr.io/nim/nvidia/molmim:1.0.0, and its curl).
"""

from __future__ import annotations

import functools

from bionemo_serving.model_catalog import DEFAULT_MOLECULE_MODEL
from bionemo_serving.engine.engine import Engine
from bionemo_serving.engine.inputs import (
    DEFAULT_MAX_DECODE_LENGTH,
    DecodeInput,
    DecodingMethod,
    EmbedInput,
    GenerateInput,
    HiddenInput,
    MolecularProperty,
    OptimizeInput,
)
from bionemo_serving.fronts.bentoml.descriptors import JSONOutput, ValidatedJSON
from bionemo_serving.fronts.bentoml.endpoints import Endpoints
from bionemo_serving.fronts.field_names import named
from bionemo_serving.fronts.molmim.protocol import (
    MolMIMDecodeRequest,
    MolMIMDecodeResponse,
    MolMIMEmbeddingResponse,
    MolMIMGeneratedMolecule,
    MolMIMGenerateRequest,
    MolMIMGenerateResponse,
    MolMIMHiddenResponse,
    MolMIMSamplingRequest,
    MolMIMSamplingResponse,
    MolMIMSequencesRequest,
)

SAMPLING_NAMES = {"smiles": "sequences", "num_samples": "num_molecules"}
"""The NIM's names of the engine's fields that /molmim/sampling's differ from."""
GENERATE_NAMES = {"smiles": "smi", "property": "property_name"}
"""The same for /molmim/generate."""


def mount(endpoint: Endpoints, engine: Engine, max_request_bytes: int) -> None:
    """Register the /molmim/ routes; bodies over `max_request_bytes` are refused (413) before they are read."""
    json_body = functools.partial(ValidatedJSON, max_bytes=max_request_bytes)
    route = functools.partial(endpoint, model=DEFAULT_MOLECULE_MODEL)  # the metrics' model: the requests name none

    @route(
        "/molmim/embedding",
        json_body(pydantic_model=MolMIMSequencesRequest),
        JSONOutput(pydantic_model=MolMIMEmbeddingResponse),
    )
    async def molmim_embedding(request: MolMIMSequencesRequest) -> MolMIMEmbeddingResponse:
        """MolMIM's /embedding: one vector per SMILES, the mean of its tokens' encoder states."""
        embedded = await engine.embed(EmbedInput(request.sequences, DEFAULT_MOLECULE_MODEL, truncate=None))
        return MolMIMEmbeddingResponse(embeddings=embedded.vectors.tolist())

    @route(
        "/molmim/hidden",
        json_body(pydantic_model=MolMIMSequencesRequest),
        JSONOutput(pydantic_model=MolMIMHiddenResponse),
    )
    async def molmim_hidden(request: MolMIMSequencesRequest) -> MolMIMHiddenResponse:
        """MolMIM's /hidden: each SMILES's latent, its encoder states at every token, with the mask of real tokens."""
        hidden = await engine.hidden(HiddenInput(request.sequences, DEFAULT_MOLECULE_MODEL, truncate=None))
        return MolMIMHiddenResponse(hiddens=hidden.states.tolist(), mask=hidden.mask.astype(bool).tolist())

    @route(
        "/molmim/decode", json_body(pydantic_model=MolMIMDecodeRequest), JSONOutput(pydantic_model=MolMIMDecodeResponse)
    )
    async def molmim_decode(request: MolMIMDecodeRequest) -> MolMIMDecodeResponse:
        """MolMIM's /decode: latents (as /molmim/hidden answers them) back to SMILES, greedily."""
        decoded = await engine.decode(DecodeInput(request.hiddens, request.mask, DEFAULT_MOLECULE_MODEL))
        return MolMIMDecodeResponse(generated=decoded.smiles)

    @route(
        "/molmim/sampling",
        json_body(pydantic_model=MolMIMSamplingRequest),
        JSONOutput(pydantic_model=MolMIMSamplingResponse),
    )
    async def molmim_sampling(request: MolMIMSamplingRequest) -> MolMIMSamplingResponse:
        """MolMIM's /sampling: molecules around each SMILES, its latent perturbed by Gaussian noise of `scaled_radius`,
        then decoded (by beam search where `beam_size` is over 1); unguided."""
        method = DecodingMethod.BEAM if request.beam_size > 1 else DecodingMethod.GREEDY
        asked = GenerateInput(
            request.sequences, DEFAULT_MOLECULE_MODEL, None, request.num_molecules, request.scaled_radius, method,
            temperature=1.0, top_k=0, top_p=1.0, beam_size=request.beam_size, seed=request.seed,
            max_length=DEFAULT_MAX_DECODE_LENGTH,
        )  # fmt: skip
        generated = await named(engine.generate(asked), SAMPLING_NAMES)
        samples = [[sample.smiles for sample in result.samples] for result in generated.results]
        return MolMIMSamplingResponse(generated=samples)

    @route(
        "/molmim/generate",
        json_body(pydantic_model=MolMIMGenerateRequest),
        JSONOutput(pydantic_model=MolMIMGenerateResponse),
    )
    async def molmim_generate(request: MolMIMGenerateRequest) -> MolMIMGenerateResponse:
        """MolMIM's /generate: new molecules around `smi` that improve `property_name` while keeping `min_similarity`
        to it, found by CMA-ES in the latent space (or sampled around it, `algorithm: none`), best first."""
        asked = OptimizeInput(
            request.smi, DEFAULT_MOLECULE_MODEL, None, MolecularProperty(request.property_name.value), request.minimize,
            request.min_similarity, request.particles, request.iterations, request.scaled_radius,
            request.num_molecules, request.algorithm, request.seed,
        )  # fmt: skip
        optimized = await named(engine.optimize(asked), GENERATE_NAMES)
        found = [
            MolMIMGeneratedMolecule.model_validate(molecule, from_attributes=True) for molecule in optimized.molecules
        ]
        return MolMIMGenerateResponse(generated=found)
