"""Request and response types of the native API; they are also its OpenAPI schema (/docs.json).

The limit on how many sequences one request holds is not here but in the engine (engine/limits.py), which
enforces it for every front: the types are fixed at import, the settings read at start-up.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, model_validator

from bionemo_serving.model_catalog import DEFAULT_MODEL, DEFAULT_MOLECULE_MODEL, MODELS, SCORED_AMINO_ACIDS
from bionemo_serving.engine.inputs import (
    DEFAULT_MAX_DECODE_LENGTH,
    DecodingMethod,
    MolecularProperty,
    Pooling,
    ScoringMethod,
    SearchAlgorithm,
)
from bionemo_serving.fronts.array_encoding import EncodingFormat, FloatType


class _Strict(BaseModel):
    """Unknown fields are an error: nothing a client sends is silently ignored."""

    model_config = ConfigDict(extra="forbid", strict=True)


ModelVersion = Annotated[
    int | None,
    Field(ge=1, description="A version of the model that Triton serves (see GET /models); default: the newest."),
]


class SequencesRequest(_Strict):
    sequences: list[StrictStr] = Field(
        min_length=1,
        description="Protein sequences as one-letter amino-acid codes (either case), "
        "each within the model's length limit (see GET /models).",
        examples=[["MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL"]],
    )
    model: StrictStr = Field(default=DEFAULT_MODEL, description="A served model name (see GET /models).")
    model_version: ModelVersion = None
    truncate: StrictBool = Field(
        default=False,
        description="A sequence over the model's length limit is a 422; with true, its first `max_length` residues "
        "(or SMILES tokens) are used instead, and the answer's `truncated` lists it.",
    )


class VectorsRequest(SequencesRequest):
    """A request answered with float arrays, which can come back compact instead of as JSON numbers."""

    encoding_format: EncodingFormat = Field(
        default=EncodingFormat.FLOAT,
        description="`float`: JSON numbers; `base64`: each sequence's array as base64 of its little-endian `dtype` "
        "values, row-major (an embedding: [dim]; hidden states: [length, dim]), several times smaller and faster "
        "to parse than JSON numbers.",
    )
    dtype: FloatType = Field(
        default=FloatType.FLOAT32, description="Precision of the returned values; float16 halves a base64 payload."
    )


LayerIndices = Annotated[
    list[int] | None,
    Field(
        default=None,
        min_length=1,
        description="Hidden-state layers to answer instead of the last alone, numbered as transformers' "
        "`output_hidden_states` numbers them: 0 is the embedding layer's output, the model's number of layers the last "
        "(what is answered without `layers`); negative indices count from the end (-1: the last), as fair-esm's "
        "`repr_layers` do. The answer then has a layer axis after the batch axis.",
        examples=[[-1, 0, 3]],
    ),
]
ResolvedLayers = Annotated[
    list[int] | None, Field(description="The layers answered, as non-negative indices, in the order asked (with `layers`).")
]


class EmbedRequest(VectorsRequest):
    pooling: Pooling = Field(
        default=Pooling.MEAN,
        description="`mean`: mean of the final hidden states over the residues (BioNeMo's definition); "
        "`cls`: the hidden state of the leading <cls> token, for models that have one.",
    )
    normalize: StrictBool = Field(default=False, description="Scale each embedding to unit L2 norm (each layer's).")
    layers: LayerIndices = None


ServedPrecision = Annotated[
    str,
    Field(
        description="What the graph that answered runs in at that version: FP32, or INT8 where the export asked for it "
        "and the graph passed its accuracy gate (docs/performance.md)."
    ),
]
TruncatedIndices = Annotated[
    list[int], Field(description="Indices of the input sequences cut to the model's length limit (only with `truncate`).")
]


class EmbedResponse(BaseModel):
    model: str = Field(description="The model that computed the embeddings.")
    model_version: int = Field(description="The version of the model that computed them.")
    precision: ServedPrecision
    dim: int = Field(description="Length of each embedding vector.")
    encoding_format: EncodingFormat
    dtype: FloatType
    embeddings: list[list[float]] | list[list[list[float]]] | list[str] = Field(
        description="One vector per input sequence, in input order: numbers, or base64 (see encoding_format). With "
        "`layers`: [batch][layers][dim], and with base64 one [layers, dim] array per sequence."
    )
    layers: ResolvedLayers = None
    truncated: TruncatedIndices


class HiddenRequest(VectorsRequest):
    layers: LayerIndices = None


class HiddenResponse(BaseModel):
    model: str
    model_version: int
    precision: ServedPrecision
    dim: int
    encoding_format: EncodingFormat
    dtype: FloatType
    hiddens: list[list[list[float]]] | list[list[list[list[float]]]] | list[str] = Field(
        description="[batch, length, dim] final hidden states of every token, special tokens included; "
        "length is the longest tokenized input, shorter ones are zero-padded. With base64, one [length, dim] "
        "array per sequence. With `layers`: [batch, layers, length, dim] (base64: one [layers, length, dim] array "
        "per sequence)."
    )
    layers: ResolvedLayers = None
    mask: list[list[int]] = Field(description="[batch, length]: 1 at real tokens, 0 at padding.")
    truncated: TruncatedIndices


class LogitsRequest(VectorsRequest):
    sequences: list[StrictStr] = Field(
        min_length=1,
        description="Protein sequences as one-letter amino-acid codes (either case); `<mask>` may stand for any residue.",
        examples=[["MSLKRKNIAL<mask>PAAGIGVRFGADKPKQYVEIGSKTVLEHVL"]],
    )


AlphabetField = Annotated[
    str, Field(description="The amino acids of the last axis, in order: the 20 standard one-letter codes.")
]


class LogitsResponse(BaseModel):
    model: str
    model_version: int
    precision: ServedPrecision
    alphabet: AlphabetField = SCORED_AMINO_ACIDS
    encoding_format: EncodingFormat
    dtype: FloatType
    log_probs: list[list[list[float]]] | list[str] = Field(
        description="[batch][residues][20]: at every residue position (special tokens dropped), the natural-log "
        "probability of each amino acid of `alphabet`, normalised over the model's whole vocabulary. With base64, one "
        "[residues, 20] array per sequence."
    )
    truncated: TruncatedIndices


class ContactsRequest(VectorsRequest):
    pass


class ContactsResponse(BaseModel):
    model: str
    model_version: int
    precision: ServedPrecision
    encoding_format: EncodingFormat
    dtype: FloatType
    contacts: list[list[list[float]]] | list[str] = Field(
        description="[batch][residues][residues]: the probability that residues i and j (0-based) are in contact, "
        "symmetric, as transformers' `EsmModel.predict_contacts` computes it. With base64, one [residues, residues] "
        "array per sequence."
    )
    truncated: TruncatedIndices


class ScoreRequest(_Strict):
    model: StrictStr = Field(default=DEFAULT_MODEL, description="A served model that can score (see GET /models).")
    model_version: ModelVersion = None
    sequence: StrictStr = Field(
        min_length=1,
        description="The wild-type protein as one-letter amino-acid codes (either case).",
        examples=["MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL"],
    )
    mutations: list[StrictStr] | None = Field(
        default=None,
        min_length=1,
        description="Variants to score, e.g. `A23G` (wild-type letter, 1-based position, mutant letter) or a "
        "multi-mutant `A23G:K45R`; one score per variant, in order. Either `mutations` or `scan`.",
        examples=[["L3A", "L3A:K5R"]],
    )
    scan: StrictBool = Field(
        default=False,
        description="Score every single substitution instead: a [residues][20] matrix (deep mutational scan).",
    )
    scan_positions: tuple[StrictInt, StrictInt] | None = Field(
        default=None,
        description="With `scan`: the first and last residue to scan, 1-based and inclusive (the matrix has their "
        "rows alone); a long scan is sent as ranges, each within the request timeout. Default: every residue.",
        examples=[[1, 50]],
    )
    method: ScoringMethod = Field(
        default=ScoringMethod.MASKED_MARGINAL,
        description="`masked-marginal` (Meier et al. 2021): the mutated positions masked in one pass, the sum over them "
        "of log p(mutant) - log p(wild type); `wildtype-marginal`: the same from one unmasked pass of the wild type; "
        "`pseudo-likelihood`: the pseudo-log-likelihood of the mutant minus the wild type's, each position masked in "
        "turn (a sequence's length in passes per variant).",
    )

    @model_validator(mode="after")
    def _mutations_or_scan(self) -> ScoreRequest:
        if (self.mutations is None) == (not self.scan):
            raise ValueError("send either `mutations` or `scan: true`")
        return self


class ScoreResponse(BaseModel):
    model: str
    model_version: int
    precision: ServedPrecision
    method: ScoringMethod
    scan_positions: tuple[int, int] | None = Field(
        default=None, description="A scan's first and last residue, 1-based: the rows of `scores`."
    )
    alphabet: AlphabetField = SCORED_AMINO_ACIDS
    scores: list[float] | list[list[float]] = Field(
        description="With `mutations`: one score per variant, in order. With `scan`: [residues][20], the score of "
        "substituting residue i (0-based) by the amino acid in column j of `alphabet`; the wild type's own column is 0. "
        "Higher is more favourable than the wild type under the model."
    )
    passes: int = Field(description="Model passes the scores took (BIONEMO_MAX_SCORE_PASSES bounds them).")


class GraphRuntime(BaseModel):
    triton_model: str
    precision: ServedPrecision
    runtime: str = Field(description="What runs the graph: onnxruntime, onnxruntime-fused, torchscript or openvino.")
    chosen_by: str = Field(
        description="`measurement`: the fastest timed on this machine's CPU at start-up; `BIONEMO_RUNTIME`: the "
        "setting; `default`: onnxruntime, not timed (a remote repository, a GPU target, or a graph asked for rarely: "
        "the layers and the contacts graphs)."
    )
    cpu: str | None = Field(default=None, description="The CPU (/proc/cpuinfo model name) the runtimes were timed on.")
    threads: int | None = Field(default=None, description="Threads each runtime was timed with: one instance's.")
    total_ms: dict[str, float] = Field(
        default_factory=dict, description="Each runtime's milliseconds over the timed batch shapes (runtime.json)."
    )
    grown_mib: dict[str, float] = Field(
        default_factory=dict,
        description="How many MiB each runtime's memory grew over its timed runs; measurement does not choose one that "
        "grew past GROWTH_LIMIT_MIB (bionemo_serving/runtimes/choice.py).",
    )


class ModelInfo(BaseModel):
    name: str
    version: int = Field(description="The newest version Triton serves: what requests without model_version get.")
    versions: list[int] = Field(description="Every version Triton serves (config.pbtxt version_policy).")
    summary: str
    capabilities: list[str] = Field(
        description="Endpoints this model answers now: embed, hidden, logits, score, decode, generate (a checkpoint "
        "without a masked-LM head, or its language-model graph not loaded, answers no logits or score)."
    )
    max_length: int = Field(description="Most residues (or SMILES tokens) one input may have.")
    hidden_size: int
    tokenizer: str
    weights: str | None = Field(
        default=None,
        description="Where the served weights came from, as the export recorded it in the model's config: "
        "`random-init default` (the small random-init checkpoint `python -m bionemo_serving.exporter defaults` creates: not a trained "
        "model) or `checkpoint: <name>` (the checkpoint file or folder `python -m bionemo_serving.exporter export` read); null where "
        "the config records nothing (an export made before it did).",
    )
    runtimes: list[GraphRuntime] = Field(description="What runs each of the model's Triton models, and why.")


class RequestLimitsInfo(BaseModel):
    """What one request may ask of this service, whatever its endpoint: a client sizes its chunks by these."""

    max_sequences: int = Field(description="Most sequences, SMILES or latents in one request.")
    max_score_passes: int = Field(description="Most model passes one score request may take.")
    max_request_bytes: int = Field(description="Largest request body read; a larger one is a 413.")
    request_timeout_s: float | None = Field(description="The server's deadline of a request; a client may send a shorter one.")


class ModelsResponse(BaseModel):
    models: list[ModelInfo]
    limits: RequestLimitsInfo


CatalogName = Literal[tuple(MODELS)]  # type: ignore[valid-type]
"""Only the catalog's names: an admin request cannot name anything else in (or outside) the repository."""


