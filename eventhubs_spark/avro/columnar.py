"""Avro bodies decoded a field at a time across all the bodies of a batch (numpy), straight into Arrow arrays.

A record's fields come one after another in its body, so with every body's read position in one array, each
field is one vectorized step for all rows: a varint is a few array operations over the bytes at those positions,
a string a length and a gather, a double eight bytes viewed as floats. No Python object per value, no dict per
record: this is what makes decoding into the ``value`` struct several times faster than fastavro's compiled
reader, which builds a dict per record (``bench/avro``).

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from eventhubs_spark.avro import types
from eventhubs_spark.avro.types import ARROW_PRIMITIVE as _ARROW
from eventhubs_spark.avro.types import PRIMITIVES as _PRIMITIVE
from eventhubs_spark.codec import arrays

# writer type -> reader types it may be read as (Avro 1.11 "Schema Resolution")
_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}
_SEVEN = np.arange(0, 70, 7, dtype=np.uint64)


class Unsupported(Exception):
    """A schema (or a pair of them) the columnar reader does not take: fastavro decodes it."""


class Irregular(Exception):
    """Bodies that do not decode cleanly: the exact path finds which and why."""


# A step decodes one type for the rows at ``pos`` (advancing it) and returns their Arrow array.
Step = Callable[[np.ndarray, np.ndarray, np.ndarray], pa.Array]


def reader_for(writer: Any, reader: Any) -> Step | None:
    """The columnar reader of ``writer``'s bodies as ``reader`` values (both plain: no logical types), or None
    when the pair is not one it takes."""
    try:
        return _step(writer, reader, {}, {})
    except Unsupported:
        return None


def offsets(array: pa.Array) -> np.ndarray:
    """Where each element of a binary, string or map array starts in its child (and the last one ends): the
    int32 offsets buffer, seen by numpy without a copy, for the array's own slice."""
    return np.frombuffer(array.buffers()[1], dtype=np.int32)[array.offset : array.offset + len(array) + 1]


def decode(step: Step, bodies: pa.Array) -> pa.Array:
    """All of ``bodies`` (a binary array without nulls) decoded by ``step``; :class:`Irregular` if any is not
    exactly one value."""
    n = len(bodies)
    if bodies.null_count:
        raise Irregular("a null body")
    starts = offsets(bodies).astype(np.int64)
    data_buffer = bodies.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    # eleven spare bytes: a varint's ten and a fixed read may look past the last body; a body that reads into
    # them ends past its end and is Irregular below
    padded = np.concatenate([data[: starts[-1]], np.zeros(16, np.uint8)]) if n else data
    pos = starts[:-1].copy()
    ends = starts[1:]
    array = step(padded, pos, ends)
    if not np.array_equal(pos, ends):
        raise Irregular("a body with bytes too few or to spare")
    return array


# -- building the steps ------------------------------------------------------------------------------------------


def _full(schema: Any, names: dict[str, Any]) -> Any:
    if isinstance(schema, str) and schema not in _PRIMITIVE:
        found = types.named(schema, names)
        if found is None:
            raise Unsupported(f"unknown named type {schema}")
        return names[found]
    if isinstance(schema, dict) and schema.get("type") in _PRIMITIVE and len(schema) == 1:
        return schema["type"]
    if isinstance(schema, dict) and isinstance(schema.get("type"), dict | list):
        return _full(schema["type"], names)
    return schema


def _remember(schema: Any, names: dict[str, Any]) -> None:
    if isinstance(schema, dict) and schema.get("type") in ("record", "error", "enum", "fixed"):
        names[types.full_name(schema)] = schema


