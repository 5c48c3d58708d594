"""The count limit (BIONEMO_MAX_SEQUENCES_PER_REQUEST) is the engine's, handed in at start-up and enforced for every
front before anything is asked of Triton; the native API's types do not bake it in at import."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

from serving.engine.engine import Engine
from serving.engine.inputs import (
    DecodeInput,
    DecodingMethod,
    EmbedInput,
    GenerateInput,
    HiddenInput,
    SequencesInput,
)
from serving.engine.limits import RequestLimits
from serving.errors import InvalidRequest
from serving.fronts.native.protocol import DecodeRequest, EmbedRequest, GenerateRequest, LogitsRequest
from serving.triton.registry import ModelRegistry

LIMIT = 3


class UnreachableRunner:
    """Any call to Triton fails the test: a request over the limit is refused before one."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Triton was asked ({name}) for a request over the limit")


def engine() -> Engine:
    runner = UnreachableRunner()
    return Engine(runner, ModelRegistry(runner), RequestLimits(max_sequences=LIMIT, max_score_passes=10))


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
