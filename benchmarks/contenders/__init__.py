"""The contenders `python -m benchmarks.run` measures, in order; all serve the same esm2nv weights.

Each server is one module here; a contender pairs a server with the locust
user class and the blocking client that drive it, and says where Triton's
statistics are (for the average batch Triton formed).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.clients import (
    PYTRITON_MODEL,
    Embedder,
    GrpcEmbedder,
    HttpJsonEmbedder,
    OpenAIEmbedder,
    PyTritonEmbedder,
    TritonEmbedder,
)
from benchmarks.contenders.this_service import SERVICE, SERVICE_GRPC, tritonserver_url
from benchmarks.processes import Running, Server
from benchmarks.workload import MODEL


def own_url(running: Running) -> str:
    return running.url


@dataclass(frozen=True)
class Contender:
    name: str
    title: str
    server: Server
    user_class: str
    """The locustfile's user class that sends its traffic."""
    url: Callable[[Running], str] = own_url
    """Where its clients connect (locust's --host)."""
    client: Callable[[str], Embedder] | None = HttpJsonEmbedder
    """The blocking client for warm-up, the torch check and the sequential probe; None: not an /embed contender."""
    triton_url: Callable[[Running], str] | None = None
    """The Triton server whose statistics give the average batch it formed for `triton_model`; None: no Triton."""
    triton_model: str = MODEL
    workload: str = "embed"
    """`embed` (/embed traffic) or `generate` (/generate traffic)."""
    api_workers: bool = False
    """Count the CPU time of its server's BentoML API workers in each point's window (benchmarks.worker_cpu): the
    service's fronts, whose requests go through them, and direct-triton, whose requests bypass the same workers
    (what they spend meanwhile is their background)."""


NAIVE = Server(
    "naive", lambda port: [sys.executable, "-m", "benchmarks.contenders.naive_http", "--port", str(port)], "/readyz"
)
PYTRITON = Server(
    "pytriton",
    lambda port: [sys.executable, "-m", "benchmarks.contenders.pytriton_server", "--port", str(port)],
    f"/v2/models/{PYTRITON_MODEL}/ready",
)
BENTOML = Server(
    "bentoml",
    lambda port: [sys.executable, "-m", "bentoml", "serve", "benchmarks.contenders.bentoml_batching:Esm2Embedder",
                  "--host", "127.0.0.1", "--port", str(port)],
    "/readyz",
)  # fmt: skip

# In this order in each alternation (benchmarks.run): A B C ... A B C.
CONTENDERS = (
    Contender("service", "this service: BentoML front, Triton python backend, the runtime timed fastest on this CPU",
              SERVICE, "EmbedUser", triton_url=tritonserver_url, api_workers=True),
    Contender("service-openai", "this service's OpenAI dialect: the same requests to /v1/embeddings, base64", SERVICE,
              "OpenAIEmbedUser", client=OpenAIEmbedder, triton_url=tritonserver_url, api_workers=True),
    Contender("direct-triton", "the same Triton model via tritonclient, tokenized and pooled client-side", SERVICE,
              "TritonEmbedUser", url=tritonserver_url, client=TritonEmbedder, triton_url=tritonserver_url,
              api_workers=True),
    Contender("service-generate", "this service's /generate (MegaMolBART, greedy, at most 128 steps)", SERVICE,
              "GenerateUser", client=None, workload="generate"),
    Contender("service-grpc", "this service's gRPC front (serve-grpc): the same requests to BentoService/Call `embed`",
              SERVICE_GRPC, "GrpcEmbedUser", client=GrpcEmbedder, triton_url=tritonserver_url, api_workers=True),
    Contender("naive", "torch eager behind http.server, one request at a time", NAIVE, "EmbedUser"),
    Contender("naive-generate", "transformers' generate (greedy, key-value cache) per request behind http.server, one at "
              "a time", NAIVE, "GenerateUser", client=None, workload="generate"),
    Contender("pytriton", "BioNeMo 1.x style: PyTriton @batch around torch eager", PYTRITON, "PyTritonEmbedUser",
              client=PyTritonEmbedder, triton_url=own_url, triton_model=PYTRITON_MODEL),
    Contender("bentoml-batching", "BentoML adaptive batching (batchable API) around torch eager, no Triton", BENTOML,
              "EmbedUser"),
)  # fmt: skip
