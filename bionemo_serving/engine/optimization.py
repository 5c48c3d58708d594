"""Property-guided generation as MolMIM does it: CMA-ES searches the latent space around a seed molecule for latents
whose greedy decodings score best, over the engine's own encoding and decoding.

MolMIM's latent is one 512-value vector; here a molecule's latent is what the encoder answers and the decoder reads,
its states at every token ([tokens, hidden], /hidden's), so the search runs over the seed's real positions flattened
(a 40-token SMILES at hidden size 256: 10,240 values), the latent's length staying the seed's. A full covariance
there would hold 10,240² values and be decomposed at every generation; the separable CMA-ES (Ros and Hansen 2008,
pycma's `CMA_diagonal`) adapts one variance per value instead, its cost linear in the dimension, which is what a
population of tens (MolMIM's 30 particles) can estimate anyway.

The initial step size is `scaled_radius`: the first generation is the seed's latent plus Gaussian noise of that
standard deviation, what /generate and /molmim/sampling decode; MolMIM's own CMA-ES starts at 1.0, the NIM's default
radius. With `SearchAlgorithm.NONE` that one generation of `particles` samples is the whole search, as the NIM's
`algorithm: "none"`. Every random draw is the request's generator's: the same seed gives the same molecules (pycma
is told not to seed numpy's global one, which concurrent requests share).

Molecules are scored as MolMIM scores them: the property (QED, penalized logP, or MolMIM's combined score of QED
and the similarity to the seed, preprocessing/properties.py), maximised or with `minimize` minimised, with a penalty
where the Tanimoto similarity to the seed falls below `min_similarity`. The penalty outweighs any difference of
property: a molecule below the floor ranks behind every one that keeps it, the nearer the floor the better, so that
the search is led back; what does not parse ranks last. CMA-ES reads the order of its samples alone, so it is told their ranks, whatever the property's scale. The answer is
the best distinct valid molecules seen in the whole search, other than the seed itself.

The work is admitted once, as /generate's: the seed's encoding and `particles` x `iterations` decodings of
`max_length` tokens; the scheduler refuses at once what cannot finish in time.
"""

from __future__ import annotations

import asyncio
import functools
import math
import warnings
from collections.abc import Callable
from typing import Protocol

import numpy as np

from bionemo_serving.model_catalog import Capability, GraphRole
from bionemo_serving.preprocessing.properties import penalized_logp, qed, qed_with_similarity
from bionemo_serving.preprocessing.smiles import canonical_smiles, tanimoto_similarity
from bionemo_serving.engine.cost import Work
from bionemo_serving.engine.decode_batcher import Latents
from bionemo_serving.engine.encoding import Encoder
from bionemo_serving.engine.generation import MoleculeGenerator
from bionemo_serving.engine.inputs import MolecularProperty, OptimizeInput, SearchAlgorithm
from bionemo_serving.engine.results import Optimized, ScoredMolecule
from bionemo_serving.errors import FieldProblem, InvalidRequest
from bionemo_serving.triton.registry import ModelRegistry

with warnings.catch_warnings():  # pycma warns that it cannot plot without matplotlib: nothing here plots
    warnings.filterwarnings("ignore", "Could not import matplotlib", UserWarning)
    import cma

PROPERTIES: dict[MolecularProperty, Callable[[str], Callable[[str], float | None]]] = {
    MolecularProperty.QED: lambda seed: qed,
    MolecularProperty.PLOGP: lambda seed: penalized_logp,
    MolecularProperty.QED_SIMILARITY: lambda seed: functools.partial(qed_with_similarity, seed=seed),
}
"""Each property's scorer of the molecules around a seed, given the seed."""
CMA_OPTIONS: dict[str, object] = {
    "CMA_diagonal": True,
    "seed": math.nan,  # the samples come from the request's generator (`randn`): numpy's global one is left alone
    "verbose": -9,  # nothing printed, no `outcmaes/` files written
    "verb_log": 0,
    "verb_disp": 0,
}

SMALLEST_POPULATION = 3
"""pycma's CMA-ES refuses (or fails at its second `tell`) a population of 2, which the NIM allows: it runs 3."""

Rank = tuple[float, ...]
"""A molecule's place in the search's order, best first (see `Objective.rank`)."""


class Objective:
    """MolMIM's score of the molecules decoded around one seed."""

    def __init__(self, asked: OptimizeInput) -> None:
        self.seed_smiles, self.min_similarity = asked.smiles, asked.min_similarity
        self.seed_canonical = canonical_smiles(asked.smiles)
        self.property = PROPERTIES[asked.property](asked.smiles)
        self.better = -1.0 if asked.minimize else 1.0

    def scored(self, decoded: list[str]) -> list[ScoredMolecule | None]:
        """Each decoding as a molecule (canonical) with its property and its similarity to the seed; None where RDKit
        reads no molecule in it."""
        return [self._scored(canonical_smiles(smiles)) for smiles in decoded]

    def _scored(self, canonical: str | None) -> ScoredMolecule | None:
        score = self.property(canonical) if canonical else None
        if canonical is None or score is None:
            return None
        similarity = tanimoto_similarity(canonical, self.seed_smiles)
        return ScoredMolecule(canonical, score, similarity) if similarity is not None else None

    def rank(self, molecule: ScoredMolecule | None) -> Rank:
        """Smaller is better: those at or above the similarity floor by score, then those below it by how far below,
        then what is not a molecule."""
        if molecule is None:
            return (2.0,)
        shortfall = max(self.min_similarity - molecule.similarity, 0.0)
        return (1.0 if shortfall else 0.0, shortfall, -self.better * molecule.score)


