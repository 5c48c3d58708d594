"""The count limit (BIONEMO_MAX_SEQUENCES_PER_REQUEST) is the engine's, handed in at start-up and enforced for every
front before anything is asked of Triton, each front naming the field as its own requests do; the native API's types
do not bake it in at import."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

from bionemo_serving.engine.engine import Engine
from bionemo_serving.engine.inputs import (
    DecodeInput,
    DecodingMethod,
    EmbedInput,
    GenerateInput,
    HiddenInput,
    SequencesInput,
)
from bionemo_serving.engine.limits import RequestLimits
from bionemo_serving.engine.scheduler import Scheduler
from bionemo_serving.errors import InvalidRequest
from bionemo_serving.fronts.admission import Admission
from bionemo_serving.fronts.bionemo_grpc.protos import esm1nv_pb2, megamolbart_pb2, prott5nv_pb2
from bionemo_serving.fronts.bionemo_grpc.servicers import Esm1nvSampler, MegaMolBARTSampler, ProtT5nvSampler
from bionemo_serving.fronts.native.protocol import DecodeRequest, EmbedRequest, GenerateRequest, LogitsRequest
from bionemo_serving.triton.registry import ModelRegistry
from support.fake_runner import FakeRunner
from support.in_process import InProcessService, engine_over

LIMIT = 3


class UnreachableRunner:
    """Any call to Triton fails the test: a request over the limit is refused before one."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Triton was asked ({name}) for a request over the limit")


def engine() -> Engine:
    runner = UnreachableRunner()
    return Engine(runner, ModelRegistry(runner), RequestLimits(max_sequences=LIMIT, max_score_passes=10, max_request_bytes=1 << 20), Scheduler(4, 60))


def generate_input(smiles: list[str]) -> GenerateInput:
    return GenerateInput(smiles, "megamolbart", None, 1, 0.0, DecodingMethod.GREEDY, 1.0, 0, 1.0, 1, 1, 8)


CALLS: dict[str, tuple[str, Callable[[Engine, int], Awaitable[Any]]]] = {
    "embed": ("sequences", lambda e, n: e.embed(EmbedInput(["MKT"] * n, "esm2nv"))),
    "hidden": ("sequences", lambda e, n: e.hidden(HiddenInput(["MKT"] * n, "esm2nv"))),
    "logits": ("sequences", lambda e, n: e.logits(SequencesInput(["MKT"] * n, "esm2nv"))),
    "contacts": ("sequences", lambda e, n: e.contacts(SequencesInput(["MKT"] * n, "esm2nv"))),
    "decode": ("hiddens", lambda e, n: e.decode(DecodeInput(np.zeros((n, 2, 4)), np.ones((n, 2))))),
    "generate": ("smiles", lambda e, n: e.generate(generate_input(["CCO"] * n))),
}


@pytest.mark.parametrize("method", CALLS)
def test_a_request_over_the_limit_is_a_422_naming_the_field(method: str) -> None:
    field, call = CALLS[method]
    with pytest.raises(InvalidRequest) as raised:
        asyncio.run(call(engine(), LIMIT + 1))
    assert str(raised.value) == (
        f"{field}: has {LIMIT + 1} items; at most {LIMIT} in one request (BIONEMO_MAX_SEQUENCES_PER_REQUEST)"
    )


@pytest.mark.parametrize("method", CALLS)
def test_a_request_of_nothing_is_a_422_naming_the_field(method: str) -> None:
    """The native API's schema says so first (minItems 1); BioNeMo's gRPC messages have no schema to."""
    field, call = CALLS[method]
    with pytest.raises(InvalidRequest, match=f"^{field}: has no items; send at least 1$"):
        asyncio.run(call(engine(), 0))


