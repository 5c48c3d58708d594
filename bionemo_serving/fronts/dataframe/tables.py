"""The DataFrame descriptors: tables in the wire formats of BentoML's `PandasDataFrame` (Parquet, JSON records or
CSV bodies), each failure a typed error in the one JSON shape. HTTP's alone: over gRPC they answer a typed error."""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

import bentoml
from bentoml.exceptions import BentoMLException
from starlette.requests import Request

from bionemo_serving.errors import (
    FieldProblem,
    InvalidRequest,
    MalformedBody,
    PayloadTooLarge,
    ServiceError,
    UnsupportedMediaType,
)
from bionemo_serving.fronts.bentoml.descriptors import PublishesBentoMLSpec, ReadsBody, RendersErrors, read_body

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow

PARQUET, JSON_RECORDS, CSV = "application/vnd.apache.parquet", "application/json", "text/csv"
DATAFRAME_MEDIA_TYPES = {PARQUET: PARQUET, "application/octet-stream": PARQUET, JSON_RECORDS: JSON_RECORDS, CSV: CSV}
"""What a DataFrame body may be sent as, by its content type, as BentoML's `PandasDataFrame` reads them (it takes
octet-stream for Parquet); a body without a content type is Parquet, what BentoML's clients and run_in_spark send."""


MAX_ROW_PROBLEMS = 20
"""Most problems one error about a frame's rows names (thousands of rows may be at fault); it says how many more."""


def rows_at_fault(problems: list[FieldProblem]) -> InvalidRequest:
    """The 422 naming the first MAX_ROW_PROBLEMS of `problems` (fields `rows[i]...`), and how many more there are."""
    named = problems[:MAX_ROW_PROBLEMS]
    if len(problems) > len(named):
        named.append(FieldProblem("rows", f"{len(problems) - len(named)} more problems not listed"))
    return InvalidRequest(named)


PARQUET_BATCH_ROWS = 1024
"""Rows of a Parquet body decoded at a time, its size counted after each."""


def _parquet_frame(body: bytes, max_bytes: int) -> pd.DataFrame | ServiceError:
    """The frame of a Parquet file, or why not. Its data is read a batch of rows at a time, and one that holds more than
    `max_bytes` (decoded, as it would be in memory) is a 413, read no further: a few compressed bytes may hold a table
    of any size."""
    import pyarrow
    import pyarrow.parquet

    try:
        parquet = pyarrow.parquet.ParquetFile(pyarrow.BufferReader(body))
        batches, size = [], 0
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            size += batch.nbytes
            if size > max_bytes:
                return PayloadTooLarge.at(
                    "body", f"holds over {max_bytes:,} bytes of data, the limit (BIONEMO_MAX_REQUEST_BYTES)"
                )
            batches.append(batch)
        return pyarrow.Table.from_batches(batches, schema=parquet.schema_arrow).to_pandas()
    except (pyarrow.ArrowException, ValueError, OSError, TypeError, NotImplementedError) as error:
        return MalformedBody.at("body", f"not a Parquet file pandas can read: {error}")


def _json_records_frame(body: bytes) -> pd.DataFrame | ServiceError:
    """The frame of JSON records, `[{"column": value, ...}, ...]`, every value as JSON has it (no type inference: an
    id "007" stays a string); a column a record lacks is null there."""
    import pandas as pd

    try:
        records = json.loads(body)
    except ValueError as error:
        return MalformedBody.at("body", f"not valid JSON: {error}")
    if not isinstance(records, list):
        return InvalidRequest.at("body", "should be a list of rows, [{\"column\": value, ...}, ...] (records)")
    not_objects = [
        FieldProblem(f"rows[{row}]", "should be an object of column values")
        for row, record in enumerate(records)
        if not isinstance(record, dict)
    ]
    if not_objects:
        return rows_at_fault(not_objects)
    columns = list(dict.fromkeys(key for record in records for key in record))
    return pd.DataFrame(records, columns=columns, dtype=object)


def _csv_frame(body: bytes) -> pd.DataFrame | ServiceError:
    """The frame of CSV text with a header row, every value a string as written."""
    import pandas as pd

    try:
        return pd.read_csv(io.BytesIO(body), dtype=str, keep_default_na=False)
    except (ValueError, UnicodeDecodeError) as error:  # pandas' ParserError and EmptyDataError are ValueErrors
        return MalformedBody.at("body", f"not CSV pandas can read: {error}")


class ValidatedDataFrame(PublishesBentoMLSpec, ReadsBody, bentoml.io.PandasDataFrame):
    """A table in the wire formats of BentoML's `PandasDataFrame`: Parquet (its `default_format` here, what
    BentoML's HTTP client, and so `bentoml.batch.run_in_spark`, sends), JSON records or CSV, by the content type.
    Yields the pandas DataFrame, or the `ServiceError` saying why there is none; the route checks its columns and
    values. pandas and pyarrow are imported at the first such body, not in every API worker at start-up."""

    async def from_http_request(self, request: Request) -> pd.DataFrame | ServiceError:
        media_type = request.headers.get("content-type", PARQUET).split(";")[0].strip().lower()
        if media_type not in DATAFRAME_MEDIA_TYPES:
            return UnsupportedMediaType.at(
                "content-type",
                f"{media_type!r} is not accepted; send Parquet ({PARQUET}), JSON records ({JSON_RECORDS}) or CSV "
                f"({CSV})",
            )
        body = await read_body(request, self.max_bytes)
        if isinstance(body, ServiceError):
            return body
        return self.validated(body, DATAFRAME_MEDIA_TYPES[media_type])

    def validated(self, body: bytes, media_type: str) -> pd.DataFrame | ServiceError:
        """The frame `body` holds, sent as `media_type` (one of DATAFRAME_MEDIA_TYPES' values)."""
        if media_type == PARQUET:
            return _parquet_frame(body, self.max_bytes)
        if media_type == JSON_RECORDS:
            return _json_records_frame(body)
        return _csv_frame(body)

    async def from_proto(self, field: Any) -> ServiceError:
        return InvalidRequest.at("body", "a DataFrame is taken over HTTP only (Parquet, JSON records or CSV)")

    def openapi_request_body(self) -> dict[str, Any]:
        """Every media type it reads, with the same schema (BentoML's lists its default format alone)."""
        body = super().openapi_request_body()
        (described,) = body["content"].values()
        body["content"] = {media_type: described for media_type in (PARQUET, JSON_RECORDS, CSV)}
        return body


class DataFrameOutput(PublishesBentoMLSpec, RendersErrors, bentoml.io.PandasDataFrame):
    """A table answered in BentoML's `PandasDataFrame` wire format (Parquet by `default_format`: float32 columns stay
    float32), a `ServiceError` in the one JSON error shape. Beside `bentoml.batch.run_in_spark` it makes the Arrow
    record batch of the answer, which Spark reads with the `output_schema` it is given (docs/spark.md)."""

    def to_arrow(self, df: pd.DataFrame) -> pyarrow.RecordBatch:
        """The answer's columns alone: no pandas index column beside them, whatever the index."""
        import pyarrow

        return pyarrow.RecordBatch.from_pandas(df, preserve_index=False)

    def spark_schema(self) -> Any:
        """BentoML 1.4.39's `PandasDataFrame.spark_schema` always raises; so does this, saying what to do instead."""
        raise BentoMLException(
            "pass output_schema= to bentoml.batch.run_in_spark: this API answers the columns "
            f"{', '.join(self._columns or [])} (docs/spark.md gives the StructType)"
        )
