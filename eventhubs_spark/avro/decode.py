"""Avro bodies into a struct column, a record batch at a time, in the executor's batch path.

Rows are grouped by the schema id their content type names; a group decodes field by field across its bodies
(:mod:`eventhubs_spark.avro.columnar`) where it can, else by fastavro with Avro's schema resolution. Bad records
follow Spark's readers' modes (``FAILFAST``, ``PERMISSIVE`` with a corrupt-record column).

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import functools
import io
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eventhubs_spark import defaults
from eventhubs_spark.avro import columnar, types
from eventhubs_spark.codec import arrays
from eventhubs_spark.codec.schema import ARROW_SCHEMA
from eventhubs_spark.errors import AvroDecodeError, RegistryError
from eventhubs_spark.registry.client import Registry, schema_id

FAILFAST, PERMISSIVE = "FAILFAST", "PERMISSIVE"
CORRUPT_TYPE = pa.struct([pa.field("body", pa.binary()), pa.field("error", pa.string())])
_BODY = ARROW_SCHEMA.get_field_index("body")
_PARTITION = ARROW_SCHEMA.get_field_index("partition")
_SEQUENCE = ARROW_SCHEMA.get_field_index("sequenceNumber")
_SYSTEM = ARROW_SCHEMA.get_field_index("systemProperties")
# a compute argument made from an array (pa.scalar, which pyarrow.compute calls on a Python value, imports pandas)
_CONTENT_TYPE = arrays.text_scalar("content-type")


@dataclass(frozen=True)
class AvroReading:
    """How the source reads Avro bodies: plain data, pickled to the executors with the reader."""

    registry: Registry
    reader_schema: str  # the reader schema's JSON (given, or fetched by id on the driver)
    mode: str = defaults.AVRO_MODE
    corrupt_column: str = defaults.AVRO_CORRUPT_COLUMN

    @functools.cached_property
    def column(self) -> types.Column:
        """The reader schema's layout in Arrow (worked out once per process, not pickled along)."""
        return types.column(types.parse(self.reader_schema, "eventhubs.avro.schema"))

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "column"}

    def fields(self) -> list[pa.Field]:
        """The columns the source adds after its own: ``value`` (and the corrupt-record column in PERMISSIVE)."""
        out = [pa.field("value", self.column.arrow)]
        if self.mode == PERMISSIVE:
            out.append(pa.field(self.corrupt_column, CORRUPT_TYPE))
        return out

    def source_fields(self, own: pa.Schema) -> list[pa.Field]:
        """The read's columns: the source's own ``own`` (the body among them), then those of :meth:`fields`."""
        return [*own, *self.fields()]

    def ddl(self) -> str:
        """Those columns in Spark DDL, to follow the source's own."""
        text = f"value {types.spark_type(self.column)}"
        if self.mode == PERMISSIVE:
            text += f", `{self.corrupt_column}` struct<body: binary, error: string>"
        return text

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with the decoded columns added after the source's own."""
        n = batch.num_rows
        plain = self.column.plain
        errors: dict[int, tuple[str, str | None]] = {}  # by row: why, and the schema id it named
        pieces: list[tuple[np.ndarray | None, pa.Array]] = []  # (its rows, None: all; their values)
        content = content_types(batch.column(_SYSTEM))
        encoded = content.dictionary_encode()
        kinds = encoded.dictionary.to_pylist()
        indices = np.where(arrays.valid_values(encoded.indices), arrays.int_values(encoded.indices), -1)
        bodies = batch.column(_BODY)
        nulls = ~arrays.valid_values(content)
        for k, kind in enumerate(kinds):
            rows = np.flatnonzero(indices == k) if len(kinds) > 1 or nulls.any() else None
            sid = schema_id(kind)
            if sid is None:
                why = (f"its content type is {kind!r}, not avro/binary+<schema id> (the Schema Registry encoders' "
                       "format): it was not written by a registry Avro encoder")  # fmt: skip
                self._bad(n, rows, why, None, errors)
                continue
            try:
                decoder = _decoder(self.registry, sid, self.reader_schema, plain)
            except _Unusable as exc:
                self._bad(n, rows, str(exc), sid, errors)
                continue
            array, failed = decoder.decode(bodies if rows is None else bodies.take(arrays.indices(rows)))
            pieces.append((rows, array))
            for i, why in failed.items():
                errors[i if rows is None else int(rows[i])] = (why, sid)
        if nulls.any():
            self._bad(n, np.flatnonzero(nulls), "it has no content type (an Avro body written by a Schema "
                      "Registry encoder has avro/binary+<schema id>)", None, errors)  # fmt: skip
        if errors and self.mode == FAILFAST:
            self._fail(batch, min(errors), *errors[min(errors)])
        if len(pieces) == 1 and pieces[0][0] is None:
            array = pieces[0][1]
        else:  # several schema ids (or bad rows): each piece's values back to their rows
            placed = [rows if rows is not None else np.arange(n) for rows, _ in pieces]
            covered = np.zeros(n, dtype=bool)
            for rows in placed:
                covered[rows] = True
            rest = np.flatnonzero(~covered)
            order = np.concatenate([*placed, rest]) if placed else rest
            combined = pa.concat_arrays([*(a for _, a in pieces), pa.nulls(len(rest), plain)])
            array = combined.take(arrays.indices(np.argsort(order, kind="stable")))
        columns = [*batch.columns, convert(array, self.column)]
        if self.mode == PERMISSIVE:
            columns.append(_corrupt(bodies, errors, n))
        return pa.RecordBatch.from_arrays(columns, schema=pa.schema([*batch.schema, *self.fields()]))

    @staticmethod
    def _bad(n: int, rows: np.ndarray | None, why: str, sid: str | None,
             errors: dict[int, tuple[str, str | None]]) -> None:  # fmt: skip
        for i in range(n) if rows is None else rows.tolist():
            errors[int(i)] = (why, sid)

    @staticmethod
    def _fail(batch: pa.RecordBatch, row: int, why: str, sid: str | None) -> NoReturn:
        partition = batch.column(_PARTITION)[row].as_py()
        sequence = batch.column(_SEQUENCE)[row].as_py()
        named = f" (schema id {sid})" if sid else ""
        raise AvroDecodeError(
            f"partition {partition}, sequence number {sequence}{named}: the body cannot be read as Avro with the "
            f"reader schema: {why}. eventhubs.avro.mode is FAILFAST (the default); with "
            "option('eventhubs.avro.mode', 'PERMISSIVE') such records get a null value and the body and error "
            "in the corrupt-record column instead"
        )


