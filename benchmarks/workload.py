"""The requests every contender is sent: UniProt-like proteins for /embed (and, in the soak, for the head graphs'
endpoints), drug-like SMILES for /generate.

One seeded `random.Random` per simulated user makes a run repeatable; the
locustfile, the driver's warm-up and its sequential probe all draw from here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bionemo_serving.model_catalog import MODELS
from bionemo_serving.preprocessing.protein_tokenizer import STANDARD_RESIDUES

MODEL = "esm2nv"
MAX_RESIDUES = MODELS[MODEL].max_length
SEQUENCES_PER_REQUEST = (1, 8)
SAMPLES_PER_SEED = (1, 4)
VARIANTS_PER_SCORE = (1, 8)
SUBSTITUTIONS_PER_VARIANT = (1, 3)
MASKED_SHARE = 0.15
"""Of a /logits protein's residues, how many are sent as <mask> (as in ESM's masked-language-model training)."""

# Real drug molecules of 20 to 80 characters; each parses with RDKit and tokenizes in MegaMolBART's vocabulary.
DRUG_SMILES = (
    "CC(=O)Oc1ccccc1C(=O)O",  # aspirin
    "Cn1cnc2c1c(=O)n(C)c(=O)n2C",  # caffeine
    "CC(C)Cc1ccc(cc1)C(C)C(=O)O",  # ibuprofen
    "COc1ccc2cc(ccc2c1)C(C)C(=O)O",  # naproxen
    "CNCCC(Oc1ccc(cc1)C(F)(F)F)c1ccccc1",  # fluoxetine
    "CN1C(=O)CN=C(c2ccccc2)c2cc(Cl)ccc21",  # diazepam
    "COc1ccc2[nH]c(S(=O)Cc3ncc(C)c(OC)c3C)nc2c1",  # omeprazole
    "OC(=O)c1cn(C2CC2)c2cc(N3CCNCC3)c(F)cc2c1=O",  # ciprofloxacin
    "Cc1ccc(-c2cc(C(F)(F)F)nn2-c2ccc(S(N)(=O)=O)cc2)cc1",  # celecoxib
    "Cc1ccc(NC(=O)c2ccc(CN3CCN(C)CC3)cc2)cc1Nc1nccc(-c2cccnc2)n1",  # imatinib
    "CCCc1nn(C)c2c(=O)[nH]c(-c3cc(ccc3OCC)S(=O)(=O)N3CCN(C)CC3)nc12",  # sildenafil
)


def protein_length(rng: random.Random) -> int:
    """Log-normal with a median of e^5.6 ≈ 270 residues (UniProt's is near 300), clipped to 20 and the model limit."""
    return max(20, min(MAX_RESIDUES, int(rng.lognormvariate(5.6, 0.6))))


def protein(rng: random.Random, length: int | None = None) -> str:
    return "".join(rng.choices(STANDARD_RESIDUES, k=length or protein_length(rng)))


@dataclass(frozen=True)
class EmbedRequest:
    """One /embed request and the work it asks for (what throughput and FLOPs are counted in)."""

    sequences: list[str]

    @property
    def residues(self) -> int:
        return sum(map(len, self.sequences))

    @property
    def body(self) -> dict[str, object]:
        return {"sequences": self.sequences, "model": MODEL}

    @property
    def openai_body(self) -> dict[str, object]:
        """The same request in OpenAI's embeddings API, as OpenAI's python client sends it (base64)."""
        return {"input": self.sequences, "model": MODEL, "encoding_format": "base64"}

    def context(self) -> dict[str, int]:
        """What locust's request event carries for the results file; tokens add ESM's <cls> and <eos>."""
        tokens = [len(sequence) + 2 for sequence in self.sequences]
        return {
            "sequences": len(self.sequences),
            "residues": self.residues,
            "tokens": sum(tokens),
            "token_pairs": sum(count * count for count in tokens),
        }


def embed_request(rng: random.Random) -> EmbedRequest:
    return EmbedRequest([protein(rng) for _ in range(rng.randint(*SEQUENCES_PER_REQUEST))])


def generate_body(rng: random.Random) -> dict[str, object]:
    """A /generate request: one seed molecule, 1-4 samples, reproducible."""
    return {
        "smiles": [rng.choice(DRUG_SMILES)],
        "num_samples": rng.randint(*SAMPLES_PER_SEED),
        "seed": rng.randrange(2**31),
    }


def layers_body(rng: random.Random) -> dict[str, object]:
    """An /embed request for 1-4 hidden-state layers: the first two (0: the embeddings' output) and the last two,
    counted from the end."""
    return {**embed_request(rng).body, "layers": rng.sample([0, 1, -2, -1], rng.randint(1, 4))}


def contacts_body(rng: random.Random) -> dict[str, object]:
    """A /contacts request: the proteins of an /embed request."""
    return embed_request(rng).body


def logits_body(rng: random.Random) -> dict[str, object]:
    """A /logits request: the proteins of an /embed request, about 15 % of their residues masked."""
    masked = [
        "".join("<mask>" if rng.random() < MASKED_SHARE else residue for residue in sequence)
        for sequence in embed_request(rng).sequences
    ]
    return {"sequences": masked, "model": MODEL}


def score_body(rng: random.Random) -> dict[str, object]:
    """A masked-marginal /score of one protein: 1-8 variants of 1-3 substitutions each (`A23G:K45R`)."""
    wild_type = protein(rng)
    variants = []
    for _ in range(rng.randint(*VARIANTS_PER_SCORE)):
        positions = sorted(rng.sample(range(len(wild_type)), rng.randint(*SUBSTITUTIONS_PER_VARIANT)))
        substitutions = [
            f"{wild_type[at]}{at + 1}{rng.choice([r for r in STANDARD_RESIDUES if r != wild_type[at]])}"
            for at in positions
        ]
        variants.append(":".join(substitutions))
    return {"sequence": wild_type, "mutations": variants, "model": MODEL}