class AdminModelRequest(_Strict):
    model: CatalogName = Field(description="A catalogued model; every one of its Triton models is loaded or unloaded.")


class RepositoryEntry(BaseModel):
    model: str = Field(description="The catalogued model this Triton model is a graph of.")
    triton_model: str
    version: int | None = Field(description="None for a model Triton has not loaded.")
    state: str = Field(description="Triton's state: READY, UNAVAILABLE, LOADING, UNLOADING.")
    reason: str = Field(description="Why it is not ready, e.g. `unloaded`, or Triton's load error.")


class RepositoryResponse(BaseModel):
    entries: list[RepositoryEntry]


FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
POSITIVE_IN_OPENAPI_3_0 = {"minimum": 0.0, "exclusiveMinimum": True}
"""`gt=0` as OpenAPI 3.0 (BentoML's document) writes it; pydantic writes JSON Schema's `exclusiveMinimum: 0.0`."""


class DecodeRequest(_Strict):
    model: StrictStr = Field(default=DEFAULT_MOLECULE_MODEL, description="A served model that can decode.")
    model_version: ModelVersion = None
    hiddens: list[list[list[FiniteFloat]]] = Field(
        min_length=1,
        description="[batch, length, dim] encoder hidden states, e.g. from /hidden.",
    )
    mask: list[list[Literal[0, 1]]] = Field(description="[batch, length]: 1 at real tokens, 0 at padding.")
    max_length: int = Field(default=DEFAULT_MAX_DECODE_LENGTH, ge=1, le=510, description="Most tokens to decode per molecule.")