def content_types(system: pa.Array) -> pa.Array:
    """Each row's ``content-type`` among its system properties (null where it has none), found over the map's
    flattened keys at once (measured 4x ``pyarrow.compute.map_lookup``, which goes row by row)."""
    n = len(system)
    offsets = columnar.offsets(system)
    entries = system.values
    keys, items = entries.field(0), entries.field(1)
    first, last = int(offsets[0]), int(offsets[-1])
    hit = pc.equal(keys.slice(first, last - first), _CONTENT_TYPE)
    where = np.flatnonzero(arrays.bool_values(hit)) + first  # a null (no key) reads as False
    index = np.full(n, -1, dtype=np.int64)
    if len(where):
        rows = np.searchsorted(offsets, where, side="right") - 1
        rows, firsts = np.unique(rows, return_index=True)  # a key twice: the first one, as map_lookup
        index[rows] = where[firsts]
    if system.null_count:
        index[~arrays.valid_values(system)] = -1
    return items.take(arrays.indices(index, valid=index >= 0))


def _corrupt(bodies: pa.Array, errors: dict[int, tuple[str, str | None]], n: int) -> pa.Array:
    if not errors:
        return pa.nulls(n, CORRUPT_TYPE)
    rows = sorted(errors)
    mask = np.ones(n, dtype=bool)
    mask[rows] = False
    body = arrays.binaries([bodies[i].as_py() if i in errors else None for i in range(n)])
    error = arrays.texts([_said(*errors[i]) if i in errors else None for i in range(n)])
    return pa.StructArray.from_arrays([body, error], fields=list(CORRUPT_TYPE), mask=arrays.booleans(mask))


def _said(why: str, sid: str | None) -> str:
    return f"{why} (schema id {sid})" if sid and sid not in why else why


# -- one writer schema's decoder -----------------------------------------------------------------------------------


class _Unusable(Exception):
    """A schema id whose records cannot be read at all (unknown id, a writer schema that cannot resolve)."""


