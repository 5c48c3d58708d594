"""The service's own inference client (serving/triton/inference.py) against the service's real tritonserver: the same
tensors as tritonclient's client, Triton's errors as tritonclient's exception, connections that end handled."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from conftest import RunningService
from model_catalog import MODELS
from preprocessing import tokenizer_for
from serving.triton.inference import TritonInferClient

T = TypeVar("T")
SEQUENCES = ["MKT", "MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL"]


def encoder_inputs() -> list[tuple[str, str, np.ndarray]]:
    batch = tokenizer_for(MODELS["esm2nv"]).pad([tokenizer_for(MODELS["esm2nv"]).encode(s) for s in SEQUENCES])
    arrays = batch.model_inputs(None)
    return [(name, "INT64", arrays[name].astype(np.int64)) for name in ("input_ids", "attention_mask", "pooling_mask")]


async def closing(client: TritonInferClient, call: Awaitable[T]) -> T:
    """`call`'s result, the client's connections closed after it: a connection left open would hold up the session
    service's tritonserver when it stops (it waits for every open HTTP connection)."""
    try:
        return await call
    finally:
        client.close()


def tritonclient_answer(url: str, inputs: list[tuple[str, str, np.ndarray]], output: str) -> np.ndarray:
    client = triton.InferenceServerClient(url)
    tensors = [triton.InferInput(name, array.shape, datatype) for name, datatype, array in inputs]
    for tensor, (_, _, array) in zip(tensors, inputs):
        tensor.set_data_from_numpy(array, binary_data=True)
    answer = client.infer("esm2nv", tensors, outputs=[triton.InferRequestedOutput(output, binary_data=True)])
    client.close()
    return answer.as_numpy(output)


@pytest.mark.parametrize("output", ["embeddings", "hidden_states"])
def test_it_answers_what_tritonclient_answers(service: RunningService, output: str) -> None:
    inputs = encoder_inputs()
    client = TritonInferClient(lambda: service.triton_url)
    ours = asyncio.run(closing(client, client.infer("esm2nv", 1, inputs, output)))
    theirs = tritonclient_answer(service.triton_url, inputs, output)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape and np.array_equal(ours, theirs)


def test_tritons_error_answer_is_tritonclients_exception_with_its_message(service: RunningService) -> None:
    client = TritonInferClient(lambda: service.triton_url)
    with pytest.raises(InferenceServerException, match=r"'esm2nv' version 99 is not found") as raised:
        asyncio.run(closing(client, client.infer("esm2nv", 99, encoder_inputs(), "embeddings")))
    assert raised.value.status() == "404"


def test_a_connection_that_ended_or_was_cancelled_mid_call_is_not_used_again(service: RunningService) -> None:
    client = TritonInferClient(lambda: service.triton_url)
    inputs = encoder_inputs()

    async def calls() -> list[np.ndarray]:
        first = await client.infer("esm2nv", 1, inputs, "embeddings")
        (idle,) = client._idle
        idle.close()  # as when tritonserver restarts: the idle connection has ended
        second = await client.infer("esm2nv", 1, inputs, "embeddings")
        call = asyncio.ensure_future(client.infer("esm2nv", 1, inputs, "embeddings"))
        await asyncio.sleep(0.002)
        call.cancel()  # a request's deadline, mid-exchange: its answer may still come, on that connection
        with pytest.raises(asyncio.CancelledError):
            await call
        third = await client.infer("esm2nv", 1, inputs, "embeddings")
        assert len(client._idle) == 1 and not client._idle[0].lost
        return [first, second, third]

    first, second, third = asyncio.run(closing(client, calls()))
    assert np.array_equal(first, second) and np.array_equal(first, third)

