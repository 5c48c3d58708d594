"""The service's Prometheus metrics, and Triton's merged into the same GET /metrics.

Every family of the service is defined here and recorded where the value is
known: requests, statuses and latency where endpoints are registered
(bionemo_serving/fronts/bentoml/endpoints.py), sequences, tokens and padding per graph in the engine's graph calls,
rows per decoder step in the decode batcher, requests in flight in admission,
Triton look-ups in the model registry. So every front over the engine (REST,
OpenAI's /v1, others) is counted the same way.

BentoML answers GET /metrics from prometheus_client's multiprocess registry:
each API worker writes its values to files under PROMETHEUS_MULTIPROC_DIR,
set before the worker imports service.py, and a scrape adds them up over the
workers. Triton's own families are appended to that answer by
bionemo_serving/fronts/bentoml/triton_metrics.py.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from bionemo_serving.model_catalog import MODELS
from bionemo_serving.errors import ERROR_TYPES, ServiceError, http_status

REQUESTS = Counter(
    "bionemo_requests", "Requests answered, by endpoint, model and status class (2xx, 4xx, 5xx)",
    ["endpoint", "model", "status_class"],
)  # fmt: skip
REQUEST_ERRORS = Counter(
    "bionemo_request_errors",
    "Requests answered with an error, by status and the error's type (overloaded, deadline_exceeded, payload_too_large "
    "are the admission's rejections)",
    ["endpoint", "model", "status", "error"],
)
REQUEST_DURATION = Histogram(
    "bionemo_request_duration_seconds",
    "Seconds from the parsed request to its answer (admission, tokenizing, Triton, decoding), by endpoint and model",
    ["endpoint", "model"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0),
)
IN_FLIGHT = Gauge(
    "bionemo_in_flight_requests", "Requests admitted and not yet answered, over the API workers", multiprocess_mode="livesum"
)
QUEUED = Gauge(
    "bionemo_queued_requests",
    "Engine calls admitted and waiting for their turn to run (engine/scheduler.py), over the API workers",
    multiprocess_mode="livesum",
)
GRAPH_SEQUENCES = Histogram(
    "bionemo_graph_request_sequences",
    "Sequences (or SMILES) one request sends to a graph of token rows (encoder, language_model, contacts, layers)",
    ["model", "graph"], buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)  # fmt: skip
GRAPH_TOKENS = Histogram(
    "bionemo_graph_request_tokens", "Tokens one request's sequences make, special tokens included, padding not",
    ["model", "graph"], buckets=(16, 64, 256, 1024, 4096, 16384, 65536),
)  # fmt: skip
GRAPH_BATCH_TOKENS = Counter(
    "bionemo_graph_batch_tokens", "Token positions sent to a graph of token rows, padding included", ["model", "graph"]
)
GRAPH_PADDING_TOKENS = Counter(
    "bionemo_graph_padding_tokens", "Padding positions among those sent to a graph of token rows", ["model", "graph"]
)
DECODER_STEP_ROWS = Histogram(
    "bionemo_decoder_step_rows", "Rows (samples and beams of every request in flight) in one decoder step", ["model"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
)  # fmt: skip
MODEL_DISCOVERIES = Counter(
    "bionemo_model_discoveries", "Look-ups of the models Triton serves (at start, after a failed call, for GET /models)"
)



def model_label(parsed: Any, default: str) -> str:
    """The catalogued model a request names (its `model` field), else `default`: never a client's free text."""
    name = getattr(parsed, "model", None)  # a DataFrame's is its column `model`, where it has one: not a name
    return name if isinstance(name, str) and name in MODELS else default


# The series of each label set, looked up once per worker: `labels()` costs ~2.5 us a call (a lock, a dict, its checks).
_requests = functools.cache(REQUESTS.labels)
_durations = functools.cache(REQUEST_DURATION.labels)
_graph_series = functools.cache(
    lambda model, graph: (
        GRAPH_SEQUENCES.labels(model, graph), GRAPH_TOKENS.labels(model, graph),
        GRAPH_BATCH_TOKENS.labels(model, graph), GRAPH_PADDING_TOKENS.labels(model, graph),
    )
)  # fmt: skip


def record_request(endpoint: str, model: str, failure: Exception | None, seconds: float) -> None:
    """One answered request and how long it took: a success without `failure`; a `ServiceError` has its status, any
    other exception is a bug, answered 500."""
    if failure is None:
        status, error = 200, None
    elif isinstance(failure, ServiceError):
        status, error = http_status(failure), ERROR_TYPES[type(failure)]
    else:
        status, error = 500, "internal"
    _requests(endpoint, model, f"{status // 100}xx").inc()
    if error is not None:
        REQUEST_ERRORS.labels(endpoint, model, str(status), error).inc()
    _durations(endpoint, model).observe(seconds)


@contextlib.contextmanager
def counted(endpoint: str, model: str) -> Iterator[None]:
    """Record the request answered inside: a success, or the exception it ends with (a `ServiceError`'s status, any
    other a 500); a cancelled one answered nobody and is not counted."""
    started = time.perf_counter()
    try:
        yield
    except Exception as failure:
        record_request(endpoint, model, failure, time.perf_counter() - started)
        raise
    record_request(endpoint, model, None, time.perf_counter() - started)


def record_token_rows(model: str, graph: str, tokens_per_row: list[int], positions_sent: int) -> None:
    """One request's rows for `model`'s `graph` (its role: encoder, language_model, ...): their real tokens, and the
    positions sent with the buckets' padding."""
    tokens = sum(tokens_per_row)
    sequences, tokens_per_request, positions, padding = _graph_series(model, graph)
    sequences.observe(len(tokens_per_row))
    tokens_per_request.observe(tokens)
    positions.inc(positions_sent)
    padding.inc(positions_sent - tokens)