class Decoder:
    """Decodes bodies written with one writer schema into values of the reader schema (plain: no logical types)."""

    def __init__(self, writer: str, reader: str, plain: pa.DataType | None = None) -> None:
        import fastavro

        writer_plain = types.plain(json.loads(writer))
        reader_plain = types.plain(json.loads(reader))
        self._parsed_writer = fastavro.parse_schema(writer_plain)
        parsed_reader = fastavro.parse_schema(reader_plain)
        canonical = fastavro.schema.to_parsing_canonical_form
        same = canonical(self._parsed_writer) == canonical(parsed_reader)
        self._reader = None if same else parsed_reader
        self._plain = plain if plain is not None else types.column(json.loads(reader)).plain
        self._columnar = columnar.reader_for(writer_plain, reader_plain)
        head = io.BytesIO()
        writer_file = fastavro.write.Writer(head, self._parsed_writer, codec="null")
        writer_file.flush()
        self._header = head.getvalue()
        self._sync = self._header[-16:]  # a container's header ends with its sync marker

    def decode(self, bodies: pa.Array) -> tuple[pa.Array, dict[int, str]]:
        """The bodies' values (the reader schema's plain Arrow type; null where a body failed), and why each
        failed body did, by index: field by field over all bodies (:mod:`eventhubs_spark.avro.columnar`) where the
        schemas allow and every body is regular, else through fastavro (:meth:`values`)."""
        if self._columnar is not None:
            try:
                return columnar.decode(self._columnar, bodies), {}
            except columnar.Irregular:
                pass  # some body is not regular: the exact path below finds which
        values, failed = self.values(bodies)
        return arrays.from_values(values, self._plain), failed  # (pa.array would import pandas: codec.arrays)

    def values(self, bodies: pa.Array) -> tuple[list[Any], dict[int, str]]:
        """Each body's value through fastavro (None where it failed), and why each failed body did, by index.

        First all bodies as one block, followed by a copy of the first: fastavro's compiled loop at full speed
        (measured 2x one block per body), on the bytes the Arrow array already holds end to end (no Python
        object per body). A block does not say where each record ends, so a body with bytes to spare (or too
        few) would shift the next record's fields unseen: the copy read back as the first body's value shows
        that every body ended where the next began. Anything else (an error, a copy that differs) and the group
        is read again one block per body, which finds each bad body and confines it."""
        import fastavro

        n = len(bodies)
        if n == 0:
            return [], {}
        offsets = columnar.offsets(bodies)
        data_buffer = bodies.buffers()[2]
        first, last = int(offsets[0]), int(offsets[-1])
        joined = data_buffer[first:last].to_pybytes() if data_buffer is not None else b""
        head = joined[: int(offsets[1]) - first]
        data = b"".join((self._header, _zigzag(n + 1), _zigzag(len(joined) + len(head)), joined, head, self._sync))
        try:
            values = list(fastavro.reader(io.BytesIO(data), reader_schema=self._reader))
        except Exception:  # a bad body among them: find it
            values = []
        if len(values) == n + 1 and values[-1] == values[0]:
            values.pop()
            return values, {}
        return self._one_by_one([b or b"" for b in bodies.to_pylist()])

    def _one_by_one(self, bodies: list[bytes]) -> tuple[list[Any], dict[int, str]]:
        """One block per body: a body that is too short fails alone (the ones after it are read on)."""
        import fastavro

        values: list[Any] = []
        failed: dict[int, str] = {}
        start = 0
        while start < len(bodies):
            part = bodies[start:] if start else bodies
            got: list[Any] = []
            try:
                got.extend(fastavro.reader(io.BytesIO(self._container(part)), reader_schema=self._reader))
            except Exception as exc:  # the record at len(got) is bad: note it, go on after it
                values.extend(got)
                values.append(None)
                failed[start + len(got)] = _why(exc)
                start += len(got) + 1
                continue
            values.extend(got)
            break
        return values, failed

    def _container(self, bodies: list[bytes]) -> bytes:
        sync = self._sync
        lengths = _LENGTHS
        parts = [self._header]
        append = parts.append
        for raw in bodies:
            size = len(raw)
            append(lengths[size] if size < len(lengths) else b"\x02" + _zigzag(size))
            append(raw)
            append(sync)
        return b"".join(parts)


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# a block's head for bodies shorter than 4 KiB: its record count (1) and its size, zig-zag varints
_LENGTHS = [b"\x02" + _zigzag(size) for size in range(4096)]