def _kind(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    return str(schema.get("type"))


def _nullable(schema: Any) -> tuple[int, Any] | None:
    """For ``[null, T]`` or ``[T, null]``: (the null branch's index, T); None for any other type."""
    if isinstance(schema, list) and len(schema) == 2 and "null" in schema:
        index = schema.index("null")
        return index, schema[1 - index]
    return None


def _step(writer: Any, reader: Any, wnames: dict[str, Any], rnames: dict[str, Any]) -> Step:
    writer, reader = _full(writer, wnames), _full(reader, rnames)
    _remember(writer, wnames)
    _remember(reader, rnames)
    wkind, rkind = _kind(writer), _kind(reader)
    if wkind == "union":
        nullable, target = _nullable(writer), _nullable(reader)
        if nullable is None or target is None:
            # other unions; or [null, T] read as T, where each null is an error the exact path names
            raise Unsupported("a union other than [null, T] read as [null, T]")
        inner = _step(nullable[1], target[1], wnames, rnames)
        return _optional(nullable[0], inner, _arrow(target[1], rnames))
    if rkind == "union":
        nullable = _nullable(reader)
        if nullable is None:
            raise Unsupported("a reader union of other than null and one type")
        return _step(writer, nullable[1], wnames, rnames)  # a plain writer value read into [null, T]
    if wkind in _PRIMITIVE:
        if rkind != wkind and rkind not in _PROMOTIONS.get(wkind, set()):
            raise Unsupported(f"{wkind} read as {rkind}")
        base = _PRIMITIVE_STEPS[wkind]
        return base if rkind == wkind else _promoted(base, _ARROW[rkind])
    if wkind == "enum":
        if rkind != "enum":
            raise Unsupported("an enum read as another type")
        symbols = [str(s) for s in writer.get("symbols", [])]
        known = set(reader.get("symbols", []))
        default = reader.get("default")
        mapped = [s if s in known else default for s in symbols]
        if any(m is None for m in mapped):
            return _enum(symbols, strict=set(i for i, m in enumerate(mapped) if m is None))
        return _enum([str(m) for m in mapped], strict=set())
    if wkind == "fixed":
        if rkind != "fixed" or reader.get("size") != writer.get("size"):
            raise Unsupported("a fixed read as another type or size")
        return _fixed(int(writer["size"]))
    if wkind in ("record", "error"):
        if rkind not in ("record", "error"):
            raise Unsupported("a record read as another type")
        return _record(writer, reader, wnames, rnames)
    raise Unsupported(f"{wkind} values")


def _arrow(schema: Any, names: dict[str, Any]) -> pa.DataType:
    """The plain Arrow type a reader schema's values take: :func:`~eventhubs_spark.avro.types.column`'s (the
    decoded array must be it)."""
    try:
        return types.column(schema, names).plain
    except types.SchemaError as exc:
        raise Unsupported(str(exc)) from None


def _record(writer: Any, reader: Any, wnames: dict[str, Any], rnames: dict[str, Any]) -> Step:
    rfields = reader.get("fields", [])
    if any(f.get("aliases") for f in rfields) or reader.get("aliases"):
        raise Unsupported("aliases")
    wanted = {str(f["name"]): f for f in rfields}
    steps: list[tuple[str | None, Step]] = []  # in the writer's order: (the reader field it fills, or None)
    for f in writer.get("fields", []):
        name = str(f["name"])
        if name in wanted:
            steps.append((name, _step(f["type"], wanted[name]["type"], wnames, rnames)))
        else:
            steps.append((None, _step(f["type"], f["type"], wnames, dict(wnames))))  # read past it
    written = {name for name, _ in steps if name is not None}
    defaults: dict[str, tuple[pa.DataType, Any]] = {}
    for f in rfields:
        name = str(f["name"])
        if name not in written:
            if "default" not in f:
                raise Unsupported(f"field {name} has no default")  # fastavro says so, per the spec
            default = f["default"]
            if isinstance(default, dict | list):
                raise Unsupported("a complex default")
            defaults[name] = (_arrow(f["type"], rnames), default)
    rtype = _arrow(reader, dict(rnames))

    def step(data: np.ndarray, pos: np.ndarray, ends: np.ndarray) -> pa.Array:
        got: dict[str, pa.Array] = {}
        for name, field_step in steps:
            array = field_step(data, pos, ends)
            if name is not None:
                got[name] = array
        n = len(pos)
        children = []
        for field in rtype:
            if field.name in got:
                children.append(got[field.name])
            else:
                arrow, default = defaults[field.name]
                if isinstance(default, str) and arrow == pa.binary():
                    default = default.encode("latin-1")  # Avro writes a bytes default as a string of code points
                children.append(arrays.from_values([default] * n, arrow) if default is not None else pa.nulls(n, arrow))
        return pa.StructArray.from_arrays(children, fields=list(rtype))

    return step


# -- the steps for each type ------------------------------------------------------------------------------------


def _varint(data: np.ndarray, pos: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The zig-zag varints at ``pos`` (advanced past them), as int64: one gather per byte of the longest."""
    start = pos.copy()
    byte = data[start]
    result = (byte & 0x7F).astype(np.uint64)
    length = np.ones(len(pos), dtype=np.int64)
    rows = np.flatnonzero(byte & 0x80)
    k = 1
    while len(rows):
        if k == 10:
            raise Irregular("a varint longer than ten bytes")
        byte = data[start[rows] + k]
        result[rows] |= (byte & 0x7F).astype(np.uint64) << _SEVEN[k]
        length[rows] += 1
        rows = rows[(byte & 0x80) != 0]
        k += 1
    pos += length
    if (pos > ends).any():
        raise Irregular("a value past its body's end")
    return (result >> np.uint64(1)).astype(np.int64) ^ -(result & np.uint64(1)).astype(np.int64)


def _long(data: np.ndarray, pos: np.ndarray, ends: np.ndarray) -> pa.Array:
    return arrays.numbers(_varint(data, pos, ends), pa.int64())


def _int(data: np.ndarray, pos: np.ndarray, ends: np.ndarray) -> pa.Array:
    values = _varint(data, pos, ends)
    if len(values) and (values.min() < -(2**31) or values.max() >= 2**31):
        raise Irregular("an int out of range")
    return arrays.numbers(values.astype(np.int32), pa.int32())


def _sized(width: int, dtype: str, arrow: pa.DataType) -> Step:
    lanes = np.arange(width, dtype=np.int64)

    def step(data: np.ndarray, pos: np.ndarray, ends: np.ndarray) -> pa.Array:
        raw = data[pos[:, None] + lanes]
        pos += width
        if (pos > ends).any():
            raise Irregular("a value past its body's end")
        return arrays.numbers(np.ascontiguousarray(raw).view(dtype).ravel(), arrow)

    return step


def _boolean(data: np.ndarray, pos: np.ndarray, ends: np.ndarray) -> pa.Array:
    raw = data[pos]
    pos += 1
    if (pos > ends).any() or (raw > 1).any():
        raise Irregular("a boolean that is not 0 or 1")
    return arrays.booleans(raw.astype(bool))


def _null(data: np.ndarray, pos: np.ndarray, ends: np.ndarray) -> pa.Array:
    return pa.nulls(len(pos))


def _bytes_like(arrow: pa.DataType) -> Step:
    def step(data: np.ndarray, pos: np.ndarray, ends: np.ndarray) -> pa.Array:
        lengths = _varint(data, pos, ends)
        if (lengths < 0).any():
            raise Irregular("a negative length")
        array = _gather(data, pos, lengths, arrow)
        pos += lengths
        if (pos > ends).any():
            raise Irregular("a value past its body's end")
        return array

    return step


def _gather(data: np.ndarray, pos: np.ndarray, lengths: np.ndarray, arrow: pa.DataType) -> pa.Array:
    """The byte strings of ``lengths`` at ``pos``, as one Arrow array (a gather into one contiguous buffer)."""
    out_offsets = np.zeros(len(pos) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_offsets[1:])
    total = int(out_offsets[-1])
    if total >= 2**31:
        raise Irregular("more than 2 GiB of strings in one batch")
    index = np.repeat(pos - out_offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
    index = np.minimum(index, len(data) - 1)  # a string past the end fails the check after; read in bounds
    values = data[index]
    array = pa.Array.from_buffers(arrow, len(pos), [None, pa.py_buffer(out_offsets.astype(np.int32)),
                                                    pa.py_buffer(values)])  # fmt: skip
    if arrow == pa.string():
        try:
            array.validate(full=True)  # UTF-8
        except pa.ArrowInvalid:
            raise Irregular("a string that is not UTF-8") from None
    return array


def _fixed(size: int) -> Step:
    def step(data: np.ndarray, pos: np.ndarray, ends: np.ndarray) -> pa.Array:
        array = _gather(data, pos, np.full(len(pos), size, dtype=np.int64), pa.binary())
        pos += size
        if (pos > ends).any():
            raise Irregular("a value past its body's end")
        return array

    return step


def _enum(symbols: list[str], strict: set[int]) -> Step:
    dictionary = arrays.texts(symbols)

    def step(data: np.ndarray, pos: np.ndarray, ends: np.ndarray) -> pa.Array:
        index = _varint(data, pos, ends)
        if len(index) and (index.min() < 0 or index.max() >= len(symbols)):
            raise Irregular("an enum index out of range")
        if strict and np.isin(index, list(strict)).any():
            raise Irregular("an enum symbol the reader does not know")
        return dictionary.take(arrays.indices(index))

    return step


def _optional(null_index: int, inner: Step, arrow: pa.DataType) -> Step:
    def step(data: np.ndarray, pos: np.ndarray, ends: np.ndarray) -> pa.Array:
        branch = _varint(data, pos, ends)
        if len(branch) and (branch.min() < 0 or branch.max() > 1):
            raise Irregular("a union branch out of range")
        present = branch != null_index
        rows = np.flatnonzero(present)
        if len(rows) == len(pos):
            return inner(data, pos, ends)
        if not len(rows):
            return pa.nulls(len(pos), arrow)
        sub = pos[rows]
        values = inner(data, sub, ends[rows])
        pos[rows] = sub
        take = np.cumsum(present) - 1
        return values.take(arrays.indices(take, valid=present))

    return step


def _promoted(base: Step, arrow: pa.DataType) -> Step:
    def step(data: np.ndarray, pos: np.ndarray, ends: np.ndarray) -> pa.Array:
        try:
            return base(data, pos, ends).cast(arrow)
        except pa.ArrowInvalid:
            raise Irregular("bytes that are not UTF-8, read as a string") from None

    return step


_PRIMITIVE_STEPS: dict[str, Step] = {
    "null": _null,
    "boolean": _boolean,
    "int": _int,
    "long": _long,
    "float": _sized(4, "<f4", pa.float32()),
    "double": _sized(8, "<f8", pa.float64()),
    "bytes": _bytes_like(pa.binary()),
    "string": _bytes_like(pa.string()),
}