class DecodeResponse(BaseModel):
    model: str
    model_version: int
    precision: ServedPrecision
    smiles: list[str] = Field(description="The greedy decoding of each latent, in input order.")


class GenerateOptimization(_Strict):
    """Property-guided search instead of sampling, as MolMIM's /molmim/generate runs it (docs/molmim.md): CMA-ES over
    the seed's latent, every latent decoded greedily and scored, the best distinct valid molecules answered."""

    property: MolecularProperty = Field(
        default=MolecularProperty.QED,
        description="`QED`: RDKit's drug-likeness; `plogP`: penalized logP, JT-VAE's standardised terms; "
        "`QED-similarity`: MolMIM's score of the QED task, clip(QED / 0.9, 0, 1) + clip(Tanimoto to the seed / 0.4, "
        "0, 1), 2 exactly where a molecule has QED >= 0.9 at similarity >= 0.4.",
    )
    minimize: StrictBool = Field(default=False, description="Lower values of the property are better.")
    min_similarity: FiniteFloat = Field(
        default=0.7,
        ge=0.0,
        le=1.0,
        description="Tanimoto similarity to the seed (Morgan fingerprints, radius 2, 2048 bits) below which a molecule "
        "ranks behind every one that keeps it.",
    )
    particles: int = Field(
        default=30, ge=2, le=1000, description="Latents decoded per generation (CMA-ES decodes at least 3)."
    )
    iterations: int = Field(default=10, ge=1, le=1000, description="CMA-ES generations (not used by `none`).")
    algorithm: SearchAlgorithm = Field(
        default=SearchAlgorithm.CMA_ES,
        description="`CMA-ES`: guided search of the latent space for the property; `none`: `particles` samples "
        "around the seed's latent, scored alike.",
    )


