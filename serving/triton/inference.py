"""Triton's inference call on the request path: KServe v2 over keep-alive HTTP/1.1 connections, tensors as binary.

The Triton runner starts and supervises tritonserver, and answers everything else
(discovery, model configs, load and unload) with its tritonclient client. Only
`infer`, the call every request makes, goes through this client instead:
side by side on sequential esm2nv calls, tritonclient's aiohttp client took 1.0 ms
of CPU and 19.1-19.4 ms per call, this one 0.3-0.4 ms and 16.4-17.4 ms (README,
"Load test and latency"). Same wire protocol, same address, same errors: Triton's
error answers raise tritonclient's InferenceServerException, a lost connection
ConnectionError.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

HEADER_END = b"\r\n\r\n"


class TritonConnection(asyncio.Protocol):
    """One keep-alive connection to tritonserver, one exchange at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.answer_began = False
        self._buffer = bytearray()
        self._answer: asyncio.Future[tuple[int, dict[str, str], memoryview]] | None = None
        self._head_length = 0
        self._total_length: int | None = None
        self._headers: dict[str, str] = {}
        self._status = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's TCP transport, not asyncio's class

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(ConnectionResetError(f"tritonserver closed the connection ({exc or 'EOF'})"))

    def data_received(self, data: bytes) -> None:
        if self._answer is None or self._answer.done():
            self.close()  # bytes no exchange waits for: what this connection carries next is unknown
            return
        self.answer_began = True
        self._buffer += data
        if self._total_length is None:
            try:
                if not self._read_head():
                    return
            except ConnectionError as error:
                self.close()
                self._answer.set_exception(error)
                return
        assert self._total_length is not None
        if len(self._buffer) >= self._total_length:
            body = memoryview(self._buffer)[self._head_length : self._total_length]
            self._answer.set_result((self._status, self._headers, body))

    def _read_head(self) -> bool:
        """Status and headers, once they are all in; False until then. Triton answers with a Content-Length."""
        end = self._buffer.find(HEADER_END)
        if end < 0:
            return False
        status_line, *lines = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
        self._status = int(status_line.split(" ", 2)[1])
        self._headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            self._headers[name.strip().lower()] = value.strip()
        if "content-length" not in self._headers:
            raise ConnectionError(f"tritonserver answered without a Content-Length: {status_line}")
        self._head_length = end + len(HEADER_END)
        self._total_length = self._head_length + int(self._headers["content-length"])
        return True

    async def exchange(self, request: Sequence[bytes | memoryview]) -> tuple[int, dict[str, str], memoryview]:
        """Send one request and wait for its whole answer: status, lower-cased headers, body (a view of a buffer
        that is this answer's alone: the next exchange starts a new one)."""
        assert self.transport is not None
        if self.lost or self.transport.is_closing():
            raise ConnectionResetError("tritonserver closed the connection")
        self._buffer, self._total_length, self.answer_began = bytearray(), None, False
        self._answer = asyncio.get_running_loop().create_future()
        self.transport.writelines(request)
        return await self._answer

    @property
    def reusable(self) -> bool:
        return not self.lost and self._headers.get("connection", "").lower() != "close"

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()


class TritonInferClient:
    """Inference calls to one tritonserver over a pool of keep-alive connections, one per call in flight."""

    def __init__(self, address: Callable[[], str]) -> None:
        """`address` gives `host:port` once the server is known: the runner's address is set in each API worker."""
        self._find_address = address
        self._idle: list[TritonConnection] = []

    @functools.cached_property
    def _address(self) -> str:
        """Asked once, at the first call: a worker's runner address does not change."""
        return self._find_address()

    @classmethod
    def of_runner(cls, runner: Any) -> TritonInferClient:
        """A client of the tritonserver that `runner` (bentoml.triton.Runner) started: the address BentoML hands
        each API worker, which the runner's own client reads too."""
        from bentoml._internal.configuration.containers import BentoMLContainer

        return cls(lambda: BentoMLContainer.remote_runner_mapping.get()[runner.name])

    async def infer(
        self, model: str, version: int, inputs: Sequence[tuple[str, str, np.ndarray]], output: str
    ) -> np.ndarray:
        """Run `model` at `version` on `inputs` (name, Triton datatype, array) and return its `output`."""
        request = self._request(model, version, inputs, output)
        while True:
            while self._idle and self._idle[-1].lost:
                self._idle.pop()
            reused = bool(self._idle)
            connection = self._idle.pop() if reused else await self._connect()
            try:
                status, headers, body = await connection.exchange(request)
            except ConnectionError:
                connection.close()
                if reused and not connection.answer_began:
                    continue  # closed while idle, before this request reached Triton: try a connection that is open
                raise
            except BaseException:  # cancelled (the request's deadline) mid-exchange: the connection's state is unknown
                connection.close()
                raise
            if connection.reusable:
                self._idle.append(connection)
            else:
                connection.close()
            return self._output(status, headers, body, output)

    def close(self) -> None:
        """Close the idle connections: tritonserver, told to stop, waits for every open HTTP connection (up to its
        exit timeout), so a client that outlives its use (a test's) must not leave one open. An API worker's
        connections close as the worker exits."""
        while self._idle:
            self._idle.pop().close()

    async def _connect(self) -> TritonConnection:
        host, _, port = self._address.rpartition(":")
        _, connection = await asyncio.get_running_loop().create_connection(TritonConnection, host, int(port))
        return connection

    def _request(
        self, model: str, version: int, inputs: Sequence[tuple[str, str, np.ndarray]], output: str
    ) -> list[bytes | memoryview]:
        tensors = [memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8)) for _, _, array in inputs]
        header = json.dumps(
            {
                "inputs": [
                    {"name": name, "shape": list(array.shape), "datatype": datatype,
                     "parameters": {"binary_data_size": tensor.nbytes}}
                    for (name, datatype, array), tensor in zip(inputs, tensors)
                ],
                "outputs": [{"name": output, "parameters": {"binary_data": True}}],
            },
            separators=(",", ":"),
        ).encode()
        length = len(header) + sum(tensor.nbytes for tensor in tensors)
        head = (
            f"POST /v2/models/{model}/versions/{version}/infer HTTP/1.1\r\n"
            f"Host: {self._address}\r\n"
            "Content-Type: application/octet-stream\r\n"
            f"Inference-Header-Content-Length: {len(header)}\r\n"
            f"Content-Length: {length}\r\n\r\n"
        ).encode("latin-1")
        return [head, header, *tensors]

    @staticmethod
    def _output(status: int, headers: dict[str, str], body: memoryview, output: str) -> np.ndarray:
        """The named output of a 200 answer; Triton's error answer as InferenceServerException otherwise."""
        if status != 200:
            try:
                message = json.loads(bytes(body))["error"]
            except (ValueError, KeyError, TypeError):
                message = bytes(body).decode("utf-8", "replace") or f"HTTP {status}"
            raise InferenceServerException(msg=message, status=str(status))
        header_length = int(headers.get("inference-header-content-length", len(body)))
        described = json.loads(bytes(body[:header_length]))
        offset = header_length
        for tensor in described["outputs"]:
            dtype = np.dtype(triton_to_np_dtype(tensor["datatype"]))
            size = tensor.get("parameters", {}).get("binary_data_size")
            if tensor["name"] == output:
                if size is None:  # answered in the JSON header
                    return np.asarray(tensor["data"], dtype=dtype).reshape(tensor["shape"])
                return np.frombuffer(body[offset : offset + size], dtype=dtype).reshape(tensor["shape"])
            offset += size or 0
        raise InferenceServerException(msg=f"tritonserver's answer has no output {output!r}", status="500")
