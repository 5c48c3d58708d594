"""/embed/dataframe, the DataFrame dialect (bionemo_serving/fronts/dataframe/routes.py), in this process over the fake runner:
a table in (Parquet, JSON records or CSV), the same embeddings as /embed out as Parquet, in the rows' order, whatever
the number of rows; every table it cannot use a 4xx in the one error shape naming the column or the row (and its id).
Also its descriptors as BentoML's HTTP client, and so `bentoml.batch.run_in_spark`, uses them: the frame it sends,
the answer it reads back and the Arrow batch it hands Spark. tests/e2e/test_spark_cluster_e2e.py runs it in Spark."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import numpy as np
import pandas as pd
import pyarrow
import pytest
from bentoml.exceptions import BentoMLException
from starlette.requests import Request

from bionemo_serving.model_catalog import DEFAULT_MODEL, MODELS
from bionemo_serving.errors import InvalidRequest
from bionemo_serving.fronts.dataframe.tables import MAX_ROW_PROBLEMS, DataFrameOutput, ValidatedDataFrame
from bionemo_serving.fronts.dataframe.routes import embeddings_frame
from support.in_process import Answer, InProcessService, assert_rejected

PATH = "/embed/dataframe"
PARQUET = {"content-type": "application/vnd.apache.parquet"}
LIMIT = MODELS[DEFAULT_MODEL].max_length
PROTEINS = [
    "MKTAYIAKQRQISFVKSHFSRQ", "MSLK", "MKTVRQERLKSIVRILERSKEPVSGAQLAEELSVSRQVIVQDIAYLRSLGYNIV", "M",
    "ACDEFGHIKLMNPQRSTVWY",
]  # fmt: skip


@pytest.fixture(scope="module")
def routes() -> InProcessService:
    return InProcessService()


def parquet(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer)
    return buffer.getvalue()


def proteins(count: int, seed: int = 3) -> list[str]:
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), size=int(rng.integers(1, 90)))) for _ in range(count)]


def answered(answer: Answer) -> pd.DataFrame:
    assert answer.status == 200, answer.body
    assert answer.headers["content-type"] == "application/vnd.apache.parquet"
    return pd.read_parquet(io.BytesIO(answer.body))


def embed(routes: InProcessService, sequences: list[str]) -> np.ndarray:
    """/embed's embeddings of `sequences`, in requests within the service's limit."""
    size = routes.engine.limits.max_sequences
    vectors = [
        routes.post("/embed", {"sequences": sequences[start : start + size], "model": DEFAULT_MODEL}).json()[
            "embeddings"
        ]
        for start in range(0, len(sequences), size)
    ]
    return np.concatenate([np.asarray(part, dtype=np.float32) for part in vectors])


@pytest.mark.parametrize("ids", [["p1", "p2", "p3", "p4", "p5"], [50, 7, -3, 2**40, 0]], ids=["strings", "integers"])
def test_a_frame_gets_embed_s_embeddings_in_its_rows_order_with_its_ids(
    routes: InProcessService, ids: list[Any]
) -> None:
    frame = answered(routes.post(PATH, parquet(pd.DataFrame({"id": ids, "sequence": PROTEINS})), PARQUET))
    assert list(frame.columns) == ["id", "embedding"] and frame["id"].tolist() == ids
    assert all(vector.dtype == np.float32 for vector in frame["embedding"])
    np.testing.assert_array_equal(np.stack(frame["embedding"]), embed(routes, PROTEINS))


def test_json_records_and_csv_are_read_as_parquet_is(routes: InProcessService) -> None:
    """BentoML's PandasDataFrame takes all three by the content type; JSON's and CSV's values keep their type (an id
    "007" stays a string)."""
    ids = ["007", "8", "x", "9", "10"]
    from_parquet = answered(routes.post(PATH, parquet(pd.DataFrame({"id": ids, "sequence": PROTEINS})), PARQUET))
    records = [{"sequence": sequence, "id": identifier} for identifier, sequence in zip(ids, PROTEINS)]
    from_json = answered(routes.post(PATH, records))
    csv = "id,sequence\n" + "".join(f"{identifier},{sequence}\n" for identifier, sequence in zip(ids, PROTEINS))
    from_csv = answered(routes.post(PATH, csv.encode(), {"content-type": "text/csv"}))
    for frame in (from_json, from_csv):
        assert frame["id"].tolist() == ids
        np.testing.assert_array_equal(np.stack(frame["embedding"]), np.stack(from_parquet["embedding"]))


def test_a_body_without_a_content_type_is_parquet_as_bentoml_s_client_sends_it(routes: InProcessService) -> None:
    body = parquet(pd.DataFrame({"id": [1], "sequence": ["MKT"]}))
    route = routes.routes[PATH]
    request = Request({"type": "http", "method": "POST", "path": PATH, "query_string": b"", "headers": []}, _once(body))
    assert asyncio.run(route.input.from_http_request(request))["id"].tolist() == [1]


def _once(body: bytes) -> Any:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def test_a_frame_over_the_request_limit_is_embedded_in_calls_within_it() -> None:
    """BIONEMO_MAX_SEQUENCES_PER_REQUEST holds for every engine call; a frame of any number of rows is answered."""
    routes = InProcessService(max_sequences=4)
    asked: list[int] = []
    embed_call = routes.engine.embed

    async def counted(request: Any) -> Any:
        asked.append(len(request.sequences))
        return await embed_call(request)

    routes.engine.embed = counted  # type: ignore[method-assign]
    sequences = proteins(23)
    frame = answered(routes.post(PATH, parquet(pd.DataFrame({"id": range(23), "sequence": sequences})), PARQUET))
    assert sorted(asked) == [3, 4, 4, 4, 4, 4] and frame["id"].tolist() == list(range(23))
    routes.engine.embed = embed_call  # type: ignore[method-assign]
    np.testing.assert_array_equal(np.stack(frame["embedding"]), embed(routes, sequences))


def test_an_empty_frame_gets_an_empty_answer(routes: InProcessService) -> None:
    empty = pd.DataFrame({"id": pd.Series([], dtype=str), "sequence": pd.Series([], dtype=str)})
    frame = answered(routes.post(PATH, parquet(empty), PARQUET))
    assert list(frame.columns) == ["id", "embedding"] and len(frame) == 0


ROW = {"id": "p1", "sequence": "MKT"}
BAD_FRAMES = [
    pytest.param([{"sequence": "MKT"}], "id", "column missing; the frame's columns are id and sequence", id="no-id"),
    pytest.param([{"id": 1}], "sequence", "column missing", id="no-sequence"),
    pytest.param([{**ROW, "colour": "red"}], "colour", "unknown column", id="extra-column"),
    pytest.param([{**ROW, "model": "esm1nv"}], "model", "unknown column", id="model-column"),  # not a model's name
    pytest.param([ROW, {"id": "p2"}], "rows[1].sequence", "is missing (null) (id 'p2')", id="null-sequence"),
    pytest.param([ROW, {"id": 2, "sequence": 5}], "rows[1].sequence", "should be a string (id 2)", id="number"),
    pytest.param([ROW, {"id": None, "sequence": "MKT"}], "rows[1].id", "is missing (null)", id="null-id"),
    pytest.param([{"id": 1.5, "sequence": "MKT"}], "rows[0].id", "should be a string or an integer", id="float-id"),
    pytest.param([{"id": 2**63, "sequence": "MKT"}], "rows[0].id", "string or an integer (int64)", id="huge-id"),
    pytest.param([{"id": [1], "sequence": "MKT"}], "rows[0].id", "string or an integer", id="list-id"),
    pytest.param([ROW, {"id": 2, "sequence": "MKT"}], "rows[1].id", "an integer, where rows[0].id is a string", id="mixed"),
    pytest.param([ROW, {"id": "p2", "sequence": ""}], "rows[1].sequence", "sequence is empty (id 'p2')", id="empty"),
    pytest.param(
        [ROW, {"id": "p2", "sequence": "MKJL"}], "rows[1].sequence",
        "character 'J' at position 2 is not an amino acid; allowed: ACDEFGHIKLMNPQRSTVWYXBUZO (either case) (id 'p2')",
        id="bad-residue",
    ),
    pytest.param(
        [ROW, {"id": "p2", "sequence": "A" * (LIMIT + 1)}], "rows[1].sequence",
        f"has {LIMIT + 1} residues; this model accepts at most {LIMIT} (id 'p2')", id="too-long",
    ),
    pytest.param([["p1", "MKT"]], "rows[0]", "should be an object of column values", id="row-not-object"),
    pytest.param({"id": ["p1"], "sequence": ["MKT"]}, "body", "should be a list of rows", id="columns-not-records"),
]  # fmt: skip


@pytest.mark.parametrize(("records", "field", "message"), BAD_FRAMES)
def test_a_bad_frame_is_a_422_naming_the_column_or_the_row(
    routes: InProcessService, records: Any, field: str, message: str
) -> None:
    assert_rejected(routes.post(PATH, records), 422, field, message)


def test_a_row_at_fault_is_named_by_its_place_in_the_frame_whichever_call_found_it() -> None:
    """The rows go to the engine longest first, in calls of the engine's limit: the error names them as the frame
    has them, not as the call did (`sequences[1]`)."""
    routes = InProcessService(max_sequences=2)
    sequences = proteins(9)
    sequences[6] = sequences[6][:1] + "J"
    answer = routes.post(PATH, [{"id": f"p{row}", "sequence": sequence} for row, sequence in enumerate(sequences)])
    error = assert_rejected(answer, 422, "rows[6].sequence", "character 'J' at position 1")
    assert [detail["field"] for detail in error["details"]] == ["rows[6].sequence"] and "(id 'p6')" in error["message"]


def test_every_bad_row_of_a_frame_is_named_up_to_a_bound(routes: InProcessService) -> None:
    rows = [{"id": row, "sequence": None} for row in range(MAX_ROW_PROBLEMS + 5)]
    error = assert_rejected(routes.post(PATH, rows), 422, "rows[0].sequence", "is missing (null)")
    fields = [detail["field"] for detail in error["details"]]
    assert fields == [f"rows[{row}].sequence" for row in range(MAX_ROW_PROBLEMS)] + ["rows"]
    assert error["details"][-1]["message"] == "5 more problems not listed"


@pytest.mark.parametrize(
    ("body", "headers", "message"),
    [
        (b"PAR1 not parquet", PARQUET, "not a Parquet file pandas can read"),
        (b"\x00", {"content-type": "application/octet-stream"}, "not a Parquet file"),  # BentoML's name for Parquet
        (b"[{not json", {}, "not valid JSON"),
        (b'id,sequence\n"1,MKT\n', {"content-type": "text/csv"}, "not CSV pandas can read"),
        (b"", {"content-type": "text/csv"}, "not CSV pandas can read"),
    ],
    ids=["parquet", "octet-stream", "json", "csv", "empty-csv"],
)
def test_a_body_that_is_not_a_table_is_a_400(
    routes: InProcessService, body: bytes, headers: dict[str, str], message: str
) -> None:
    assert_rejected(routes.post(PATH, body, headers), 400, "body", message)


def test_a_body_of_another_media_type_is_a_415(routes: InProcessService) -> None:
    answer = routes.post(PATH, b"id=1", {"content-type": "application/x-www-form-urlencoded"})
    assert_rejected(answer, 415, "content-type", "send Parquet (application/vnd.apache.parquet), JSON records")


def test_a_body_over_the_limit_is_a_413_and_so_is_a_parquet_file_that_holds_more() -> None:
    """BIONEMO_MAX_REQUEST_BYTES bounds the body, and a Parquet file's data uncompressed: a few compressed bytes may
    hold a table of any size."""
    routes = InProcessService(max_request_bytes=20_000)
    answer = routes.post(PATH, b"[" + b" " * 20_000 + b"]")
    assert_rejected(answer, 413, "body", "over the limit of 20,000 bytes (BIONEMO_MAX_REQUEST_BYTES)")
    repetitive = parquet(pd.DataFrame({"id": range(1000), "sequence": ["A" * 100] * 1000}))
    assert len(repetitive) < 20_000
    answer = routes.post(PATH, repetitive, PARQUET)
    assert_rejected(answer, 413, "body", "holds over 20,000 bytes of data, the limit (BIONEMO_MAX_REQUEST_BYTES)")


INPUT = ValidatedDataFrame(orient="records", default_format="parquet", max_bytes=10_000)
OUTPUT = DataFrameOutput(orient="records", columns=["id", "embedding"], default_format="parquet")


def test_the_descriptors_publish_bentoml_s_dataframe_spec_and_every_media_type_read() -> None:
    """BentoML's client (`bentoml.client.Client`, and the one run_in_spark makes) builds the API from the spec."""
    assert INPUT.to_spec()["id"] == OUTPUT.to_spec()["id"] == "bentoml.io.PandasDataFrame"
    assert INPUT.to_spec()["args"]["default_format"] == "parquet"
    content = INPUT.openapi_request_body()["content"]
    assert list(content) == ["application/vnd.apache.parquet", "application/json", "text/csv"]


