"""GET /schema.json: the description of the APIs that BentoML 1.4's new clients, `bentoml.SyncHTTPClient` and
`bentoml.AsyncHTTPClient`, read to make one method per API.

A legacy `bentoml.legacy.Service` serves /docs.json (OpenAPI) but not /schema.json, so those clients stop at
`Failed to fetch schema from .../schema.json`. This module generates it, in the shape of a new-style service's
`Service.schema()`, from the OpenAPI document that /docs.json serves (`Service.openapi_spec`, built from each API's IO
descriptors and pydantic models): one description of the APIs, two views of it.

What the client does with each route (`_bentoml_impl.client.http.HTTPClient._build_request`, `serde.JSONSerde`):
- a JSON object input (`properties`) is called by keyword, `client.embed(sequences=[...])`, and sent as that object;
- an ndarray input is a `root_input` tensor, called with the array as the one positional argument; the client then
  sends the array's JSON, as /decode/ndarray takes it;
- an ndarray output is a tensor (BentoML's `TensorSchema`), read back as a numpy array of its dtype;
- a DataFrame input (/embed/dataframe) is a `root_input` list of JSON records, called with the list as the one
  positional argument and sent as JSON; its output, a Parquet file, is a binary string: the client answers its bytes;
- every other output comes back as the JSON it is, walked along the schema, which keeps only declared properties.
Refs are inlined whole, unions included: BentoML's own `_flatten_field` keeps only the first branch of an `anyOf`, and
the client would then read each base64 string of `embeddings: list[list[float]] | list[str]` as a list of characters.
"""

from __future__ import annotations

import typing as t
from typing import Any

import numpy as np
from _bentoml_sdk.validators import TensorSchema
from bentoml._internal.service.openapi import make_api_path
from bentoml._internal.service.openapi.utils import REF_PREFIX
from bentoml.io import IODescriptor, NumpyNdarray, PandasDataFrame
from pydantic import TypeAdapter
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from bionemo_serving.fronts.bentoml.descriptors import NoInput
from bionemo_serving.fronts.dataframe.tables import JSON_RECORDS

if t.TYPE_CHECKING:
    import bentoml

SCHEMA_PATH = "/schema.json"
TAKES_NOTHING: dict[str, Any] = {"type": "object", "properties": {}}
"""A new-style API without parameters: the client's method takes no arguments; it POSTs `{}`, which NoInput ignores."""
FILE_BYTES: dict[str, Any] = {"type": "string", "format": "binary"}
"""An answer the client hands back as the bytes it received (a DataFrame's Parquet file)."""


def _inlined(schema: Any, definitions: dict[str, Any], enclosing: frozenset[str] = frozenset()) -> Any:
    """`schema` with each `$ref` to `definitions` replaced by what it names, unions and all; a recursive ref stays."""
    if isinstance(schema, list):
        return [_inlined(item, definitions, enclosing) for item in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(REF_PREFIX) and ref not in enclosing:
        named = _inlined(definitions[ref.removeprefix(REF_PREFIX)], definitions, enclosing | {ref})
        beside = {key: _inlined(value, definitions, enclosing) for key, value in schema.items() if key != "$ref"}
        return {**named, **beside}
    return {key: _inlined(value, definitions, enclosing) for key, value in schema.items()}


def tensor_schema(descriptor: NumpyNdarray) -> dict[str, Any]:
    """BentoML's tensor schema of a numpy array of the descriptor's dtype, as /docs.json's `x-bentoml-io-descriptor`
    gives it. The shape is left out unless fixed: the client reshapes to it, and (-1, -1) is not a shape."""
    args = descriptor.to_spec()["args"]
    shape = args["shape"] if args["shape"] and all(size > 0 for size in args["shape"]) else None
    tensor = TensorSchema(format="numpy-array", dtype=args["dtype"], shape=tuple(shape) if shape else None)
    return TypeAdapter(t.Annotated[np.ndarray, tensor]).json_schema()


def _body_schema(descriptor: IODescriptor, content: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """One side of an API: a tensor for an ndarray, else the JSON schema /docs.json gives it, refs inlined."""
    if isinstance(descriptor, NumpyNdarray):
        return tensor_schema(descriptor)
    if isinstance(descriptor, PandasDataFrame):  # the client sends a table as JSON records
        return _inlined(content[JSON_RECORDS]["schema"], definitions)
    return _inlined(content[descriptor.mime_type]["schema"], definitions)


def route_schema(api: Any, operation: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """The /schema.json route of one legacy API (`InferenceAPI`), from its operation in the OpenAPI document."""
    if isinstance(api.input, NoInput):
        input_schema = dict(TAKES_NOTHING)
    else:
        input_schema = _body_schema(api.input, operation["requestBody"]["content"], definitions)
        if isinstance(api.input, (NumpyNdarray, PandasDataFrame)):
            input_schema["root_input"] = True  # the body is the array (the records) itself, not named arguments
    (success,) = [response for status, response in operation["responses"].items() if int(status) == 200]
    return {
        "name": api.name,
        "route": make_api_path(api),
        "description": api.doc,
        "doc": api.doc,  # what the client reads for its method's __doc__
        "batchable": False,
        "input": input_schema,
        "output": dict(FILE_BYTES) if isinstance(api.output, PandasDataFrame) else _body_schema(
            api.output, success["content"], definitions
        ),
        "is_task": False,
    }


def service_schema(service: bentoml.legacy.Service) -> dict[str, Any]:
    """/schema.json of `service`: every API of /docs.json, as a new-style service's `Service.schema()` describes it."""
    document = service.openapi_spec.asdict()
    definitions = document.get("components", {}).get("schemas", {})
    routes = [
        route_schema(api, document["paths"][make_api_path(api)]["post"], definitions) for api in service.apis.values()
    ]
    return {"name": service.name, "type": "service", "routes": routes}


class ServesSchemaJSON:
    """ASGI middleware: answers GET /schema.json with `service_schema(service)`, made at the first request (after
    every API is registered) and kept; every other request goes on to BentoML's app."""

    def __init__(self, app: ASGIApp, service: bentoml.legacy.Service) -> None:
        self.app, self.service = app, service
        self._schema: dict[str, Any] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != SCHEMA_PATH or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        if self._schema is None:
            self._schema = service_schema(self.service)
        await JSONResponse(self._schema)(scope, receive, send)
