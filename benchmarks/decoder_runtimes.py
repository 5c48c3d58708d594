"""Which runtime of MegaMolBART's decoder serves the most /generate requests a second end to end, and how close the
runtime timings' own pick comes (issue 27: timings of a few shapes in a fresh process picked a runtime that served
fewer requests than another).

    python -m benchmarks.decoder_runtimes [--seconds 40] [--users 16] [--rounds 2]

Contenders: the timings' pick (BIONEMO_RUNTIME unset), and each runtime the decoder is exported for and installed
here, forced on MegaMolBART (`megamolbart=<runtime>`: its encoder, run once a request, and its decoder, run once a
token). Each round starts the service once per contender, sends a few requests to warm it, then has `--users` threads
post /generate (workload.generate_body, as `make soak`'s users do) for `--seconds`, and stops it. Rounds alternate the
contenders, so a machine whose speed drifts meets each early and late. Prints requests/s per contender (the mean over
the rounds), the pick's runtimes, and the pick's rate over the best.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import threading
import time

import requests

from benchmarks import processes
from benchmarks.contenders.this_service import SERVICE
from benchmarks.workload import generate_body
from model_catalog import GraphRole
from runtimes.choice import available, cpu_model, graph_folders

MODEL = "megamolbart"
PICK = "the timings' pick"


def decoder_runtimes() -> list[str]:
    """The runtimes the default repository's decoder is exported for and this machine has."""
    folders = graph_folders(processes.ROOT / "model_repository", [MODEL])
    (decoder,) = [folder for folder in folders if folder.graph.role is GraphRole.DECODER]
    return [runtime.value for runtime in available(decoder.newest_version(), decoder.graph)[0]]


def requests_per_second(url: str, users: int, seconds: float) -> float:
    """/generate answered per second by `users` threads posting one request after another for `seconds`."""
    answered, failed = [0] * users, []
    deadline = time.monotonic() + seconds

    def user(index: int) -> None:
        rng = random.Random(index)
        while time.monotonic() < deadline:
            answer = requests.post(f"{url}/generate", json=generate_body(rng), timeout=120)
            if answer.status_code != 200:
                failed.append(answer.text)
            elif time.monotonic() <= deadline:
                answered[index] += 1

    threads = [threading.Thread(target=user, args=(index,)) for index in range(users)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failed:
        raise RuntimeError(f"{len(failed)} /generate requests failed, the first: {failed[0][:300]}")
    return sum(answered) / seconds


def served_runtimes(url: str) -> str:
    """The runtime of each of the model's graphs, as GET /models shows them."""
    (info,) = [model for model in requests.get(f"{url}/models", timeout=30).json()["models"] if model["name"] == MODEL]
    return ", ".join(f"{graph['triton_model']} {graph['runtime']}" for graph in info["runtimes"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    contenders = {PICK: {}} | {runtime: {"BIONEMO_RUNTIME": f"{MODEL}={runtime}"} for runtime in decoder_runtimes()}
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    picked = ""
    print(f"{cpu_model()}; /generate, {args.users} users, {args.seconds:g} s a contender, {args.rounds} rounds", flush=True)
    for round_index in range(args.rounds):
        order = list(contenders) if round_index % 2 == 0 else list(reversed(contenders))
        for name in order:
            forced = contenders[name]
            environment = lambda port, forced=forced: SERVICE.environment(port) | forced  # noqa: E731
            server = dataclasses.replace(SERVICE, environment=environment)
            running = processes.start(server)
            try:
                if name == PICK:
                    picked = served_runtimes(running.url)
                requests_per_second(running.url, args.users, 5)  # warm: every stub has run its shapes once
                rates[name].append(requests_per_second(running.url, args.users, args.seconds))
            finally:
                processes.stop(running)
            print(f"round {round_index + 1}: {name}: {rates[name][-1]:.2f} requests/s", flush=True)
    means = {name: sum(values) / len(values) for name, values in rates.items()}
    best = max((name for name in means if name != PICK), key=means.__getitem__)
    print(f"\n| {MODEL} | /generate requests/s (mean of {args.rounds}) |\n|---|---:|")
    for name, mean in means.items():
        label = f"{PICK} ({picked})" if name == PICK else f"{name}, forced"
        print(f"| {label} | {mean:.2f} |")
    ratio = means[PICK] / means[best]
    print(f"\nThe timings' pick serves {ratio:.2f}x the requests/s of the best forced runtime ({best}).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
