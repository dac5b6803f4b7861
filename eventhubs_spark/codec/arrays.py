"""Arrow arrays made from their buffers, not with ``pa.array()``.

``pa.array()`` (and ``pa.scalar()``) import pandas the first time a process calls them: pyarrow asks
whether the input is a pandas object, whatever it is. That import costs a fresh Python worker 0.3-0.6 s
of CPU, and Spark starts fresh workers often: at a query's start, and again whenever an executor's
workers sat idle for a minute (its ``PythonWorkerFactory`` ends them), which is every micro-batch of a
stream triggered less often than that. Nothing on the read path needs pandas, so the arrays it makes
come from here: numbers from numpy arrays as they are (no copy), text and bytes from Python lists as
one data buffer and its offsets. An input these cannot take as it is (a text that is not valid UTF-8
to encode, bytes past 2 GiB in one array) goes to ``pa.array()``, which raises or copes as it would
have.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import pyarrow as pa

_OFFSET_MAX = (1 << 31) - 1  # binary and string arrays' offsets are int32
_INT64 = pa.int64()


def numbers(values: np.ndarray, type_: pa.DataType, valid: np.ndarray | None = None) -> pa.Array:
    """A fixed-width array of ``type_`` over ``values`` (a numpy array of the same width: int64 for
    ``int64`` and timestamps, int32 for ``int32``...), null where ``valid`` is False."""
    values = np.ascontiguousarray(values)
    if values.ndim != 1 or values.dtype.itemsize * 8 != type_.bit_width or values.dtype.kind not in "iu":
        raise TypeError(f"{values.dtype} values for an array of {type_}")
    return pa.Array.from_buffers(type_, len(values), [_validity(valid), pa.py_buffer(values)])


def ints(values: Sequence[int] | np.ndarray, type_: pa.DataType = _INT64) -> pa.Array:
    """An integer array of ``type_`` from Python ints (or a numpy array of any integer width)."""
    return numbers(np.asarray(values, dtype=np.dtype(f"i{type_.bit_width // 8}")), type_)


def texts(values: Sequence[str | None]) -> pa.Array:
    """A string array of ``values`` (None: null), encoded as one string (an ASCII run's offsets are its lengths)."""
    strings = cast("Sequence[str]", [v if v is not None else "" for v in values] if None in values else values)
    try:
        joined = "".join(strings)
        data = joined.encode()
    except (TypeError, UnicodeEncodeError):  # not text, or a lone surrogate: Arrow says what is wrong with it
        return pa.array(values, pa.string())
    if len(data) == len(joined):  # ASCII: a value's bytes are its characters
        lengths = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
    else:
        lengths = np.fromiter((len(s.encode()) for s in strings), dtype=np.int64, count=len(strings))
    return _variable(data, lengths, values, pa.string())


def binaries(values: Sequence[bytes | None]) -> pa.Array:
    """A binary array of ``values`` (None: null)."""
    items = cast("Sequence[bytes]", [v if v is not None else b"" for v in values] if None in values else values)
    try:
        data = b"".join(items)
    except TypeError:  # not bytes: Arrow says what is wrong with it
        return pa.array(values, pa.binary())
    return _variable(data, np.fromiter(map(len, items), dtype=np.int64, count=len(items)), values, pa.binary())


def repeated_text(value: str, n: int) -> pa.Array:
    """``value`` ``n`` times (``pa.repeat`` of a scalar taken from an array: ``pa.scalar`` would import pandas)."""
    return pa.repeat(texts([value])[0], n)


def empty(type_: pa.DataType) -> pa.Array:
    """An array of ``type_`` with no values."""
    return pa.nulls(0, type_)


def _variable(data: bytes, lengths: np.ndarray, values: Sequence[object], type_: pa.DataType) -> pa.Array:
    """The string or binary array of ``values``, whose bytes one after the other are ``data``."""
    n = len(lengths)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > _OFFSET_MAX:
        return pa.array(values, type_)  # Arrow's own answer for an array this large
    valid = None
    if None in values:
        valid = np.fromiter((v is not None for v in values), dtype=bool, count=n)
    return pa.Array.from_buffers(
        type_, n, [_validity(valid), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    )


def _validity(valid: np.ndarray | None) -> pa.Buffer | None:
    """Arrow's validity bitmap of ``valid`` (None when every value is there)."""
    if valid is None or valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))
