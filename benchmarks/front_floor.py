"""How much of the front's overhead any Python front would pay: the service against a bare ASGI front, both over one
tritonserver, each protein sent to both and straight to Triton in turn.

The bare front is what the least a Python HTTP front in front of Triton does for POST /embed: uvicorn with uvloop and
httptools (as BentoML runs them), JSON in, the same tokenizer and length buckets, one call through the client the
service's runner calls Triton with (tritonclient's asyncio HTTP client, uncompressed), JSON out; no validation, error shape, admission, metrics, access log or BentoML. The
median of paired latencies, front − direct Triton, of each front is its overhead; the bare front's is the floor that
no work on the service's own code can go under, on the CPU it runs on.

    python -m benchmarks.front_floor --probe 400 --residues 28 270
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys

import numpy as np
import tritonclient.http.aio as triton_http
from starlette.types import ASGIApp, Receive, Scope, Send

from benchmarks.clients import TRITON_DATATYPES, Embedder, HttpJsonEmbedder, triton_address
from benchmarks.contenders import CONTENDERS
from benchmarks.contenders.this_service import SERVICE, tritonserver_url
from benchmarks.measure import probe
from benchmarks.processes import Server, start, stop
from benchmarks.report import machine_facts
from benchmarks.run import servers_up, torch_answers, warm_up
from benchmarks.workload import MODEL, protein
from model_catalog import MODELS
from preprocessing import tokenizer_for
from preprocessing.batching import bucketed_chunks
from serving.triton.inference import UNCOMPRESSED

JSON_HEADERS = [(b"content-type", b"application/json")]


def bare_front(triton: str) -> ASGIApp:
    """POST /embed {"sequences": [...]} -> {"embeddings": [[...], ...]}, nothing else checked or counted."""
    tokenizer = tokenizer_for(MODELS[MODEL])
    max_batch_size = MODELS[MODEL].batching.max_batch_size
    clients: list[triton_http.InferenceServerClient] = []  # made in the server's event loop, at the first call

    async def embed_chunk(rows: list[np.ndarray], width: int) -> np.ndarray:
        if not clients:
            clients.append(triton_http.InferenceServerClient(triton))
        inputs = []
        for name, array in tokenizer.pad(rows, width).model_inputs().items():
            tensor = triton_http.InferInput(name, list(array.shape), TRITON_DATATYPES[name])
            tensor.set_data_from_numpy(array, binary_data=True)
            inputs.append(tensor)
        output = triton_http.InferRequestedOutput("embeddings", binary_data=True)
        answer = await clients[0].infer(MODEL, inputs, model_version="1", outputs=[output], headers=UNCOMPRESSED)
        return answer.as_numpy("embeddings")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"] != "/embed":  # the readiness probe's path and any other: 200, empty
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        rows = [tokenizer.encode(sequence) for sequence in json.loads(body)["sequences"]]
        chunks = bucketed_chunks([len(row) for row in rows], tokenizer.max_model_tokens, max_batch_size)
        answers = await asyncio.gather(*(embed_chunk([rows[i] for i in members], width) for width, members in chunks))
        vectors: list[list[float]] = [[]] * len(rows)
        for (_, members), answer in zip(chunks, answers):
            for index, vector in zip(members, answer.tolist()):
                vectors[index] = vector
        payload = json.dumps({"embeddings": vectors}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": JSON_HEADERS})
        await send({"type": "http.response.body", "body": payload})

    return app


def paired_rows(
    clients: dict[str, Embedder], pairs: list[tuple[str, str]], lengths: list[int], count: int
) -> list[str]:
    """For each protein length, `count` proteins each sent to every client in turn (`measure.probe`): a table row of
    the median of the paired latency differences, a − b, of each pair (ms), and the largest |answer − torch|."""
    rng = random.Random(0)
    rows = []
    for residues in lengths:
        sequences = [protein(rng, residues) for _ in range(count)]
        probed = probe(clients, sequences, torch_answers(sequences))
        latencies = {name: np.array(result.latencies_ms) for name, result in probed.items()}
        paired = [np.median(latencies[a] - latencies[b]) for a, b in pairs]
        worst = max(result.max_abs_difference for result in probed.values())
        rows.append(f"| {residues} | " + " | ".join(f"{ms:.2f}" for ms in paired) + f" | {worst:.1e} |")
    return rows


def bare_server(triton: str) -> Server:
    return Server(
        "bare-front",
        lambda port: [sys.executable, "-m", "benchmarks.front_floor", "--serve", str(port), "--triton", triton],
        "/readyz",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", type=int, default=400, help="proteins of each length, each to every client")
    parser.add_argument("--residues", type=int, nargs="+", default=[28, 270], help="protein lengths probed")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the bare front itself, on this port
    parser.add_argument("--triton", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        import uvicorn

        uvicorn.run(bare_front(args.triton), host="127.0.0.1", port=args.serve, loop="uvloop", http="httptools",
                    log_level="warning", access_log=False)  # fmt: skip
        return 0

    contenders = [c for c in CONTENDERS if c.name in ("service", "direct-triton")]  # one server: the service's
    with servers_up(contenders, "beside a bare front") as (running, clients):
        bare = start(bare_server(triton_address(tritonserver_url(running[SERVICE]))))
        clients["bare"] = HttpJsonEmbedder(bare.url)
        try:
            warm_up({"bare": clients["bare"]})
            print(f"{machine_facts()['cpu']}; {args.probe} proteins of each length, each to every client in turn\n")
            print("| residues | service − direct (ms) | bare front − direct (ms) | service − bare front (ms) | "
                  "largest |answer − torch| |")
            print("|---:|---:|---:|---:|---:|")
            pairs = [("service", "direct-triton"), ("bare", "direct-triton"), ("service", "bare")]
            print("\n".join(paired_rows(clients, pairs, args.residues, args.probe)))
        finally:
            stop(bare)  # its client is closed with the others, on the way out of servers_up
    return 0


if __name__ == "__main__":
    sys.exit(main())
