"""Sequential latency of every endpoint with one input: one request at a time, so no queueing is measured.

    make serve &
    .venv/bin/python benchmarks/latency.py --url http://127.0.0.1:3000 --requests 100
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import requests

PROTEIN = "MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL"
MOLECULE = "CC(=O)Nc1ccc(O)cc1"


def cases(session: requests.Session, url: str) -> list[tuple[str, str, Any]]:
    latent = session.post(f"{url}/hidden", json={"model": "megamolbart", "sequences": [MOLECULE]}).json()
    decode_body = {"hiddens": latent["hiddens"], "mask": latent["mask"], "max_length": 32}
    return [
        *((f"/embed {model}", "/embed", {"model": model, "sequences": [PROTEIN]}) for model in ("esm1nv", "esm2nv", "prott5nv")),
        ("/embed megamolbart", "/embed", {"model": "megamolbart", "sequences": [MOLECULE]}),
        ("/embed/ndarray esm2nv", "/embed/ndarray", {"sequences": [PROTEIN]}),
        ("/hidden esm2nv", "/hidden", {"sequences": [PROTEIN]}),
        ("/decode 32 steps", "/decode", decode_body),
        ("/generate 1x1 greedy 32 steps", "/generate", {"smiles": [MOLECULE], "num_samples": 1, "max_length": 32, "seed": 0}),
        ("/models", "/models", None),
    ]


def measure(session: requests.Session, url: str, path: str, body: Any, count: int) -> np.ndarray:
    def once() -> None:
        response = session.get(f"{url}{path}") if body is None else session.post(f"{url}{path}", json=body)
        response.raise_for_status()

    for _ in range(5):  # warm-up: connections, onnxruntime arenas
        once()
    seconds = []
    for _ in range(count):
        started = time.perf_counter()
        once()
        seconds.append(time.perf_counter() - started)
    return np.asarray(seconds) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:3000")
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    with requests.Session() as session:
        for label, path, body in cases(session, args.url):
            ms = measure(session, args.url, path, body, args.requests)
            print(f"{label:32} p50 {np.percentile(ms, 50):8.2f} ms  p95 {np.percentile(ms, 95):8.2f} ms  (n={len(ms)})")


if __name__ == "__main__":
    main()
