"""Arrow arrays made from their buffers, not with ``pa.array()``.

``pa.array()`` imports pandas the first time a process calls it, a cost every fresh Python worker would pay; the read
path needs no pandas, so its arrays are made here from numpy arrays and buffers, and only what these cannot take
goes to ``pa.array()``.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import array
import operator
import sys
import time
from collections.abc import Iterable, Sequence
from itertools import accumulate, chain, repeat
from typing import Any, cast

import numpy as np
import pyarrow as pa

_INT64 = pa.int64()


def numbers(values: np.ndarray, type_: pa.DataType, valid: np.ndarray | None = None) -> pa.Array:
    """A fixed-width array of ``type_`` over ``values`` (a numpy array of the same width and kind: int64 for
    ``int64`` and timestamps, int32 for ``int32``, float64 for ``float64``...), null where ``valid`` is False."""
    values = np.ascontiguousarray(values)
    kinds = "f" if pa.types.is_floating(type_) else "iu"
    if values.ndim != 1 or values.dtype.itemsize * 8 != type_.bit_width or values.dtype.kind not in kinds:
        raise TypeError(f"{values.dtype} values for an array of {type_}")
    return pa.Array.from_buffers(type_, len(values), [validity(valid), pa.py_buffer(values)])


def booleans(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A boolean array of ``values`` (a numpy bool array), packed to Arrow's one bit per value, null where ``valid``
    is False."""
    values = np.asarray(values, dtype=bool)
    bits = pa.py_buffer(np.packbits(values, bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), len(values), [validity(valid), bits])