def _why(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    if type(exc).__name__ == "SchemaResolutionError":  # per datum: a union's branch, a field without a default
        return f"the writer schema cannot be resolved to the reader schema by Avro's rules ({text[:300]})"
    if isinstance(exc, EOFError | StopIteration) or "EOF" in text or "Expected" in text:
        return f"the body is shorter than its schema needs ({type(exc).__name__}: {text[:200]})"
    return f"{type(exc).__name__}: {text[:300]}"


_DECODERS: dict[tuple[Registry, str, str], Decoder | str] = {}


def _decoder(registry: Registry, sid: str, reader: str, plain: pa.DataType) -> Decoder:
    """Schema ``sid``'s decoder into ``reader`` (kept per process: the writer schema is fetched once)."""
    key = (registry, sid, reader)
    found = _DECODERS.get(key)
    if found is None:
        try:
            writer = registry.schema(sid)
        except RegistryError as exc:
            if exc.retriable:  # unreachable: says nothing about the record; the task fails, Spark retries it
                raise
            found = str(exc)
        else:
            try:
                found = Decoder(writer, reader, plain)
            except Exception as exc:
                found = (f"the writer schema {sid} cannot be resolved to the reader schema by Avro's rules "
                         f"({type(exc).__name__}: {str(exc)[:300]})")  # fmt: skip
        _DECODERS[key] = found
    if isinstance(found, str):
        raise _Unusable(found)
    return found


# -- plain values to the reader schema's column types ------------------------------------------------------------


def convert(array: pa.Array, column: types.Column) -> pa.Array:
    """``array`` (of ``column.plain``) as ``column.arrow``: dates, timestamps and decimals from ints, longs and
    bytes, inside structs, lists and maps too."""
    how = column.convert
    if how is None:
        return array
    if how == "struct":
        if column.plain == column.arrow:
            return array
        children = [convert(array.field(i), c) for i, c in enumerate(column.children)]
        mask = array.is_null() if array.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(column.arrow), mask=mask)
    if how == "list":
        if column.plain == column.arrow:
            return array
        values = convert(array.values, column.children[0])
        return pa.ListArray.from_arrays(array.offsets, values, type=column.arrow, mask=array.is_null())
    if how == "map":
        if column.plain == column.arrow:
            return array
        items = convert(array.items, column.children[0])
        return pa.MapArray.from_arrays(array.offsets, array.keys, items, type=column.arrow, mask=array.is_null())
    if how == "date":
        return array.cast(pa.date32())
    if how == "millis":
        return pc.multiply_checked(array, arrays.int_scalar(1000)).cast(column.arrow)
    if how == "micros":
        return array.cast(column.arrow)
    if how.startswith("decimal:"):
        return _decimals(array, column.arrow)
    raise AssertionError(how)


def _decimals(array: pa.Array, arrow: pa.DataType) -> pa.Array:
    """Avro decimals (each a big-endian two's-complement unscaled integer, as many bytes as its writer chose) as
    Arrow's decimal128 (16 bytes little-endian each), all at once: each value's bytes placed at the right of its
    row of sign bytes, the rows reversed. Arrow's cast to the column's precision refuses a value that does not fit
    it, as ``pa.array`` of ``Decimal`` objects did (which also imported pandas and made an object per value).
    A value longer than 16 bytes (sign bytes to spare, or too large) goes row by row."""
    n = len(array)
    offsets = columnar.offsets(array).astype(np.int64)
    starts, lengths = offsets[:-1], np.diff(offsets)
    if n == 0 or lengths.max() > 16:
        return _decimals_by_row(array, arrow)
    data = np.frombuffer(array.buffers()[2], dtype=np.uint8) if lengths.any() else np.zeros(1, dtype=np.uint8)
    out = np.zeros((n, 16), dtype=np.uint8)
    out[(lengths > 0) & (data[np.minimum(starts, len(data) - 1)] >= 0x80)] = 0xFF  # negative: sign bytes of ones
    rows = np.repeat(np.arange(n), lengths)
    within = np.arange(len(rows)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[rows, 16 - lengths[rows] + within] = data[starts[rows] + within]
    little = np.ascontiguousarray(out[:, ::-1])
    valid = arrays.valid_values(array) if array.null_count else None
    wide = pa.Array.from_buffers(pa.decimal128(38, arrow.scale), n, [arrays.validity(valid), pa.py_buffer(little)])
    return wide.cast(arrow)


def _decimals_by_row(array: pa.Array, arrow: pa.DataType) -> pa.Array:
    return pa.array([_decimal(v, arrow.scale) for v in array.to_pylist()], type=arrow)


def _decimal(raw: bytes | None, scale: int) -> Decimal | None:
    if raw is None:
        return None
    return Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)
