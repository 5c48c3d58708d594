"""The molecular properties guided generation optimises (engine/optimization.py): QED, penalized logP and
MolMIM's combined QED-and-similarity score.

QED is RDKit's (Bickerton et al. 2012). Penalized logP is JT-VAE's (Jin et al. 2018), the one MolMIM's NIM scores
`plogP` with: Crippen logP minus the synthetic-accessibility score (Ertl and Schuffenhauer 2009, RDKit's Contrib
`sascorer`) minus the long-ring penalty (atoms of the largest ring beyond six), each term standardised by its mean and
standard deviation over ZINC250k as JT-VAE's code does. The NIM's own /generate examples score their molecules with
exactly these values (-5.533 for `Cn1c(=O)c2c(ncn2C)n(C)c(=O)c1=O`; the unstandardised sum gives -5.163).

The combined score is what MolMIM optimises for the QED task of JT-VAE and Jin et al. (a molecule of QED 0.9 or more
at Tanimoto similarity 0.4 or more to its seed): clip(QED / 0.9, 0, 1) + clip(similarity / 0.4, 0, 1), MolMIM's paper
(Reidenbach et al. 2023, appendix 3.1) and NVIDIA's bionemo-examples `guided_molecule_gen/oracles.py`
(`molmim_qed_with_similarity`). It reaches its maximum, 2, exactly where a molecule succeeds at the task, and rewards
either half on the way there.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from rdkit import Chem, RDConfig
from rdkit.Chem import QED, Crippen

from bionemo_serving.preprocessing.smiles import tanimoto_similarity

# Each term's mean and standard deviation over ZINC250k, from JT-VAE's `logP_values.txt`, `SA_scores.txt` and
# `cycle_scores.txt`, as its penalized-logP code uses them.
LOGP_MEAN, LOGP_STD = 2.4570953396190123, 1.434324401111988
SA_MEAN, SA_STD = 3.0525811293166134, 0.8335207024513095
RING_MEAN, RING_STD = 0.0485696876403053, 0.2860212110245455
LONG_RING = 6
"""Atoms a ring may have before each further one is penalised."""
QED_GOAL, SIMILARITY_GOAL = 0.9, 0.4
"""The QED task's success (JT-VAE, Jin et al. 2019): QED at least 0.9 at a Tanimoto similarity of at least 0.4."""


def _contrib_sascorer() -> ModuleType:
    """RDKit's `SA_Score/sascorer.py`, loaded from its file (Contrib is not importable), its fragment scores read now
    rather than by the first request (and by two threads at once)."""
    path = Path(RDConfig.RDContribDir) / "SA_Score" / "sascorer.py"
    spec = importlib.util.spec_from_file_location("sascorer", path)
    assert spec is not None and spec.loader is not None, f"RDKit ships no {path}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.readFragmentScores()
    return module


_SASCORER = _contrib_sascorer()


def _molecule(smiles: str) -> Chem.Mol | None:
    """The molecule of `smiles`, or None where RDKit cannot parse it or it has no atom."""
    molecule = Chem.MolFromSmiles(smiles) if smiles else None
    return molecule if molecule is not None and molecule.GetNumAtoms() else None


def qed(smiles: str) -> float | None:
    """Quantitative estimate of drug-likeness in [0, 1]; None for what is not a molecule."""
    molecule = _molecule(smiles)
    return QED.qed(molecule) if molecule is not None else None


def penalized_logp(smiles: str) -> float | None:
    """JT-VAE's standardised penalized logP (higher is better); None for what is not a molecule."""
    molecule = _molecule(smiles)
    if molecule is None:
        return None
    largest_ring = max((len(ring) for ring in molecule.GetRingInfo().AtomRings()), default=0)
    long_ring = max(largest_ring - LONG_RING, 0)
    return (
        (Crippen.MolLogP(molecule) - LOGP_MEAN) / LOGP_STD
        - (_SASCORER.calculateScore(molecule) - SA_MEAN) / SA_STD
        - (long_ring - RING_MEAN) / RING_STD
    )


def qed_with_similarity(smiles: str, seed: str) -> float:
    """MolMIM's combined score of the QED task, 0 to 2: each of QED and the Tanimoto similarity to `seed` (Morgan,
    radius 2, 2048 bits) as a share of its goal, capped at 1. 0 for what is not a molecule, as MolMIM's oracle scores
    it; a seed that is not one is an error, as there."""
    if _molecule(seed) is None:
        raise ValueError(f"the seed {seed!r} is not a molecule")
    drug_likeness, similarity = qed(smiles), tanimoto_similarity(smiles, seed)
    if drug_likeness is None or similarity is None:
        return 0.0
    return min(drug_likeness / QED_GOAL, 1.0) + min(similarity / SIMILARITY_GOAL, 1.0)