def test_what_bentoml_s_client_sends_and_reads_back_is_the_frame_and_the_answer() -> None:
    """HTTPClient.call: the input descriptor's `to_http_response` makes the body, the service reads it; the output
    descriptor's `to_http_response` makes the answer, the client's `from_http_request` reads it; then run_in_spark
    hands Spark `to_arrow` of it: the id as sent, the embedding as list<float> (Spark's ArrayType(FloatType()))."""
    sent = pd.DataFrame({"id": ["a", "b"], "sequence": ["MKT", "MSLK"]})
    body = asyncio.run(INPUT.to_http_response(sent))
    read = asyncio.run(INPUT.from_http_request(_request(body.body, body.headers["content-type"])))
    pd.testing.assert_frame_equal(read, sent)
    vectors = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    answer = asyncio.run(OUTPUT.to_http_response(embeddings_frame(["a", "b"], vectors)))
    frame = asyncio.run(OUTPUT.from_http_request(_request(answer.body, answer.headers["content-type"])))
    batch = OUTPUT.to_arrow(frame.set_index(pd.Index([5, 9])))  # whatever the index: no column of it
    assert batch.schema.names == ["id", "embedding"]
    assert batch.schema.field("embedding").type == pyarrow.list_(pyarrow.float32())
    assert batch.column("id").to_pylist() == ["a", "b"]
    np.testing.assert_array_equal(np.stack(batch.column("embedding").to_numpy(zero_copy_only=False)), vectors)


def _request(body: bytes, content_type: str) -> Request:
    scope = {"type": "http", "method": "POST", "path": PATH, "query_string": b"",
             "headers": [(b"content-type", content_type.encode())]}  # fmt: skip
    return Request(scope, _once(body))


def test_the_output_says_to_pass_run_in_spark_an_output_schema() -> None:
    """BentoML 1.4.39's own `spark_schema` always raises, about a numpy dtype."""
    with pytest.raises(BentoMLException, match="pass output_schema= to bentoml.batch.run_in_spark: .* id, embedding"):
        OUTPUT.spark_schema()


def test_over_grpc_the_dataframe_api_is_a_typed_error() -> None:
    error = asyncio.run(INPUT.from_proto(None))
    assert isinstance(error, InvalidRequest) and "HTTP only" in str(error)


def test_json_records_lacking_a_column_hold_null_there_and_keep_their_values_types() -> None:
    frame = INPUT.validated(json.dumps([{"id": 1, "sequence": "MKT"}, {"id": 2}]).encode(), "application/json")
    assert frame["id"].tolist() == [1, 2] and frame["sequence"].tolist()[0] == "MKT"
    assert pd.isna(frame["sequence"].tolist()[1])
