"""/decode and /generate: the decode loop over MegaMolBART's decoder-step graph.

Each step sends every live row (all samples and beams of the request) to
Triton in one call, and the decoder graph is stateless, so Triton's dynamic
batcher can merge the steps of concurrent requests.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from model_catalog import Capability, GraphRole
from preprocessing import SmilesTokenizer
from preprocessing.decoding import BeamSearch, greedy, log_softmax, sample_top_k_top_p
from preprocessing.smiles import canonical_smiles, tanimoto_similarity
from serving.encoding import EncoderEngine
from serving.errors import FieldProblem, InvalidRequest
from serving.protocol import (
    DEFAULT_MAX_DECODE_LENGTH,
    MEGAMOLBART,
    DecodeRequest,
    DecodeResponse,
    DecodingMethod,
    GenerateRequest,
    GenerateResponse,
    GenerateResult,
    Molecule,
)
from serving.triton_models import ServedModel


@dataclass(frozen=True)
class Latents:
    """Encoder states to decode from, one row per molecule to produce."""

    hidden_states: np.ndarray
    mask: np.ndarray


class MoleculeGenerator:
    def __init__(self, engine: EncoderEngine) -> None:
        self.engine = engine

    async def decode(self, request: DecodeRequest) -> DecodeResponse:
        model = await self.engine.model(request.model, Capability.DECODE, request.model_version)
        return await self._decode_latents(model, _latents_from_request(request, model.sizes["hidden_size"]), request.max_length)

    async def decode_array(self, hidden_states: np.ndarray) -> DecodeResponse:
        """Decode a [batch, length, dim] array with the default model; all-zero vectors are padding, as /hidden pads."""
        model = await self.engine.model(MEGAMOLBART, Capability.DECODE)
        if hidden_states.shape[2] != model.sizes["hidden_size"]:
            raise InvalidRequest.at("body", f"has vectors of {hidden_states.shape[2]} values; {model.name} needs {model.sizes['hidden_size']}")
        mask = hidden_states.any(axis=2).astype(np.int64)
        empty = np.flatnonzero(~mask.any(axis=1))
        if empty.size:
            raise InvalidRequest.at(f"body[{empty[0]}]", "is all zeros: no position to decode from")
        return await self._decode_latents(model, Latents(hidden_states, mask), DEFAULT_MAX_DECODE_LENGTH)

    async def _decode_latents(self, model: ServedModel, latents: Latents, max_length: int) -> DecodeResponse:
        ids = await self._token_by_token(model, latents, max_length, greedy)
        tokenizer = self._tokenizer(model)
        return DecodeResponse(model=model.name, model_version=model.version, smiles=[tokenizer.decode(row) for row in ids])

    async def generate(self, request: GenerateRequest) -> GenerateResponse:
        model = await self.engine.model(request.model, Capability.GENERATE, request.model_version)
        seed = request.seed if request.seed is not None else int(np.random.SeedSequence().entropy % 2**31)
        rng = np.random.default_rng(seed)
        encoded = await self.engine.encode(model, request.smiles, field="smiles")
        # Every seed molecule's latent, repeated per sample and perturbed by scaled Gaussian noise.
        states = np.repeat(encoded.hidden_states, request.num_samples, axis=0)
        mask = np.repeat(encoded.attention_mask, request.num_samples, axis=0)
        noise = rng.standard_normal(states.shape).astype(np.float32) * np.float32(request.scaled_radius)
        latents = Latents((states + noise) * mask[:, :, None], mask)
        if request.method is DecodingMethod.BEAM:
            ids = await self._beam(model, latents, request.max_length, request.beam_size)
        elif request.method is DecodingMethod.TOPKP:
            choose = functools.partial(
                sample_top_k_top_p, temperature=request.temperature, top_k=request.top_k, top_p=request.top_p, rng=rng
            )
            ids = await self._token_by_token(model, latents, request.max_length, choose)
        else:
            ids = await self._token_by_token(model, latents, request.max_length, greedy)
        tokenizer = self._tokenizer(model)
        generated = [tokenizer.decode(row) for row in ids]
        results = []
        for index, seed_smiles in enumerate(request.smiles):
            samples = generated[index * request.num_samples : (index + 1) * request.num_samples]
            results.append(GenerateResult(seed_smiles=seed_smiles, samples=[_molecule(s, seed_smiles) for s in samples]))
        return GenerateResponse(model=model.name, model_version=model.version, seed=seed, results=results)

    def _tokenizer(self, model: ServedModel) -> SmilesTokenizer:
        tokenizer = self.engine.tokenizers[model.name]
        assert isinstance(tokenizer, SmilesTokenizer), f"{model.name} decodes but has no SMILES tokenizer"
        return tokenizer

    async def _step(self, model: ServedModel, ids: np.ndarray, latents: Latents, rows: np.ndarray) -> np.ndarray:
        """Next-token logits [len(rows), vocab] for the given rows of the latents."""
        arrays = {"decoder_ids": ids, "encoder_hidden_states": latents.hidden_states[rows], "encoder_mask": latents.mask[rows]}
        return await self.engine.infer(model, GraphRole.DECODER_STEP, arrays)

    async def _token_by_token(
        self, model: ServedModel, latents: Latents, max_length: int, choose: Callable[[np.ndarray], np.ndarray]
    ) -> list[np.ndarray]:
        """Extend every row by `choose(logits)` (greedy, or a sampler) until it ends or reaches `max_length`."""
        tokenizer = self._tokenizer(model)
        rows = len(latents.mask)
        ids = np.full((rows, 1), tokenizer.begin_id, dtype=np.int64)
        live = np.arange(rows)
        for _ in range(max_length):
            chosen = choose(await self._step(model, ids[live], latents, live))
            step = np.full(rows, tokenizer.pad_id, dtype=np.int64)
            step[live] = chosen
            ids = np.concatenate((ids, step[:, None]), axis=1)
            live = live[chosen != tokenizer.end_id]
            if not live.size:
                break
        return list(ids)

    async def _beam(self, model: ServedModel, latents: Latents, max_length: int, beam_size: int) -> list[np.ndarray]:
        """Beam search per row; the live hypotheses of all rows go to Triton together at each step."""
        tokenizer = self._tokenizer(model)
        searches = [BeamSearch(beam_size, tokenizer.begin_id, tokenizer.end_id) for _ in range(len(latents.mask))]
        for _ in range(max_length):
            active = [i for i, search in enumerate(searches) if not search.done]
            if not active:
                break
            owners = np.array([i for i in active for _ in searches[i].live])
            ids = np.array([hypothesis for i in active for hypothesis, _ in searches[i].live], dtype=np.int64)
            log_probs = log_softmax(await self._step(model, ids, latents, owners))
            offset = 0
            for i in active:
                count = len(searches[i].live)
                searches[i].step(log_probs[offset : offset + count])
                offset += count
        return [np.array(search.best()) for search in searches]


def _latents_from_request(request: DecodeRequest, hidden_size: int) -> Latents:
    """Validate shapes the schema cannot express: [batch, length, hidden_size] and a matching mask."""
    width = max(len(row) for row in request.hiddens)
    problems = []
    if len(request.mask) != len(request.hiddens):
        problems.append(FieldProblem("mask", f"has {len(request.mask)} rows; hiddens has {len(request.hiddens)}"))
    for index, row in enumerate(request.hiddens):
        if not row or len(row) != width:
            problems.append(FieldProblem(f"hiddens[{index}]", f"has {len(row)} positions; every row needs {width}"))
        elif any(len(vector) != hidden_size for vector in row):
            problems.append(FieldProblem(f"hiddens[{index}]", f"every vector needs {hidden_size} values (the model's hidden size)"))
    for index, row in enumerate(request.mask[: len(request.hiddens)]):
        if len(row) != width:
            problems.append(FieldProblem(f"mask[{index}]", f"has {len(row)} positions; hiddens rows have {width}"))
        elif not any(row):
            problems.append(FieldProblem(f"mask[{index}]", "marks no position as real"))
    if problems:
        raise InvalidRequest(problems)
    return Latents(np.asarray(request.hiddens, dtype=np.float32), np.asarray(request.mask, dtype=np.int64))


def _molecule(smiles: str, seed_smiles: str) -> Molecule:
    canonical = canonical_smiles(smiles)
    return Molecule(
        smiles=smiles,
        valid=canonical is not None,
        canonical=canonical,
        tanimoto=tanimoto_similarity(smiles, seed_smiles) if canonical is not None else None,
    )