class Search(Protocol):
    """A search of the latent space, built from the seed's latent, the radius, the particles and the generator."""

    def ask(self) -> np.ndarray:
        """The next generation's latents, flattened: [particles, values]."""
        ...

    def tell(self, ranks: list[Rank]) -> None:
        """How the latents of the last `ask` ranked, in their order."""
        ...


class CmaSearch:
    """Separable CMA-ES from the seed's latent."""

    def __init__(self, origin: np.ndarray, radius: float, particles: int, rng: np.random.Generator) -> None:
        options = {**CMA_OPTIONS, "popsize": particles, "randn": lambda *shape: rng.standard_normal(shape)}
        self.strategy = cma.CMAEvolutionStrategy(origin.astype(np.float64), radius, options)
        self.points: list[np.ndarray] = []

    def ask(self) -> np.ndarray:
        self.points = self.strategy.ask()
        return np.asarray(self.points)

    def tell(self, ranks: list[Rank]) -> None:
        places = {rank: place for place, rank in enumerate(sorted(set(ranks)))}
        self.strategy.tell(self.points, [places[rank] for rank in ranks])


class Sampling:
    """One generation of Gaussian samples around the seed's latent, nothing learnt from it."""

    def __init__(self, origin: np.ndarray, radius: float, particles: int, rng: np.random.Generator) -> None:
        self.origin, self.radius, self.particles, self.rng = origin, radius, particles, rng

    def ask(self) -> np.ndarray:
        return self.origin + self.rng.standard_normal((self.particles, self.origin.size)) * self.radius

    def tell(self, ranks: list[Rank]) -> None:
        pass


SEARCHES: dict[SearchAlgorithm, Callable[[np.ndarray, float, int, np.random.Generator], Search]] = {
    SearchAlgorithm.CMA_ES: CmaSearch,
    SearchAlgorithm.NONE: Sampling,
}


def _problems(asked: OptimizeInput) -> list[FieldProblem]:
    """What no front's schema need express for the search to run, every problem named at once."""
    problems = []
    if asked.particles < 1:
        problems.append(FieldProblem("particles", "needs at least 1"))
    if asked.iterations < 1:
        problems.append(FieldProblem("iterations", "needs at least 1"))
    if asked.num_molecules < 1:
        problems.append(FieldProblem("num_molecules", "needs at least 1"))
    if not 0.0 <= asked.min_similarity <= 1.0:
        problems.append(FieldProblem("min_similarity", "is a Tanimoto similarity: 0 to 1"))
    if not (math.isfinite(asked.scaled_radius) and asked.scaled_radius >= 0.0):
        problems.append(FieldProblem("scaled_radius", "needs a finite value of at least 0"))
    elif asked.algorithm is SearchAlgorithm.CMA_ES and asked.scaled_radius == 0.0:
        problems.append(FieldProblem("scaled_radius", "is CMA-ES's initial step size: it needs a positive value"))
    return problems


class MoleculeOptimizer:
    """Runs the searches of one API worker over its encoder and its decoder's continuous batching."""

    def __init__(self, registry: ModelRegistry, encoder: Encoder, generator: MoleculeGenerator) -> None:
        self.registry, self.encoder, self.generator = registry, encoder, generator

    async def optimize(self, asked: OptimizeInput) -> Optimized:
        """The best distinct valid molecules the search decodes, best first; reproducible with the same `seed`."""
        if problems := _problems(asked):
            raise InvalidRequest(problems)
        model = await self.registry.model(asked.model, Capability.GENERATE, asked.model_version)
        try:
            (row,) = self.encoder.tokenize(model, [asked.smiles], field="smiles")
        except InvalidRequest as error:  # one seed: its problems name the field, not an item of it
            raise error.renamed(lambda field: field.removesuffix("[0]")) from None
        seed = asked.seed if asked.seed is not None else int(np.random.SeedSequence().entropy % 2**31)
        if asked.algorithm is SearchAlgorithm.CMA_ES:
            population, generations = max(asked.particles, SMALLEST_POPULATION), asked.iterations
        else:
            population, generations = asked.particles, 1
        decoded_rows = population * generations
        work = Work(f"{model.name}/optimize", shares_steps=True).on(model.graph(GraphRole.ENCODER), [len(row)])
        work = work.on(model.graph(GraphRole.DECODER), [asked.max_length] * decoded_rows)
        async with self.encoder.scheduler.admitted(work):
            encoded = await self.encoder.encode(model, [row])
            latent = encoded.hidden_states[0]
            rng = np.random.default_rng(seed)
            search = SEARCHES[asked.algorithm](latent.ravel(), asked.scaled_radius, population, rng)
            objective = Objective(asked)
            seen: dict[str, ScoredMolecule] = {}
            for _ in range(generations):
                points = search.ask().astype(np.float32).reshape(-1, *latent.shape)
                mask = np.ones(points.shape[:2], dtype=np.int64)
                decoded = await self.generator.decode_greedily(model, Latents(points, mask), asked.max_length)
                molecules = await asyncio.to_thread(objective.scored, decoded)  # RDKit's scoring off the event loop
                search.tell([objective.rank(molecule) for molecule in molecules])
                for molecule in molecules:
                    if molecule is not None and molecule.smiles != objective.seed_canonical:
                        seen.setdefault(molecule.smiles, molecule)
        best = sorted(seen.values(), key=objective.rank)[: asked.num_molecules]
        precision = model.precision(GraphRole.DECODER)
        return Optimized(model.name, model.version, seed, asked.smiles, best, decoded_rows, precision=precision)
