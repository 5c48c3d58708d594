"""Load test for /embed with protein lengths shaped like UniProt (most 100-500 residues, a tail to the limit).

    make serve                      # in one shell
    .venv/bin/pip install -e '.[bench]'
    .venv/bin/locust -f locustfile.py --headless -u 16 -r 16 -t 60s --host http://127.0.0.1:3000
"""

from __future__ import annotations

import random

from locust import HttpUser, constant, task

from model_catalog import MODELS
from preprocessing.protein_tokenizer import STANDARD_RESIDUES

MAX_RESIDUES = MODELS["esm2nv"].max_length


def protein_length(rng: random.Random) -> int:
    """Log-normal around ~300 residues (UniProt's median is near 300), clipped to the model limit."""
    return max(20, min(MAX_RESIDUES, int(rng.lognormvariate(5.6, 0.6))))


class EmbedUser(HttpUser):
    wait_time = constant(0)

    def on_start(self) -> None:
        self.rng = random.Random()

    @task
    def embed(self) -> None:
        sequences = [
            "".join(self.rng.choices(STANDARD_RESIDUES, k=protein_length(self.rng)))
            for _ in range(self.rng.randint(1, 8))
        ]
        self.client.post("/embed", json={"sequences": sequences}, name="/embed")
