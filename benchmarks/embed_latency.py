"""Sequential latency of /embed on a running service: one request at a time, so no queueing is measured.

    make serve &
    .venv/bin/python benchmarks/embed_latency.py --url http://127.0.0.1:3000 --requests 300
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import requests

ONE_SEQUENCE = ["MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL"]


def measure(session: requests.Session, url: str, sequences: list[str], count: int) -> np.ndarray:
    for _ in range(10):  # warm-up: connections, onnxruntime arenas
        session.post(f"{url}/embed", json={"sequences": sequences}).raise_for_status()
    seconds = []
    for _ in range(count):
        started = time.perf_counter()
        session.post(f"{url}/embed", json={"sequences": sequences}).raise_for_status()
        seconds.append(time.perf_counter() - started)
    return np.asarray(seconds) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:3000")
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    eight = ["".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), size=300)) for _ in range(8)]
    with requests.Session() as session:
        for label, sequences in (("1 x 41 residues", ONE_SEQUENCE), ("8 x 300 residues", eight)):
            ms = measure(session, args.url, sequences, args.requests)
            print(f"{label:18} p50 {np.percentile(ms, 50):7.2f} ms  p95 {np.percentile(ms, 95):7.2f} ms  (n={len(ms)})")


if __name__ == "__main__":
    main()
