"""A fake decoder whose molecules climb a ladder of QED as the latent's first value grows: what the optimization
tests (engine and MolMIM front) search over without a trained model."""

from __future__ import annotations

import math

import numpy as np

from bionemo_serving.model_catalog import DEFAULT_MOLECULE_MODEL, MODELS
from bionemo_serving.preprocessing import tokenizer_for
from support.fake_runner import FakeRunner, checkpoint_sizes, token_states

SEED = "CC(=O)Nc1ccc(O)cc1"
"""Paracetamol: QED 0.595."""
LADDER = [
    "C1CC",  # not a molecule: an unclosed ring
    "C",
    "CCO",
    "Oc1ccccc1",
    SEED,
    "CC(=O)Nc1ccc(O)c(C)c1",  # QED 0.622, similarity to the seed 0.552
    "CCC(=O)Nc1ccc(O)cc1",  # 0.656, 0.593
    "CC(=O)Nc1ccc(OC)cc1",  # 0.723, 0.593
    "CC(=O)Nc1ccc(OCC)cc1",  # 0.771, 0.533: the best that keeps a floor of 0.5
    "Cc1ccc(NC(=O)c2ccccc2)cc1",  # 0.811, 0.364
    "CC(C)Cc1ccc(C(C)C(=O)O)cc1",  # 0.822, 0.184
    "CN1CCN(c2ccc(NC(=O)c3ccccc3)cc2)CC1",  # 0.945, 0.286: the best of all
]
HIDDEN = checkpoint_sizes(MODELS[DEFAULT_MOLECULE_MODEL])["hidden_size"]
ORIGIN = float(token_states(tokenizer_for(MODELS[DEFAULT_MOLECULE_MODEL]).encode(SEED), HIDDEN)[0, 0])
"""The seed's latent's first value, which the fake decoder reads."""


class LadderRunner(FakeRunner):
    """The fake runner whose decoder writes the rung `floor(value - ORIGIN)` above the seed's."""

    def decoded(self, states: np.ndarray) -> str:
        rung = LADDER.index(SEED) + math.floor(float(states[0, 0]) - ORIGIN + 0.5)
        return LADDER[min(max(rung, 0), len(LADDER) - 1)]

    def decoder_rows(self) -> int:
        """Rows decoded so far: each starts from a latent (no parent)."""
        return sum(int((call.inputs["parent_ids"] < 0).sum()) for call in self.calls if "parent_ids" in call.inputs)
