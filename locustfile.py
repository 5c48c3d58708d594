"""Load tests: /embed with protein lengths shaped like UniProt (most 100-500 residues, a tail to the limit).

Against a running service, as before (only `EmbedUser` runs when no user class is named):

    make serve                      # in one shell
    .venv/bin/pip install -e '.[bench]'
    .venv/bin/locust -f locustfile.py --headless -u 16 -r 16 -t 60s --host http://127.0.0.1:3000

Every user class is one kind of contender of `make bench` (benchmarks/run.py), named on the command line:
`EmbedUser` posts the service's /embed JSON (also the naive and BentoML-batching servers), `OpenAIEmbedUser`
the same requests to its /v1/embeddings, `TritonEmbedUser`
calls Triton's esm2nv directly (--host: the tritonserver), `GrpcEmbedUser` the service's gRPC front (--host: its
address), `PyTritonEmbedUser` the PyTriton server, and
`GenerateUser` posts /generate to the service, and `HeadsUser` the requests of the graphs beside ESM's encoder
(/logits, /score, /contacts, /embed with `layers`: the soak's third kind of load). Each user draws its requests
from its own fixed seed.
`--bench-results FILE` writes every request's start, latency, size and outcome as JSON when the run stops.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from typing import Any

from grpc.experimental import gevent as grpc_gevent
from locust import FastHttpUser, User, constant, events, task
from locust.env import Environment

from benchmarks.clients import Embedder, GrpcEmbedder, PyTritonEmbedder, TritonEmbedder
from benchmarks.workload import contacts_body, embed_request, generate_body, layers_body, logits_body, score_body

grpc_gevent.init_gevent()  # grpcio's blocking calls yield to locust's other users instead of holding them all up
_user_seeds = itertools.count()


class SeededUser(User):
    """A user whose requests come from its own seed (0, 1, 2, ... in start order), so runs repeat."""

    abstract = True
    wait_time = constant(0)

    def on_start(self) -> None:
        self.rng = random.Random(next(_user_seeds))


class EmbedUser(SeededUser, FastHttpUser):
    """The service's /embed JSON: 1-8 sequences per request."""

    @task
    def embed(self) -> None:
        request = embed_request(self.rng)
        self.client.post("/embed", json=request.body, name="/embed", context=request.context())


class OpenAIEmbedUser(SeededUser, FastHttpUser):
    """The same requests in OpenAI's embeddings API: POST /v1/embeddings, base64, as OpenAI's client sends them."""

    @task
    def embed(self) -> None:
        request = embed_request(self.rng)
        self.client.post("/v1/embeddings", json=request.openai_body, name="/v1/embeddings", context=request.context())


class TritonClientUser(SeededUser):
    """The same requests through a blocking `Embedder` (tritonclient, grpcio); locust is told each call's time and
    outcome."""

    abstract = True
    embedder_class: type[Embedder]

    def on_start(self) -> None:
        super().on_start()
        self.embedder = self.embedder_class(self.host)

    @task
    def embed(self) -> None:
        request = embed_request(self.rng)
        with self.environment.events.request.measure("triton", "esm2nv embed", context=request.context()):
            self.embedder.embed(request.sequences)


class TritonEmbedUser(TritonClientUser):
    embedder_class = TritonEmbedder


class PyTritonEmbedUser(TritonClientUser):
    embedder_class = PyTritonEmbedder


class GrpcEmbedUser(TritonClientUser):
    embedder_class = GrpcEmbedder


class GenerateUser(SeededUser, FastHttpUser):
    """/generate around one drug-like seed molecule, 1-4 samples (the hook for comparing generation)."""

    @task
    def generate(self) -> None:
        body = generate_body(self.rng)
        self.client.post("/generate", json=body, name="/generate", context={"samples": body["num_samples"]})


class HeadsUser(SeededUser, FastHttpUser):
    """The graphs beside ESM's encoder, each drawn as often: /logits of 1-8 proteins with residues masked, a
    masked-marginal /score of 1-8 variants of one protein, /contacts of 1-8 proteins, /embed of 1-4 `layers`."""

    @task
    def logits(self) -> None:
        self.client.post("/logits", json=logits_body(self.rng), name="/logits")

    @task
    def score(self) -> None:
        self.client.post("/score", json=score_body(self.rng), name="/score")

    @task
    def contacts(self) -> None:
        self.client.post("/contacts", json=contacts_body(self.rng), name="/contacts")

    @task
    def layers(self) -> None:
        self.client.post("/embed", json=layers_body(self.rng), name="/embed with layers")


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    parser.add_argument("--bench-results", default="", help="write each request's timing and size to this JSON file")


@events.init.add_listener
def _default_user(environment: Environment, **_: Any) -> None:
    """Without a user class on the command line, run `EmbedUser` alone, as this file always did by hand."""
    if environment.parsed_options is not None and not environment.parsed_options.user_classes:
        environment.user_classes[:] = [EmbedUser]


class _Recorder:
    """With --bench-results: every request of the run, for the driver's own percentiles (locust rounds its own)."""

    def __init__(self) -> None:
        self.path = ""
        self.started = 0.0
        self.requests: list[dict[str, Any]] = []

    def test_start(self, environment: Environment, **_: Any) -> None:
        self.path = environment.parsed_options.bench_results if environment.parsed_options else ""
        self.started = time.time()
        self.requests.clear()

    def request(self, start_time: float, response_time: float, context: dict, exception: Any, **_: Any) -> None:
        if self.path:
            self.requests.append({"start": start_time, "ms": response_time, "ok": exception is None, **context})

    def test_stop(self, **_: Any) -> None:
        if self.path:
            with open(self.path, "w") as file:
                json.dump({"started": self.started, "stopped": time.time(), "requests": self.requests}, file)


_recorder = _Recorder()
events.test_start.add_listener(_recorder.test_start)
events.request.add_listener(_recorder.request)
events.test_stop.add_listener(_recorder.test_stop)
