"""A stand-in for the service's HTTP API, for the client's own tests (the real service is tests/e2e/test_client_e2e.py's,
in the server's environment): /models, and /embed answering a vector computed from each sequence, refusing a
sequence with a `J` by name, and a first few requests with the status the test asks for."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

DIM = 8


def vector(sequence: str) -> np.ndarray:
    """What the stand-in answers for `sequence`: a function of its letters alone."""
    codes = np.frombuffer(sequence.encode(), np.uint8).astype(np.float32)
    return np.asarray([codes.mean() + i * len(sequence) for i in range(DIM)], np.float32)


@dataclass
class StandIn:
    url: str = ""
    refuse_first: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    """(status, headers) answered to the next requests, one each, before any is answered."""
    bodies: list[dict] = field(default_factory=list)
    client_ids: list[str | None] = field(default_factory=list)
    """Each POST's X-Client-Id."""
    fail_after: int | None = None
    """Answer 500 to every request after this many."""
    delay: float = 0.0
    """Seconds each /embed takes."""
    max_sequences: int | None = None
    """The limit GET /models publishes, and a request over it refused (422): none where None, as an older service."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def _handler(stand_in: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def _answer(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client was killed: the test does that
                pass

        def do_GET(self) -> None:
            models = [{"name": "esm2nv", "tokenizer": "esm"}, {"name": "megamolbart", "tokenizer": "smiles"}]
            limits = {} if stand_in.max_sequences is None else {"limits": {"max_sequences": stand_in.max_sequences}}
            self._answer(200, {"models": models, **limits})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            with stand_in.lock:
                stand_in.bodies.append(body)
                stand_in.client_ids.append(self.headers.get("X-Client-Id"))
                refusal = stand_in.refuse_first.pop(0) if stand_in.refuse_first else None
                broken = stand_in.fail_after is not None and len(stand_in.bodies) > stand_in.fail_after
            time.sleep(stand_in.delay)
            if broken:
                return self._answer(500, {"error": {"type": "internal", "message": "broken", "details": []}})
            if refusal:
                status, headers = refusal
                return self._answer(status, {"error": {"type": "overloaded", "message": "busy", "details": []}}, headers)
            if stand_in.max_sequences is not None and len(body["sequences"]) > stand_in.max_sequences:
                problem = {"field": "sequences", "message": f"at most {stand_in.max_sequences} in one request"}
                return self._answer(422, {"error": {"type": "invalid_request", "message": "no", "details": [problem]}})
            if body.get("model") != "esm2nv":
                problem = {"field": "model", "message": "not served"}
                return self._answer(422, {"error": {"type": "unknown_model", "message": "no", "details": [problem]}})
            bad = [{"field": f"sequences[{i}]", "message": "'J' is not an amino acid"}
                   for i, sequence in enumerate(body["sequences"]) if "J" in sequence]  # fmt: skip
            if bad:
                return self._answer(422, {"error": {"type": "invalid_request", "message": "bad", "details": bad}})
            vectors = [base64.b64encode(vector(sequence).astype("<f4").tobytes()).decode() for sequence in body["sequences"]]
            self._answer(200, {"embeddings": vectors, "dim": DIM})

    return Handler


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    served = StandIn()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(served))
    served.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served
    server.shutdown()
    server.server_close()
