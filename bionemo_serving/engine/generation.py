"""Decoding latents back to SMILES and generating new molecules: greedy decoding, sampling and beam search over
MegaMolBART's decoder-step graph.

Each request's decoding is driven by the worker's `DecodeBatcher`, which sends
the live rows of every request in flight to Triton in one step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from bionemo_serving.model_catalog import Capability, DEFAULT_MOLECULE_MODEL, GraphRole
from bionemo_serving.preprocessing import SmilesTokenizer
from bionemo_serving.preprocessing.smiles import canonical_smiles, tanimoto_similarity
from bionemo_serving.engine.cost import Work
from bionemo_serving.engine.decode_batcher import DecodeBatcher, Latents, StepRows
from bionemo_serving.engine.encoding import Encoder
from bionemo_serving.engine.graphs import GraphCalls
from bionemo_serving.engine.inputs import DEFAULT_MAX_DECODE_LENGTH, DecodeInput, DecodingMethod, GenerateInput
from bionemo_serving.engine.next_token import BeamSearch, greedy, log_softmax, sample_top_k_top_p
from bionemo_serving.engine.results import Decoded, Generated, GeneratedMolecule, SeedSamples
from bionemo_serving.errors import FieldProblem, InvalidRequest
from bionemo_serving.triton.models import ServedModel
from bionemo_serving.triton.registry import ModelRegistry


class TokenByToken:
    """Every row extended by `choose(logits)` (greedy, or a sampler) until it ends or reaches `max_length`."""

    def __init__(
        self, latents: Latents, max_length: int, choose: Callable[[np.ndarray], np.ndarray], tokenizer: SmilesTokenizer
    ) -> None:
        self.latents, self.max_length, self.choose = latents, max_length, choose
        self.end_id, self.pad_id = tokenizer.end_id, tokenizer.pad_id
        self.ids = np.full((len(latents.mask), 1), tokenizer.begin_id, dtype=np.int64)
        self.live = np.arange(len(latents.mask))
        self.parents = np.full(len(self.live), -1)
        """Each live row's place among the previous step's rows; -1 before the first step."""

    def query(self) -> StepRows:
        return StepRows(tokens=self.ids[self.live, -1], parents=self.parents, sources=self.live)

    def advance(self, logits: np.ndarray) -> bool:
        chosen = self.choose(logits)
        step = np.full(len(self.ids), self.pad_id, dtype=np.int64)
        step[self.live] = chosen
        self.ids = np.concatenate((self.ids, step[:, None]), axis=1)
        continuing = chosen != self.end_id
        self.live, self.parents = self.live[continuing], np.flatnonzero(continuing)
        return not self.live.size or self.ids.shape[1] > self.max_length

    def result(self) -> list[np.ndarray]:
        return list(self.ids)


class BeamDecoding:
    """Beam search per row; the live hypotheses of all rows are one query."""

    def __init__(self, latents: Latents, max_length: int, beam_size: int, tokenizer: SmilesTokenizer) -> None:
        self.latents, self.max_length = latents, max_length
        self.searches = [BeamSearch(beam_size, tokenizer.begin_id, tokenizer.end_id) for _ in range(len(latents.mask))]
        self.offsets: dict[int, int] = {}
        """Where each search's hypotheses were among the previous step's rows."""
        self.steps = 0

    def query(self) -> StepRows:
        active = [index for index, search in enumerate(self.searches) if not search.done]
        tokens, parents, sources, offsets = [], [], [], {}
        for index in active:
            search = self.searches[index]
            offsets[index] = len(tokens)
            tokens += [hypothesis[-1] for hypothesis, _ in search.live]
            parents += [parent + self.offsets[index] if parent >= 0 else -1 for parent in search.parents]
            sources += [index] * len(search.live)
        self.offsets = offsets
        return StepRows(np.array(tokens, dtype=np.int64), np.array(parents, dtype=np.int64), np.array(sources))

    def advance(self, logits: np.ndarray) -> bool:
        log_probs = log_softmax(logits)
        for index, offset in self.offsets.items():
            search = self.searches[index]
            search.step(log_probs[offset : offset + len(search.live)])
        self.steps += 1
        return self.steps >= self.max_length or all(search.done for search in self.searches)

    def result(self) -> list[np.ndarray]:
        return [np.array(search.best()) for search in self.searches]


class MoleculeGenerator:
    """Runs the decoder for every request in flight; one instance per API worker."""

    def __init__(self, registry: ModelRegistry, graphs: GraphCalls, encoder: Encoder) -> None:
        """`encoder` encodes the seed molecules of a generation."""
        self.registry, self.graphs, self.encoder = registry, graphs, encoder
        self._batchers: dict[tuple[str, int], DecodeBatcher] = {}

    async def decode(self, asked: DecodeInput) -> Decoded:
        """The greedy decoding of each latent, in input order."""
        model = await self.registry.model(asked.model, Capability.DECODE, asked.model_version)
        latents = _checked_latents(asked.hiddens, asked.mask, model.sizes["hidden_size"])
        return await self._decode_latents(model, latents, asked.max_length)

    async def decode_array(self, hidden_states: np.ndarray) -> Decoded:
        """Decode a [batch, length, dim] array with the default model; all-zero vectors are padding, as /hidden pads."""
        model = await self.registry.model(DEFAULT_MOLECULE_MODEL, Capability.DECODE)
        if hidden_states.shape[2] != model.sizes["hidden_size"]:
            raise InvalidRequest.at("hiddens", f"has vectors of {hidden_states.shape[2]} values; {model.name} needs {model.sizes['hidden_size']}")
        mask = hidden_states.any(axis=2).astype(np.int64)
        empty = np.flatnonzero(~mask.any(axis=1))
        if empty.size:
            raise InvalidRequest.at(f"hiddens[{empty[0]}]", "is all zeros: no position to decode from")
        return await self._decode_latents(model, Latents(hidden_states, mask), DEFAULT_MAX_DECODE_LENGTH)

    async def _decode_latents(self, model: ServedModel, latents: Latents, max_length: int) -> Decoded:
        work = Work(f"{model.name}/decode", shares_steps=True)
        work = work.on(model.graph(GraphRole.DECODER), [max_length] * len(latents.mask))
        async with self.encoder.scheduler.admitted(work):
            smiles = await self.decode_greedily(model, latents, max_length)
        return Decoded(model.name, model.version, smiles, precision=model.precision(GraphRole.DECODER))

    async def decode_greedily(self, model: ServedModel, latents: Latents, max_length: int) -> list[str]:
        """The greedy decoding of each latent, as text; within work its caller has had admitted."""
        tokenizer = self._tokenizer(model)
        ids = await self._run(model, TokenByToken(latents, max_length, greedy, tokenizer))
        return [tokenizer.decode(row) for row in ids]

    async def generate(self, asked: GenerateInput) -> Generated:
        """`num_samples` molecules per seed, each seed's latent perturbed by Gaussian noise of `scaled_radius`, then
        decoded by `method`; reproducible with the same `seed`."""
        model = await self.registry.model(asked.model, Capability.GENERATE, asked.model_version)
        seed = asked.seed if asked.seed is not None else int(np.random.SeedSequence().entropy % 2**31)
        rows = self.encoder.tokenize(model, asked.smiles, field="smiles")
        decoded_rows = len(rows) * asked.num_samples * (asked.beam_size if asked.method is DecodingMethod.BEAM else 1)
        work = Work(f"{model.name}/generate", shares_steps=True).on(model.graph(GraphRole.ENCODER), map(len, rows))
        async with self.encoder.scheduler.admitted(work.on(model.graph(GraphRole.DECODER), [asked.max_length] * decoded_rows)):
            return await self._generate(model, asked, seed, rows)

    async def _generate(self, model: ServedModel, asked: GenerateInput, seed: int, rows: list[np.ndarray]) -> Generated:
        rng = np.random.default_rng(seed)
        encoded = await self.encoder.encode(model, rows)
        # Every seed molecule's latent, repeated per sample and perturbed by scaled Gaussian noise.
        states = np.repeat(encoded.hidden_states, asked.num_samples, axis=0)
        mask = np.repeat(encoded.attention_mask, asked.num_samples, axis=0)
        noise = rng.standard_normal(states.shape).astype(np.float32) * np.float32(asked.scaled_radius)
        latents = Latents((states + noise) * mask[:, :, None], mask)
        tokenizer = self._tokenizer(model)
        decoding: TokenByToken | BeamDecoding
        if asked.method is DecodingMethod.BEAM:
            decoding = BeamDecoding(latents, asked.max_length, asked.beam_size, tokenizer)
        elif asked.method is DecodingMethod.TOPKP:
            choose = functools.partial(
                sample_top_k_top_p, temperature=asked.temperature, top_k=asked.top_k, top_p=asked.top_p, rng=rng
            )
            decoding = TokenByToken(latents, asked.max_length, choose, tokenizer)
        else:
            decoding = TokenByToken(latents, asked.max_length, greedy, tokenizer)
        ids = await self._run(model, decoding)
        generated = [tokenizer.decode(row) for row in ids]
        results = []
        for index, seed_smiles in enumerate(asked.smiles):
            samples = generated[index * asked.num_samples : (index + 1) * asked.num_samples]
            results.append(SeedSamples(seed_smiles, [_molecule(sample, seed_smiles) for sample in samples]))
        return Generated(model.name, model.version, seed, results, precision=model.precision(GraphRole.DECODER))

    def _tokenizer(self, model: ServedModel) -> SmilesTokenizer:
        tokenizer = self.encoder.tokenizers[model.name]
        assert isinstance(tokenizer, SmilesTokenizer), f"{model.name} decodes but has no SMILES tokenizer"
        return tokenizer

    async def _run(self, model: ServedModel, decoding: TokenByToken | BeamDecoding) -> list[np.ndarray]:
        """Decode with the other requests in flight for the same model version; the decoded ids of every row."""
        key = (model.name, model.version)
        if key not in self._batchers:

            async def step(arrays: dict[str, np.ndarray]) -> np.ndarray:
                return await self.graphs.infer(model, GraphRole.DECODER, arrays, "logits")

            self._batchers[key] = DecodeBatcher(step, model.sizes["hidden_size"], model.name)
        await self._batchers[key].decode(decoding)
        return decoding.result()


def _checked_latents(
    hiddens: Sequence[Sequence[Sequence[float]]] | np.ndarray,
    mask: Sequence[Sequence[int]] | np.ndarray,
    hidden_size: int,
) -> Latents:
    """`hiddens` and `mask` as latents, checked for what no schema expresses: [batch, length, hidden_size] states, a
    [batch, length] mask marking at least one position of each row, finite values; every problem named at once."""
    width = max(len(row) for row in hiddens)
    problems = []
    if len(mask) != len(hiddens):
        problems.append(FieldProblem("mask", f"has {len(mask)} rows; hiddens has {len(hiddens)}"))
    for index, row in enumerate(hiddens):
        if len(row) == 0 or len(row) != width:
            problems.append(FieldProblem(f"hiddens[{index}]", f"has {len(row)} positions; every row needs {width}"))
        elif any(len(vector) != hidden_size for vector in row):
            problems.append(
                FieldProblem(f"hiddens[{index}]", f"every vector needs {hidden_size} values (the model's hidden size)")
            )
    for index, row in enumerate(mask[: len(hiddens)]):
        if len(row) != width:
            problems.append(FieldProblem(f"mask[{index}]", f"has {len(row)} positions; hiddens rows have {width}"))
        elif not any(row):
            problems.append(FieldProblem(f"mask[{index}]", "marks no position as real"))
    if problems:
        raise InvalidRequest(problems)
    states = np.asarray(hiddens, dtype=np.float32)
    if not np.isfinite(states).all():
        raise InvalidRequest.at("hiddens", "contains NaN or infinite values")
    return Latents(states, np.asarray(mask, dtype=np.int64))


def _molecule(smiles: str, seed_smiles: str) -> GeneratedMolecule:
    canonical = canonical_smiles(smiles)
    valid = canonical is not None
    return GeneratedMolecule(smiles, valid, canonical, tanimoto_similarity(smiles, seed_smiles) if valid else None)