class GenerateRequest(_Strict):
    model: StrictStr = Field(default=DEFAULT_MOLECULE_MODEL, description="A served model that can generate.")
    model_version: ModelVersion = None
    smiles: list[StrictStr] = Field(
        min_length=1,
        description="Seed molecules; each must parse with RDKit. With `optimize`, one seed: a search per request "
        "(several requests at once share the decoder's steps).",
        examples=[["CC(=O)Nc1ccc(O)cc1"]],
    )
    num_samples: int = Field(
        default=10,
        ge=1,
        le=64,
        description="Molecules to generate per seed; with `optimize`, the most answered: the best distinct ones found.",
    )
    scaled_radius: FiniteFloat = Field(
        default=1.0,
        ge=0.0,
        description="Standard deviation of the Gaussian noise added to each seed's latent; with `optimize`, of the "
        "first latents around the seed's (CMA-ES's initial step size, which must be positive).",
    )
    optimize: GenerateOptimization | None = Field(
        default=None,
        description="Search for molecules that improve a property near the seed instead of sampling: every latent "
        "is decoded greedily (`method` greedy), and each molecule answered has its `score`.",
    )
    method: DecodingMethod = DecodingMethod.GREEDY
    temperature: FiniteFloat = Field(
        default=1.0, gt=0.0, json_schema_extra=POSITIVE_IN_OPENAPI_3_0, description="topkp: softmax temperature."
    )
    top_k: int = Field(default=0, ge=0, description="topkp: keep the k most likely tokens (0: all).")
    top_p: FiniteFloat = Field(
        default=1.0, gt=0.0, le=1.0, json_schema_extra=POSITIVE_IN_OPENAPI_3_0,
        description="topkp: keep the top-p nucleus (1.0: all).",
    )
    beam_size: int = Field(default=5, ge=1, le=16, description="beam: hypotheses kept per sample.")
    seed: int | None = Field(default=None, ge=0, description="Makes the answer reproducible; echoed back.")
    max_length: int = Field(default=DEFAULT_MAX_DECODE_LENGTH, ge=1, le=510, description="Most tokens to decode per molecule.")


class Molecule(BaseModel):
    smiles: str
    valid: bool = Field(description="RDKit parses it.")
    canonical: str | None = Field(description="RDKit's canonical SMILES, when valid.")
    tanimoto: float | None = Field(description="Morgan-fingerprint Tanimoto similarity to the seed, when valid.")


class GenerateResult(BaseModel):
    seed_smiles: str
    samples: list[Molecule]


class OptimizedMolecule(Molecule):
    score: float = Field(description="The optimised property's value (QED, penalized logP, or QED-similarity).")


class OptimizedResult(BaseModel):
    seed_smiles: str
    samples: list[OptimizedMolecule] = Field(
        description="At most `num_samples`, best first: those at or above `min_similarity` by score, then those below "
        "it, the nearer first; valid, distinct and other than the seed."
    )
    decoded: int = Field(description="Latents the search decoded: particles x iterations (`none`: particles).")


class GenerateResponse(BaseModel):
    model: str
    model_version: int
    precision: ServedPrecision
    seed: int = Field(description="The random seed used; send it back to get the same answer.")
    results: list[GenerateResult] | list[OptimizedResult] = Field(
        description="One result per seed molecule, in input order; with `optimize`, the search's."
    )