def indices(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """Row numbers for ``take`` (int64; null where ``valid`` is False: ``take`` gives a null there)."""
    return numbers(np.asarray(values, dtype=np.int64), _INT64, valid)


def ints(values: Sequence[int] | np.ndarray, type_: pa.DataType = _INT64) -> pa.Array:
    """An integer array of ``type_`` from Python ints (or a numpy array of any integer width)."""
    return numbers(np.asarray(values, dtype=np.dtype(f"i{type_.bit_width // 8}")), type_)


def texts(values: Sequence[str | None]) -> pa.Array:
    """A string array of ``values`` (None: null), encoded as one string (an ASCII run's offsets are its lengths)."""
    nulls = None in values
    if nulls and values.count(None) == len(values):  # a column no message has (keys, publishers): all null
        return pa.nulls(len(values), pa.string())
    strings = cast("Sequence[str]", [v if v is not None else "" for v in values] if nulls else values)
    try:
        joined = "".join(strings)
        data = joined.encode()
    except (TypeError, UnicodeEncodeError):  # not text, or a lone surrogate: Arrow says what is wrong with it
        return pa.array(values, pa.string())
    if len(data) == len(joined):  # ASCII: a value's bytes are its characters
        lengths: Iterable[int] = map(len, strings)
    else:
        lengths = map(len, map(str.encode, strings))
    return _variable(data, lengths, values, nulls, pa.string())


def binaries(values: Sequence[bytes | None]) -> pa.Array:
    """A binary array of ``values`` (None: null)."""
    nulls = None in values
    if nulls and values.count(None) == len(values):
        return pa.nulls(len(values), pa.binary())
    items = cast("Sequence[bytes]", [v if v is not None else b"" for v in values] if nulls else values)
    try:
        data = b"".join(items)
    except TypeError:  # not bytes: Arrow says what is wrong with it
        return pa.array(values, pa.binary())
    return _variable(data, map(len, items), values, nulls, pa.binary())


def from_values(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """``pa.array(values, type_)`` for Python values of the types Avro's values take (null, booleans, integers,
    floats, text, bytes, and structs of dicts, lists and maps of dicts of those, nested), from buffers. Values
    these cannot take as they are (a value of another kind, a number that does not fit) go to ``pa.array``,
    which converts or raises as it would have.

    Why not always: this costs about twice ``pa.array``'s C++ conversion per value (1-2 µs more per record of
    a few fields), so it pays only until it has cost what importing pandas costs once (0.3-0.6 s). It is
    used while pandas is not loaded and until it has spent :data:`_OWN_BUDGET` seconds in this process; then
    ``pa.array`` takes over (a worker that converts that much is a long-lived one that reads a lot)."""
    global _own_spent
    if _own_spent < _OWN_BUDGET and "pandas" not in sys.modules:
        started = time.perf_counter()
        try:
            return _from_values(values, type_)
        except (TypeError, ValueError, OverflowError, AttributeError):
            pass
        finally:
            _own_spent += time.perf_counter() - started
    return pa.array(values, type_)


# Seconds of from_values' own conversion a process spends before it lets pa.array import pandas: about the
# import's cost, so a process never pays more than twice the cheaper of the two (as renting skis until their
# price is spent, then buying).
_OWN_BUDGET = 0.3
_own_spent = 0.0


def _from_values(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    # Every pass over the values is a C loop (map, set, chain, list.count): a generator's Python frame per
    # value made this four times slower than pa.array's C++ conversion.
    n = len(values)
    if pa.types.is_null(type_):
        return pa.nulls(n)
    if pa.types.is_string(type_):
        return texts(values)  # anything but text there goes to pa.array
    if pa.types.is_binary(type_):
        return binaries(values)
    nulls = None in values
    valid = _valid(values) if nulls else None
    kinds = set(map(type, values))
    kinds.discard(_NONE)
    if pa.types.is_boolean(type_):
        if not kinds <= {bool}:
            raise TypeError("not all booleans")
        return booleans(np.fromiter(map(operator.is_, values, repeat(True)), dtype=bool, count=n), valid)
    if pa.types.is_integer(type_) or pa.types.is_floating(type_):
        floating = pa.types.is_floating(type_)
        if not kinds <= ({float, int} if floating else {int}):
            raise TypeError("not all numbers of the type")
        kind = "f" if floating else "i" if pa.types.is_signed_integer(type_) else "u"
        filled = [0 if v is None else v for v in values] if nulls else values
        return numbers(np.array(filled, dtype=np.dtype(f"{kind}{type_.bit_width // 8}")), type_, valid)
    if pa.types.is_struct(type_):
        if not kinds <= {dict}:
            raise TypeError("not all dicts")
        rows = [_EMPTY if v is None else v for v in values] if nulls else values
        fields = [type_.field(i) for i in range(type_.num_fields)]
        children = [_from_values(list(map(dict.get, rows, repeat(f.name))), f.type) for f in fields]
        return pa.Array.from_buffers(type_, n, [validity(valid)], children=children)
    if pa.types.is_map(type_):
        if not kinds <= {dict}:
            raise TypeError("not all dicts")
        present = list(filter(None, values)) if nulls else values
        keys = _from_values(list(chain.from_iterable(present)), type_.key_type)
        items = _from_values(list(chain.from_iterable(map(dict.values, present))), type_.item_type)
        entries = pa.Array.from_buffers(pa.struct([type_.key_field, type_.item_field]), len(keys), [None],
                                        children=[keys, items])  # fmt: skip
        return pa.Array.from_buffers(type_, n, [validity(valid), _offsets(values, nulls)], children=[entries])
    if pa.types.is_list(type_):
        if not kinds <= {list}:
            raise TypeError("not all lists")
        child = _from_values(list(chain.from_iterable(filter(None, values) if nulls else values)), type_.value_type)
        return pa.Array.from_buffers(type_, n, [validity(valid), _offsets(values, nulls)], children=[child])
    raise TypeError(f"no own conversion for {type_}")


_NONE = type(None)
_EMPTY: dict[str, Any] = {}


def _valid(values: Sequence[Any]) -> np.ndarray:
    """Where ``values`` has a value (not None), as numpy bools."""
    return np.fromiter(map(operator.is_not, values, repeat(None)), dtype=bool, count=len(values))


def _offsets(values: Sequence[Any], nulls: bool = True) -> pa.Buffer:
    """A list or map array's offsets: each value's length summed (a null: no entries)."""
    lengths = map(len, [() if v is None else v for v in values] if nulls else values)
    return pa.py_buffer(array.array("i", accumulate(lengths, initial=0)))


def text_scalar(value: str) -> pa.Scalar:
    """``value`` as an Arrow scalar, for a compute function's argument (``pa.scalar`` would import pandas)."""
    return texts([value])[0]


def int_scalar(value: int) -> pa.Scalar:
    """``value`` as an Arrow int64 scalar (see :func:`text_scalar`)."""
    return ints([value])[0]


def repeated_text(value: str, n: int) -> pa.Array:
    """``value`` ``n`` times (``pa.repeat`` of a scalar taken from an array: ``pa.scalar`` would import pandas)."""
    return pa.repeat(text_scalar(value), n)


def empty(type_: pa.DataType) -> pa.Array:
    """An array of ``type_`` with no values."""
    return pa.nulls(0, type_)


def _variable(
    data: bytes, lengths: Iterable[int], values: Sequence[object], nulls: bool, type_: pa.DataType
) -> pa.Array:
    """The string or binary array of ``values`` (``nulls``: some are None), whose bytes one after the other are
    ``data``, each value ``lengths`` long. The offsets are summed in C (``accumulate`` into an int32 ``array``):
    a few numpy calls would cost a ten-event batch more than its values do."""
    try:
        offsets = array.array("i", accumulate(lengths, initial=0))
    except OverflowError:
        return pa.array(values, type_)  # past 2 GiB in one array: Arrow's own answer
    valid = _valid(values) if nulls else None
    return pa.Array.from_buffers(type_, len(values), [validity(valid), pa.py_buffer(offsets), pa.py_buffer(data)])


def int_values(array: pa.Array) -> np.ndarray:
    """An integer array's values as numpy, without a copy (a null's slot holds whatever is there): ``to_numpy``
    imports pandas, even for a plain integer array."""
    width = array.type.bit_width // 8
    return np.frombuffer(array.buffers()[1], dtype=np.dtype(f"i{width}"))[array.offset : array.offset + len(array)]


def valid_values(array: pa.Array) -> np.ndarray:
    """Where ``array`` has a value (a numpy bool per element)."""
    if not array.null_count:
        return np.ones(len(array), dtype=bool)
    buffer = array.buffers()[0]
    if buffer is None:  # an array of the null type: no bitmap, every element null
        return np.zeros(len(array), dtype=bool)
    return _bits(buffer, array.offset, len(array))


def bool_values(array: pa.Array) -> np.ndarray:
    """A boolean array's values as numpy (a null: False)."""
    values = _bits(array.buffers()[1], array.offset, len(array))
    return values & valid_values(array) if array.null_count else values


def _bits(buffer: pa.Buffer, offset: int, n: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(buffer, dtype=np.uint8), bitorder="little")[offset : offset + n].astype(bool)


def validity(valid: np.ndarray | None) -> pa.Buffer | None:
    """Arrow's validity bitmap of ``valid`` (None when every value is there)."""
    if valid is None or valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))
