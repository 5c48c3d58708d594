"""The molecular properties guided generation optimises (serving/engine/optimization.py): QED and penalized logP.

QED is RDKit's (Bickerton et al. 2012). Penalized logP is JT-VAE's (Jin et al. 2018), the one MolMIM's NIM scores
`plogP` with: Crippen logP minus the synthetic-accessibility score (Ertl and Schuffenhauer 2009, RDKit's Contrib
`sascorer`) minus the long-ring penalty (atoms of the largest ring beyond six), each term standardised by its mean and
standard deviation over ZINC250k as JT-VAE's code does. The NIM's own /generate examples score their molecules with
exactly these values (-5.533 for `Cn1c(=O)c2c(ncn2C)n(C)c(=O)c1=O`; the unstandardised sum gives -5.163).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from rdkit import Chem, RDConfig
from rdkit.Chem import QED, Crippen

# Each term's mean and standard deviation over ZINC250k, from JT-VAE's `logP_values.txt`, `SA_scores.txt` and
# `cycle_scores.txt`, as its penalized-logP code uses them.
LOGP_MEAN, LOGP_STD = 2.4570953396190123, 1.434324401111988
SA_MEAN, SA_STD = 3.0525811293166134, 0.8335207024513095
RING_MEAN, RING_STD = 0.0485696876403053, 0.2860212110245455
LONG_RING = 6
"""Atoms a ring may have before each further one is penalised."""


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
