"""Contender 3: the server a user would write first. transformers in torch eager behind `http.server`, one request
at a time.

    python -m benchmarks.contenders.naive_http --port 8080

Same request and answer JSON as the service's /embed (esm2nv) and greedy
/generate (megamolbart, one transformers `generate` call per request); no
batching across requests, no queue: the next request waits in the listen backlog.
"""

from __future__ import annotations

import argparse
import json
from http.server import BaseHTTPRequestHandler, HTTPServer

from benchmarks.torch_esm import TorchEmbedder
from benchmarks.torch_megamolbart import TorchGenerator
from benchmarks.workload import MODEL
from bionemo_serving.engine.inputs import DecodingMethod
from bionemo_serving.fronts.native.protocol import GenerateRequest


class Handler(BaseHTTPRequestHandler):
    """HTTP/1.0, one connection per request: with keep-alive one client would hold the only thread."""

    def do_GET(self) -> None:
        if self.path == "/readyz":
            self.answer(200, {"ready": True})
        else:
            self.answer(404, {"error": "not found"})

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/generate":
            self.generate(GenerateRequest(**request))
        elif self.path == "/embed":
            self.embed(request)
        else:
            self.answer(404, {"error": "not found"})

    def generate(self, request: GenerateRequest) -> None:
        if request.method is not DecodingMethod.GREEDY:
            self.answer(422, {"error": "only greedy decoding is served"})
            return
        self.answer(200, self.server.generator.generate(request))

    def embed(self, request: dict[str, object]) -> None:
        if request.get("model", MODEL) != MODEL:
            self.answer(422, {"error": f"only {MODEL} is served"})
            return
        vectors = self.server.embedder.embed(request["sequences"])
        self.answer(200, {"model": MODEL, "model_version": 1, "dim": vectors.shape[1], "embeddings": vectors.tolist()})

    def answer(self, status: int, body: dict[str, object]) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        """No line per request: logging is not what is measured."""


class OneAtATimeServer(HTTPServer):
    # A backlog for every user of the sweep (http.server's default is 5): waiting users queue instead of having
    # their SYNs dropped, so a run measures one-at-a-time inference, not TCP retransmission timers.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], embedder: TorchEmbedder, generator: TorchGenerator) -> None:
        super().__init__(address, Handler)
        self.embedder = embedder
        self.generator = generator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    OneAtATimeServer((args.host, args.port), TorchEmbedder(), TorchGenerator()).serve_forever()


if __name__ == "__main__":
    main()
