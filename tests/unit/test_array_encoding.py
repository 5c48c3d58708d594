"""Float arrays in JSON answers: JSON numbers, or base64 of the little-endian float32/float16 values, row-major, one
entry per sequence; what a client decodes is the array it was sent."""

from __future__ import annotations

import base64
import numpy as np
import pytest

from bionemo_serving.fronts.array_encoding import EncodingFormat, FloatType, encode_arrays

RNG = np.random.default_rng(0)
BATCH = RNG.standard_normal((3, 4, 5)).astype(np.float32)
"""[batch, length, dim], as /hidden answers."""
RAGGED = [RNG.standard_normal((length, 20)).astype(np.float32) for length in (1, 7, 3)]
"""One array per sequence, each of its own length, as /logits answers."""


def decoded(entry: str, dtype: FloatType, shape: tuple[int, ...]) -> np.ndarray:
    """What a client does: base64, then the little-endian values, then its own knowledge of the shape."""
    return np.frombuffer(base64.b64decode(entry), dtype=np.dtype(dtype.value).newbyteorder("<")).reshape(shape)


def test_float_gives_one_nested_list_per_sequence() -> None:
    encoded = encode_arrays(BATCH, EncodingFormat.FLOAT, FloatType.FLOAT32)
    assert len(encoded) == len(BATCH) and isinstance(encoded[0][0][0], float)
    np.testing.assert_array_equal(np.array(encoded, dtype=np.float32), BATCH)


def test_float16_numbers_are_rounded_to_half_precision() -> None:
    encoded = encode_arrays(BATCH, EncodingFormat.FLOAT, FloatType.FLOAT16)
    np.testing.assert_array_equal(np.array(encoded), BATCH.astype(np.float16).astype(np.float64))
    assert not np.array_equal(np.array(encoded), BATCH)  # the rounding is real


@pytest.mark.parametrize("dtype", list(FloatType))
def test_base64_round_trips_a_batch_row_by_row(dtype: FloatType) -> None:
    encoded = encode_arrays(BATCH, EncodingFormat.BASE64, dtype)
    assert all(isinstance(entry, str) for entry in encoded)
    for entry, row in zip(encoded, BATCH):
        assert len(base64.b64decode(entry)) == row.size * np.dtype(dtype.value).itemsize
        np.testing.assert_array_equal(decoded(entry, dtype, row.shape), row.astype(dtype.value))


@pytest.mark.parametrize("encoding", list(EncodingFormat))
def test_a_list_of_arrays_keeps_each_arrays_own_shape(encoding: EncodingFormat) -> None:
    encoded = encode_arrays(RAGGED, encoding, FloatType.FLOAT32)
    assert len(encoded) == len(RAGGED)
    for entry, array in zip(encoded, RAGGED):
        as_base64 = encoding is EncodingFormat.BASE64
        received = decoded(entry, FloatType.FLOAT32, array.shape) if as_base64 else np.array(entry)
        np.testing.assert_array_equal(received, array)


def test_base64_is_little_endian_whatever_the_arrays_byte_order() -> None:
    """The bytes a big-endian array would give as they are differ; the wire format does not."""
    big_endian = BATCH.astype(">f4")
    (entry, *_) = encode_arrays(big_endian, EncodingFormat.BASE64, FloatType.FLOAT32)
    assert base64.b64decode(entry) == BATCH[0].astype("<f4").tobytes()
    assert base64.b64decode(entry) != big_endian[0].tobytes()


def test_base64_of_a_non_contiguous_view_is_its_values_in_row_major_order() -> None:
    transposed = BATCH.transpose(0, 2, 1)  # a view: its rows are not contiguous in memory
    for entry, row in zip(encode_arrays(transposed, EncodingFormat.BASE64, FloatType.FLOAT32), transposed):
        np.testing.assert_array_equal(decoded(entry, FloatType.FLOAT32, row.shape), row)
