"""bionemo_serving/fronts/bentoml/proto_values.py writes the Value protobuf's own json_format.ParseDict builds, for every kind
of JSON."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format, struct_pb2

from bionemo_serving.fronts.bentoml.proto_values import to_value

CASES: list[Any] = [
    None, True, False, 0, -1, 1.5, -0.0, 1e308, 1e-300, 2**60, "", "é ✓", [], {}, [True, 1, None], [1, 2.5, 3],
    {"a": [[1.0, 2.0], [3.0]], "b": {"c": None, "d": []}, "ü": ""}, list(range(300)), ["x" * 200],
    {"embeddings": np.random.default_rng(0).standard_normal((8, 320)).tolist(), "dim": 320, "truncated": []},
]  # fmt: skip


@pytest.mark.parametrize("data", CASES, ids=range(len(CASES)))
def test_it_is_the_value_parsedict_builds(data: Any) -> None:
    ours = to_value(data)
    assert ours == json_format.ParseDict(data, struct_pb2.Value())
    assert ours.SerializeToString() == json_format.ParseDict(data, struct_pb2.Value()).SerializeToString()


def test_a_nan_stays_a_nan_and_a_non_json_value_is_refused() -> None:
    assert math.isnan(to_value([math.nan]).list_value.values[0].number_value)
    with pytest.raises(TypeError, match="bytes is not a JSON value"):
        to_value({"a": b"raw"})
