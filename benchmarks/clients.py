"""One blocking client per kind of contender: `embed(sequences)` returns the [batch, hidden] embeddings.

The locustfile's users time these (Triton kinds) or post the same JSON
(HTTP kinds); the driver uses them to warm each contender up, to check its
answers against torch, and for the sequential one-sequence probe.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, fields
from typing import Protocol

import grpc
import numpy as np
import tritonclient.http as triton_http
from geventhttpclient import HTTPClient
from google.protobuf import json_format, struct_pb2

from benchmarks.workload import MODEL, EmbedRequest
from bionemo_serving.model_catalog import MODELS, GraphRole
from bionemo_serving.preprocessing import tokenizer_for
from bionemo_serving.preprocessing.batching import bucketed_chunks

PYTRITON_MODEL = "esm2nv_pytriton"
"""Contender 4's Triton model: `sequences` BYTES [batch, 1] in, `embeddings` FP32 [batch, hidden] out."""
PYTRITON_INPUT = "sequences"
PYTRITON_OUTPUT = "embeddings"
JSON_HEADERS = {"content-type": "application/json"}
ENCODER = MODELS[MODEL].graph(GraphRole.ENCODER)
TRITON_DATATYPES = {spec.name: spec.data_type.removeprefix("TYPE_") for spec in ENCODER.inputs}
TRITON_OUTPUT = "embeddings"


class Embedder(Protocol):
    def embed(self, sequences: list[str]) -> np.ndarray: ...

    def close(self) -> None:
        """Close the kept-alive connection: tritonserver waits up to 30 s for open ones when it stops."""


def triton_address(url: str) -> str:
    """tritonclient wants host:port, without the scheme locust's --host carries."""
    return url.split("://", 1)[-1].rstrip("/")


class HttpJsonEmbedder:
    """POST /embed with the service's JSON (contenders 1, 3 and 5); a bare list answer is BentoML's batchable API.

    Over geventhttpclient, the HTTP client of the direct-Triton contender (tritonclient) and of the load
    (locust's FastHttpUser), so the probe's paired difference is the server's: `requests` spends 0.6 ms
    more of the client's own time per call.
    """

    def __init__(self, url: str) -> None:
        self.client = HTTPClient.from_url(url, concurrency=1, network_timeout=300)

    def embed(self, sequences: list[str]) -> np.ndarray:
        response = self.client.post("/embed", body=json.dumps(EmbedRequest(sequences).body), headers=JSON_HEADERS)
        content = response.read()
        if response.status_code != 200:
            raise RuntimeError(f"/embed answered {response.status_code}: {content[:500]!r}")
        body = json.loads(content)
        return np.asarray(body["embeddings"] if isinstance(body, dict) else body, dtype=np.float32)

    def close(self) -> None:
        self.client.close()


