"""Float arrays as a response carries them: JSON numbers, or base64 of little-endian float32/float16 values.

JSON float lists cost the server most of its time on large answers (hidden
states are length x dim numbers per sequence) and the client as much to parse;
base64 of the raw values is about 4x smaller than float32 JSON text, float16 half that.
"""

from __future__ import annotations

import base64

import numpy as np

from serving.protocol import EncodingFormat, FloatType


def encode_arrays(arrays: np.ndarray, encoding: EncodingFormat, dtype: FloatType) -> list:
    """One entry per row of `arrays` (one sequence): nested numbers, or one base64 string of the row's values."""
    typed = arrays.astype(np.dtype(dtype.value).newbyteorder("<"), copy=False)
    if encoding is EncodingFormat.FLOAT:
        return typed.tolist()
    return [base64.b64encode(np.ascontiguousarray(row).tobytes()).decode("ascii") for row in typed]
