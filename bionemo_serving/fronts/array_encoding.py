"""Float arrays as a JSON answer carries them: JSON numbers, or base64 of little-endian float32/float16 values.

JSON float lists cost the server most of its time on large answers (hidden
states are length x dim numbers per sequence) and the client as much to parse;
base64 of the raw values is about 4x smaller than float32 JSON text, float16 half that.
Shared by the fronts that answer JSON: the native API and OpenAI's.
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Sequence

import numpy as np


# No docstrings: these enums are in the OpenAPI schema, as they are.
class EncodingFormat(str, enum.Enum):
    FLOAT = "float"
    BASE64 = "base64"


class FloatType(str, enum.Enum):
    FLOAT32 = "float32"
    FLOAT16 = "float16"


def encode_arrays(arrays: np.ndarray | Sequence[np.ndarray], encoding: EncodingFormat, dtype: FloatType) -> list:
    """One entry per sequence (a row of one array, or an array of its own shape in a list): nested numbers, or one
    base64 string of its values, row-major."""
    wire = np.dtype(dtype.value).newbyteorder("<")
    if isinstance(arrays, np.ndarray):
        typed: np.ndarray | list[np.ndarray] = arrays.astype(wire, copy=False)  # one conversion for the whole batch
    else:
        typed = [array.astype(wire, copy=False) for array in arrays]
    if encoding is EncodingFormat.FLOAT:
        return [row.tolist() for row in typed]
    return [base64.b64encode(np.ascontiguousarray(row).tobytes()).decode("ascii") for row in typed]