class OpenAIEmbedder(HttpJsonEmbedder):
    """POST /v1/embeddings, the service's OpenAI dialect, base64 as OpenAI's client asks for it."""

    def embed(self, sequences: list[str]) -> np.ndarray:
        body = json.dumps(EmbedRequest(sequences).openai_body)
        response = self.client.post("/v1/embeddings", body=body, headers=JSON_HEADERS)
        content = response.read()
        if response.status_code != 200:
            raise RuntimeError(f"/v1/embeddings answered {response.status_code}: {content[:500]!r}")
        data = json.loads(content)["data"]
        return np.stack([np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4") for item in data])


class GrpcEmbedder:
    """The service's gRPC front: BentoService/Call of `embed` with the same JSON as a protobuf Value, as BentoML's
    gRPC client sends it."""

    def __init__(self, url: str) -> None:
        # The stubs first, unsorted: BentoML's own import google.protobuf.service, which protobuf 6 no longer has.
        import bionemo_serving.fronts.bentoml.grpc_stubs  # noqa: F401, I001  (BentoML's stubs for the protobuf installed)
        from bentoml.grpc.v1 import service_pb2, service_pb2_grpc

        self.messages = service_pb2
        # Each client its own connection, as each HTTP user has: grpcio otherwise shares one among all channels to an
        # address, and with it every user's call would go to one API worker of the two.
        self.channel = grpc.insecure_channel(triton_address(url), options=[("grpc.use_local_subchannel_pool", 1)])
        self.call = service_pb2_grpc.BentoServiceStub(self.channel).Call

    def embed(self, sequences: list[str]) -> np.ndarray:
        body = json_format.ParseDict(EmbedRequest(sequences).body, struct_pb2.Value())
        answer = self.call(self.messages.Request(api_name="embed", json=body), timeout=300)
        # the numbers read where they lie: json_format.MessageToDict would take 5 ms of this machine's CPU per answer
        rows = answer.json.struct_value.fields["embeddings"].list_value.values
        return np.array([[number.number_value for number in row.list_value.values] for row in rows], dtype=np.float32)

    def close(self) -> None:
        self.channel.close()


class TritonEmbedder:
    """Contender 2: the service's work without the service. Tokenize here, infer on Triton's esm2nv, which pools.

    The same tokenizer (`preprocessing`), the same chunks of one length bucket
    each (sent concurrently when there are several), the same tensors (binary) as the service
    (`bionemo_serving/engine/encoding.py`), so the difference to contender 1 is the BentoML
    front: HTTP/JSON, validation, the runner hop.
    """

    def __init__(self, url: str) -> None:
        self.client = triton_http.InferenceServerClient(triton_address(url), network_timeout=300, concurrency=8)
        self.tokenizer = tokenizer_for(MODELS[MODEL])

    def embed(self, sequences: list[str]) -> np.ndarray:
        rows = [self.tokenizer.encode(sequence) for sequence in sequences]
        lengths = [len(row) for row in rows]
        chunks = bucketed_chunks(lengths, self.tokenizer.max_model_tokens, MODELS[MODEL].batching.max_batch_size)
        calls = [(members, self._inputs([rows[i] for i in members], width)) for width, members in chunks]
        output = [triton_http.InferRequestedOutput(TRITON_OUTPUT, binary_data=True)]
        if len(calls) == 1:  # async_infer's gevent pool adds milliseconds, which a floor must not carry
            answers = [self.client.infer(MODEL, calls[0][1], outputs=output)]
        else:
            pending = [self.client.async_infer(MODEL, inputs, outputs=output) for _, inputs in calls]
            answers = [call.get_result() for call in pending]
        embeddings: list[np.ndarray] = [np.empty(0)] * len(rows)
        for (members, _), answer in zip(calls, answers):
            for index, vector in zip(members, answer.as_numpy(TRITON_OUTPUT)):
                embeddings[index] = vector
        return np.stack(embeddings)

    def _inputs(self, rows: list[np.ndarray], width: int) -> list[triton_http.InferInput]:
        inputs = []
        for name, array in self.tokenizer.pad(rows, width).model_inputs().items():
            tensor = triton_http.InferInput(name, list(array.shape), TRITON_DATATYPES[name])
            tensor.set_data_from_numpy(array, binary_data=True)
            inputs.append(tensor)
        return inputs

    def close(self) -> None:
        self.client.close()


class PyTritonEmbedder:
    """Contender 4's client: the sequences as UTF-8 bytes, one row each, as BioNeMo's `encode_str_batch` sent them."""

    def __init__(self, url: str) -> None:
        self.client = triton_http.InferenceServerClient(triton_address(url), network_timeout=300)

    def embed(self, sequences: list[str]) -> np.ndarray:
        rows = np.array([[sequence.encode()] for sequence in sequences], dtype=np.object_)
        tensor = triton_http.InferInput(PYTRITON_INPUT, list(rows.shape), "BYTES")
        tensor.set_data_from_numpy(rows, binary_data=True)
        output = triton_http.InferRequestedOutput(PYTRITON_OUTPUT, binary_data=True)
        return self.client.infer(PYTRITON_MODEL, [tensor], outputs=[output]).as_numpy(PYTRITON_OUTPUT)

    def close(self) -> None:
        self.client.close()


@dataclass(frozen=True)
class TritonTotals:
    """A model's cumulative statistics in Triton (every served version); subtract two to cover a run."""

    inferences: int
    """Rows inferred (batch elements)."""
    executions: int
    """Model executions: batches the dynamic batcher formed."""
    requests: int
    queue_ns: int
    compute_ns: int
    """Time in the model's execute, summed per request."""
    output_ns: int
    """Time spent producing the responses' outputs (and compressing them, where the client accepts gzip)."""

    def __sub__(self, other: TritonTotals) -> TritonTotals:
        return TritonTotals(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))

    def __add__(self, other: TritonTotals) -> TritonTotals:
        return TritonTotals(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


def triton_totals(url: str, model: str) -> TritonTotals:
    with triton_http.InferenceServerClient(triton_address(url)) as client:
        versions = client.get_inference_statistics(model)["model_stats"]
    return TritonTotals(
        inferences=sum(int(v["inference_count"]) for v in versions),
        executions=sum(int(v["execution_count"]) for v in versions),
        requests=sum(int(v["inference_stats"]["success"]["count"]) for v in versions),
        queue_ns=sum(int(v["inference_stats"]["queue"]["ns"]) for v in versions),
        compute_ns=sum(int(v["inference_stats"]["compute_infer"]["ns"]) for v in versions),
        output_ns=sum(int(v["inference_stats"]["compute_output"]["ns"]) for v in versions),
    )
