"""The engine every front calls: one method per capability, each taking an input of inputs.py and returning a result
of results.py; a request over the limits is refused here, the same for every front.

Each method hands its work to the role that does it: the encoder (embeddings, hidden states), the protein language
model (log-probabilities, scores, contacts), the molecule generator (decoding, generation) or the molecule optimizer
(property-guided generation), all of which call Triton's graphs through one `GraphCalls`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bionemo_serving.model_catalog import MODELS
from bionemo_serving.preprocessing import tokenizer_for
from bionemo_serving.engine.encoding import Encoder
from bionemo_serving.engine.generation import MoleculeGenerator
from bionemo_serving.engine.graphs import GraphCalls
from bionemo_serving.engine.inputs import (
    DecodeInput,
    EmbedInput,
    GenerateInput,
    HiddenInput,
    OptimizeInput,
    ScoreInput,
    SequencesInput,
)
from bionemo_serving.engine.language_model import ProteinLanguageModel
from bionemo_serving.engine.limits import RequestLimits
from bionemo_serving.engine.optimization import MoleculeOptimizer
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
from bionemo_serving.engine.scheduler import Scheduler
from bionemo_serving.triton.registry import ModelRegistry


class Engine:
    """One instance per API worker."""

    def __init__(self, runner: Any, registry: ModelRegistry, limits: RequestLimits, scheduler: Scheduler) -> None:
        """`runner`: the service's bentoml.triton.Runner; `limits`: from the settings; `scheduler`: admits each
        request's work by its cost and runs it in its turn."""
        self.limits, self.scheduler = limits, scheduler
        tokenizers = {name: tokenizer_for(description) for name, description in MODELS.items()}
        graphs = GraphCalls(runner, registry, tokenizers)
        self.encoder = Encoder(registry, graphs, tokenizers, scheduler)
        self.language_model = ProteinLanguageModel(registry, graphs, self.encoder, limits)
        self.generator = MoleculeGenerator(registry, graphs, self.encoder)
        self.optimizer = MoleculeOptimizer(registry, self.encoder, self.generator)

    async def embed(self, asked: EmbedInput) -> Embeddings:
        """One vector per input: the mean of its residues' states, or its <cls> state."""
        self.limits.check_count("sequences", asked.sequences)
        return await self.encoder.embed(asked)

    async def hidden(self, asked: HiddenInput) -> HiddenStates:
        """Every token's hidden states, and the mask of real tokens."""
        self.limits.check_count("sequences", asked.sequences)
        return await self.encoder.hidden(asked)

    async def logits(self, asked: SequencesInput) -> LogProbs:
        """Log-probabilities of the 20 amino acids at every residue."""
        self.limits.check_count("sequences", asked.sequences)
        return await self.language_model.logits(asked)

    async def score(self, asked: ScoreInput) -> Scores:
        """Variant-effect scores of one wild type; its model passes are bounded, not its one sequence."""
        return await self.language_model.score(asked)

    async def contacts(self, asked: SequencesInput) -> ContactMaps:
        """Contact probabilities between every pair of residues."""
        self.limits.check_count("sequences", asked.sequences)
        return await self.language_model.contacts(asked)

    async def decode(self, asked: DecodeInput) -> Decoded:
        """Latents back to SMILES, greedily."""
        self.limits.check_count("hiddens", asked.hiddens)
        return await self.generator.decode(asked)

    async def decode_array(self, hidden_states: np.ndarray) -> Decoded:
        """A [batch, length, dim] array's greedy decoding, with megamolbart; all-zero vectors are padding. Its errors
        name it `hiddens`, as /decode's are named."""
        self.limits.check_count("hiddens", hidden_states)
        return await self.generator.decode_array(hidden_states)

    async def generate(self, asked: GenerateInput) -> Generated:
        """New molecules around seed SMILES."""
        self.limits.check_count("smiles", asked.smiles)
        return await self.generator.generate(asked)

    async def optimize(self, asked: OptimizeInput) -> Optimized:
        """New molecules around one seed that improve a property under a similarity floor: MolMIM's CMA-ES search of
        the latent space; its work is bounded by the time it may take."""
        return await self.optimizer.optimize(asked)