@pytest.mark.parametrize(
    ("request_type", "field"),
    [
        (EmbedRequest, "sequences"),
        (LogitsRequest, "sequences"),
        (DecodeRequest, "hiddens"),
        (GenerateRequest, "smiles"),
    ],
)
def test_the_types_leave_the_limit_to_the_engine(request_type: type, field: str) -> None:
    """Read at import, the setting would be fixed before the service's settings are; the schema keeps minItems."""
    schema = request_type.model_json_schema()["properties"][field]
    assert schema["minItems"] == 1 and "maxItems" not in schema


ROUTES = [
    ("/embed", "sequences", lambda n: {"sequences": ["MKT"] * n}),
    ("/embed/ndarray", "sequences", lambda n: {"sequences": ["MKT"] * n}),
    ("/hidden", "sequences", lambda n: {"sequences": ["MKT"] * n}),
    ("/logits", "sequences", lambda n: {"sequences": ["MKT"] * n}),
    ("/contacts", "sequences", lambda n: {"sequences": ["MKT"] * n}),
    ("/decode", "hiddens", lambda n: {"hiddens": [[[0.5] * 256]] * n, "mask": [[1]] * n}),
    ("/decode/ndarray", "body", lambda n: [[[0.5] * 256]] * n),  # the array is the body
    ("/generate", "smiles", lambda n: {"smiles": ["CCO"] * n, "num_samples": 1, "max_length": 4}),
    ("/v1/embeddings", "input", lambda n: {"model": "esm2nv", "input": ["MKT"] * n}),  # OpenAI's name for it
]


@pytest.mark.parametrize(("path", "field", "body"), ROUTES, ids=[path for path, _, _ in ROUTES])
def test_every_route_counts_its_items_against_the_limit_under_its_own_field_name(
    path: str, field: str, body: Callable[[int], Any]
) -> None:
    routes = InProcessService(max_sequences=LIMIT)
    refused = routes.post(path, body(LIMIT + 1))
    assert refused.status == 422, refused.body
    assert f"{field}: has {LIMIT + 1} items; at most {LIMIT} in one request" in refused.body.decode()
    assert routes.runner.index_calls == 0 and routes.runner.calls == []  # refused before Triton is asked anything
    assert routes.post(path, body(LIMIT)).status == 200


SERVICERS = [
    (
        "SmilesToEmbedding", lambda engine, admission: MegaMolBARTSampler(engine, admission),
        lambda n: megamolbart_pb2.InputSpec(smis=["CCO"] * n), "smis",
    ),
    (
        "SmilesToHidden", lambda engine, admission: MegaMolBARTSampler(engine, admission),
        lambda n: megamolbart_pb2.InputSpec(smis=["CCO"] * n), "smis",
    ),
    (
        "HiddenToSmis", lambda engine, admission: MegaMolBARTSampler(engine, admission),
        lambda n: megamolbart_pb2.InputSpec(hidden_states=[0.5] * 256 * n, masks=[True] * n, dim=[n, 1, 256]),
        "hidden_states",
    ),
    (
        "SeqToEmbedding", lambda engine, admission: Esm1nvSampler("esm1nv", engine, admission),
        lambda n: esm1nv_pb2.InputSpec(seqs=["MKT"] * n), "seqs",
    ),
    (
        "SeqToEmbedding", lambda engine, admission: ProtT5nvSampler("prott5nv", engine, admission),
        lambda n: prott5nv_pb2.InputSpec(seqs=["MKT"] * n), "seqs",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "servicer", "message", "field"), SERVICERS, ids=[f"{s[0]}-{s[3]}" for s in SERVICERS]
)
def test_bionemos_grpc_services_count_items_under_their_messages_field_names(
    method: str, servicer: Callable[[Engine, Admission], Any], message: Callable[[int], Any], field: str
) -> None:
    runner = FakeRunner()
    sampler = servicer(engine_over(runner, max_sequences=LIMIT), Admission(4, 60))
    with pytest.raises(InvalidRequest, match=f"^{field}: has {LIMIT + 1} items; at most {LIMIT} in one request"):
        asyncio.run(getattr(sampler, method)(message(LIMIT + 1), None))
    assert runner.calls == []
    asyncio.run(getattr(sampler, method)(message(LIMIT), None))
