"""Request and response types of MolMIM's NIM API (/molmim/...): its field names, defaults and value ranges, and the
shapes of its answers, as NVIDIA documents them (routes.py names the pages); also their OpenAPI schema, where they are
named MolMIM... beside the native API's types of the same role (the document keeps one schema per name).

The NIM is a FastAPI service: its bodies are read as pydantic reads them by default, numbers and booleans also from
their JSON strings ("10", "true") and a mask's booleans also as 0 and 1, so these are too (not strictly, as the native
API's). An unknown field is an error here all the same: nothing a client sends is silently ignored.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field

from bionemo_serving.engine.inputs import SearchAlgorithm
from bionemo_serving.fronts.native.protocol import FiniteFloat


class MolMIMProperty(str, enum.Enum):
    """The NIM's two properties: the engine's third, MolMIM's combined QED-and-similarity score, is the native API's
    alone (the NIM refuses it)."""

    QED = "QED"
    PLOGP = "plogP"


class _NimRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MolMIMSequencesRequest(_NimRequest):
    sequences: list[str] = Field(
        min_length=1,
        description="SMILES strings; each must parse with RDKit.",
        examples=[["CC(Cc1ccc(cc1)C(C(=O)O)C)C"]],
    )


class MolMIMEmbeddingResponse(BaseModel):
    embeddings: list[list[float]] = Field(
        description="One vector per SMILES, in input order: the mean of its tokens' encoder states (MolMIM's is its "
        "512-value latent)."
    )


class MolMIMHiddenResponse(BaseModel):
    hiddens: list[list[list[float]]] = Field(
        description="[batch, length, hidden]: each SMILES's encoder states at every token, zero-padded to the longest "
        "(MolMIM's are [batch, 1, 512]); what /molmim/decode takes back."
    )
    mask: list[list[bool]] = Field(description="[batch, length]: true at real tokens, false at padding.")


class MolMIMDecodeRequest(_NimRequest):
    hiddens: list[list[list[FiniteFloat]]] = Field(
        min_length=1, description="[batch, length, hidden] states, as /molmim/hidden answers them."
    )
    mask: list[list[bool]] = Field(description="[batch, length]: true at real positions.")


class MolMIMDecodeResponse(BaseModel):
    generated: list[str] = Field(description="The greedy decoding of each latent, in input order.")


class MolMIMSamplingRequest(MolMIMSequencesRequest):
    beam_size: int = Field(default=1, ge=1, le=10, description="Beam width of each decoding; 1 decodes greedily.")
    num_molecules: int = Field(default=1, ge=1, le=10, description="Molecules to sample per SMILES.")
    scaled_radius: float = Field(
        default=0.7, ge=0.0, le=2.0, description="Standard deviation of the Gaussian noise added to each latent."
    )
    seed: int | None = Field(
        default=None, ge=0, description="Not the NIM's: makes the answer reproducible (default: a random one)."
    )


class MolMIMSamplingResponse(BaseModel):
    generated: list[list[str]] = Field(description="Per input SMILES, in order, its sampled molecules (SMILES).")


class MolMIMGenerateRequest(_NimRequest):
    smi: str = Field(description="The seed molecule's SMILES.", examples=["CN1C=NC2=C1C(=O)N(C(=O)N2C)C"])
    algorithm: SearchAlgorithm = Field(
        default=SearchAlgorithm.CMA_ES,
        description="`CMA-ES`: guided search of the latent space for the property; `none`: `particles` samples "
        "around the seed's latent, scored alike.",
    )
    iterations: int = Field(default=10, ge=1, le=1000, description="CMA-ES generations (not used by `none`).")
    min_similarity: float = Field(
        default=0.7,
        ge=0.0,
        le=0.7,
        description="Tanimoto similarity to the seed (Morgan fingerprints, radius 2, 2048 bits) below which a molecule "
        "ranks behind every one that keeps it.",
    )
    minimize: bool = Field(default=False, description="Lower values of the property are better.")
    num_molecules: int = Field(
        default=10, ge=1, le=100, description="Most molecules answered: the best distinct valid ones found."
    )
    particles: int = Field(default=30, ge=2, le=1000, description="Latents decoded per generation.")
    property_name: MolMIMProperty = Field(
        default=MolMIMProperty.QED,
        description="`QED`: RDKit's drug-likeness; `plogP`: penalized logP, JT-VAE's standardised terms.",
    )
    scaled_radius: float = Field(
        default=1.0,
        ge=0.0,
        le=2.0,
        description="Standard deviation of the first latents around the seed's: CMA-ES's initial step size (which "
        "must be positive), or the sampling radius of `none`.",
    )
    seed: int | None = Field(
        default=None, ge=0, description="Not the NIM's: makes the answer reproducible (default: a random one)."
    )


class MolMIMGeneratedMolecule(BaseModel):
    smiles: str = Field(description="RDKit's canonical SMILES.")
    score: float = Field(description="The property's value (QED, or penalized logP).")
    similarity: float = Field(description="Not the NIM's: the Tanimoto similarity to the seed.")


class MolMIMGenerateResponse(BaseModel):
    generated: list[MolMIMGeneratedMolecule] = Field(
        description="At most `num_molecules`, best first: those at or above `min_similarity` by score, then those "
        "below it, the nearer first; valid, distinct and other than the seed."
    )
