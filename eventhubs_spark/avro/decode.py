"""Avro bodies into a struct column, a record batch at a time, in the executor's batch path.

Each batch's rows are grouped by the schema id their content type names (``avro/binary+<id>``, the official
encoders' format); the bodies of one id are decoded in one call into fastavro's compiled reader, as an Avro
object container of one block per body (its header carries the writer schema), with the reader schema for
Avro's schema resolution when the two differ. One call per group instead of one per event is what makes
this fast (``bench/avro``): fastavro's per-call set-up costs more than decoding a small record. A copy of the
first body at the end proves the bodies were read on their boundaries (:meth:`Decoder.decode`); when it does
not, the group is read again one block per body, so a body that is too short fails alone and one with bytes to
spare cannot shift the next body's fields.

The decoder works on the schemas with their logical types taken off (:func:`.types.plain`), so dates,
timestamps and decimals arrive as ints, longs and bytes, become Arrow arrays at once, and are converted
column by column (:func:`convert`).

Bad records follow Spark's readers' modes: ``FAILFAST`` (the default) fails the task with an error naming the
partition, the sequence number and the schema id; ``PERMISSIVE`` makes the record's ``value`` null and fills the
corrupt-record column with the body and the error. A message without an Avro content type, a schema id the
registry does not have and a writer schema that cannot be resolved to the reader's are bad records too, each
with its own message; an unreachable registry is not (it says nothing about the record) and fails the task.
"""

from __future__ import annotations

import functools
import io
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..arrow import ARROW_SCHEMA
from ..errors import EventHubsError
from . import types
from .registry import Registry, RegistryError, schema_id

FAILFAST, PERMISSIVE = "FAILFAST", "PERMISSIVE"
CORRUPT_TYPE = pa.struct([pa.field("body", pa.binary()), pa.field("error", pa.string())])
_BODY = ARROW_SCHEMA.get_field_index("body")
_PARTITION = ARROW_SCHEMA.get_field_index("partition")
_SEQUENCE = ARROW_SCHEMA.get_field_index("sequenceNumber")
_SYSTEM = ARROW_SCHEMA.get_field_index("systemProperties")


class AvroDecodeError(EventHubsError):
    """A record the reader schema cannot be read from (FAILFAST): names the partition, sequence number and id."""


@dataclass(frozen=True)
class AvroReading:
    """How the source reads Avro bodies: plain data, pickled to the executors with the reader."""

    registry: Registry
    reader_schema: str  # the reader schema's JSON (given, or fetched by id on the driver)
    mode: str = FAILFAST
    corrupt_column: str = "_corrupt_record"

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

    def ddl(self) -> str:
        """Those columns in Spark DDL, to follow the source's own."""
        text = f"value {types.spark_type(self.column)}"
        if self.mode == PERMISSIVE:
            text += f", `{self.corrupt_column}` struct<body: binary, error: string>"
        return text

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with the decoded columns added after the source's own."""
        n = batch.num_rows
        values: list[Any] = [None] * n
        errors: dict[int, str] = {}
        content = pc.map_lookup(batch.column(_SYSTEM), pa.scalar("content-type"), "first")
        encoded = content.dictionary_encode()
        kinds = encoded.dictionary.to_pylist()
        indices = encoded.indices.to_numpy(zero_copy_only=False)
        bodies = batch.column(_BODY)
        nulls = content.is_null().to_numpy(zero_copy_only=False)
        for k, kind in enumerate(kinds):
            rows = np.flatnonzero(indices == k) if len(kinds) > 1 or nulls.any() else None
            sid = schema_id(kind)
            if sid is None:
                why = (f"its content type is {kind!r}, not avro/binary+<schema id> (the Schema Registry encoders' "
                       "format): it was not written by a registry Avro encoder")  # fmt: skip
                self._bad(batch, rows, why, sid, errors)
                continue
            try:
                decoder = _decoder(self.registry, sid, self.reader_schema)
            except _Unusable as exc:
                self._bad(batch, rows, str(exc), sid, errors)
                continue
            decoded, failed = decoder.decode(bodies if rows is None else bodies.take(pa.array(rows)))
            if failed and self.mode == FAILFAST:
                i = min(failed)
                self._fail(batch, i if rows is None else int(rows[i]), failed[i], sid)
            if rows is None:
                values = decoded
                for i, why in failed.items():
                    errors[i] = why
            else:
                for i, value in zip(rows.tolist(), decoded, strict=True):
                    values[i] = value
                for i, why in failed.items():
                    errors[int(rows[i])] = why
        if nulls.any():
            self._bad(batch, np.flatnonzero(nulls), "it has no content type (an Avro body written by a Schema "
                      "Registry encoder has avro/binary+<schema id>)", None, errors)  # fmt: skip
        column = convert(pa.array(values, type=self.column.plain), self.column)
        arrays = [*batch.columns, column]
        if self.mode == PERMISSIVE:
            arrays.append(_corrupt(bodies, errors, n))
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema([*batch.schema, *self.fields()]))

    def _bad(self, batch: pa.RecordBatch, rows: Any, why: str, sid: str | None, errors: dict[int, str]) -> None:
        where = range(batch.num_rows) if rows is None else rows.tolist()
        if self.mode == FAILFAST:
            for i in where:
                self._fail(batch, int(i), why, sid)
        for i in where:
            errors[int(i)] = why

    def _fail(self, batch: pa.RecordBatch, row: int, why: str, sid: str | None) -> None:
        partition = batch.column(_PARTITION)[row].as_py()
        sequence = batch.column(_SEQUENCE)[row].as_py()
        named = f" (schema id {sid})" if sid else ""
        raise AvroDecodeError(
            f"partition {partition}, sequence number {sequence}{named}: the body cannot be read as Avro with the "
            f"reader schema: {why}. eventhubs.avro.mode is FAILFAST (the default); with "
            "option('eventhubs.avro.mode', 'PERMISSIVE') such records get a null value and the body and error "
            "in the corrupt-record column instead"
        )


def _corrupt(bodies: pa.Array, errors: dict[int, str], n: int) -> pa.Array:
    if not errors:
        return pa.nulls(n, CORRUPT_TYPE)
    rows = sorted(errors)
    mask = np.ones(n, dtype=bool)
    mask[rows] = False
    body = pa.array([bodies[i].as_py() if i in errors else None for i in range(n)], type=pa.binary())
    error = pa.array([errors.get(i) for i in range(n)], type=pa.string())
    return pa.StructArray.from_arrays([body, error], fields=list(CORRUPT_TYPE), mask=pa.array(mask))


# -- one writer schema's decoder -----------------------------------------------------------------------------------


class _Unusable(Exception):
    """A schema id whose records cannot be read at all (unknown id, a writer schema that cannot resolve)."""


class Decoder:
    """Decodes bodies written with one writer schema into values of the reader schema (plain: no logical types)."""

    def __init__(self, writer: str, reader: str) -> None:
        import fastavro

        writer_plain = types.plain(json.loads(writer))
        reader_plain = types.plain(json.loads(reader))
        self._parsed_writer = fastavro.parse_schema(writer_plain)
        same = fastavro.schema.to_parsing_canonical_form(
            self._parsed_writer
        ) == fastavro.schema.to_parsing_canonical_form(fastavro.parse_schema(reader_plain))
        self._reader = None if same else fastavro.parse_schema(reader_plain)
        head = io.BytesIO()
        writer_file = fastavro.write.Writer(head, self._parsed_writer, codec="null")
        writer_file.flush()
        self._header = head.getvalue()
        self._sync = self._header[-16:]  # a container's header ends with its sync marker
        if self._reader is not None:
            # fastavro resolves the two schemas record by record: read one made-up record now, so that schemas
            # that cannot be resolved fail here, for the schema id, rather than as each record's own error
            sample = io.BytesIO()
            fastavro.schemaless_writer(sample, self._parsed_writer, _sample(writer_plain, {}, 0))
            sample.seek(0)
            fastavro.schemaless_reader(sample, self._parsed_writer, self._reader)

    def decode(self, bodies: pa.Array) -> tuple[list[Any], dict[int, str]]:
        """Each body's value (None where it failed), and why each failed body did, by index.

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
        _, offset_buffer, data_buffer = bodies.buffers()
        offsets = np.frombuffer(offset_buffer, dtype=np.int32)[bodies.offset : bodies.offset + n + 1]
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


def _sample(schema: Any, names: dict[str, Any], depth: int) -> Any:
    """A value of ``schema`` (the simplest there is: zeros, empty strings, the first symbol, the first branch)."""
    if depth > 32:
        raise ValueError("the writer schema nests too deep to check against the reader schema")
    if isinstance(schema, list):
        return _sample(schema[0], names, depth + 1) if schema else None
    if isinstance(schema, str):
        simple = {"null": None, "boolean": False, "int": 0, "long": 0, "float": 0.0, "double": 0.0, "bytes": b"",
                  "string": ""}  # fmt: skip
        if schema in simple:
            return simple[schema]
        named = names.get(schema) or next((v for k, v in names.items() if k.rsplit(".", 1)[-1] == schema), None)
        return _sample(named, names, depth + 1) if named is not None else None
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if kind in ("record", "error"):
        name = str(schema.get("name", ""))
        names[name if "." in name or not schema.get("namespace") else f"{schema['namespace']}.{name}"] = schema
        return {f["name"]: _sample(f["type"], names, depth + 1) for f in schema.get("fields", [])}
    if kind == "enum":
        names[str(schema.get("name", ""))] = schema
        return schema["symbols"][0]
    if kind == "fixed":
        names[str(schema.get("name", ""))] = schema
        return b"\0" * int(schema["size"])
    if kind == "array":
        return []
    if kind == "map":
        return {}
    return _sample(kind, names, depth + 1)


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
    if isinstance(exc, EOFError | StopIteration) or "EOF" in text or "Expected" in text:
        return f"the body is shorter than its schema needs ({type(exc).__name__}: {text[:200]})"
    return f"{type(exc).__name__}: {text[:300]}"


_DECODERS: dict[tuple[Registry, str, str], Decoder | str] = {}


def _decoder(registry: Registry, sid: str, reader: str) -> Decoder:
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
                found = Decoder(writer, reader)
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
        return pc.multiply_checked(array, pa.scalar(1000, pa.int64())).cast(column.arrow)
    if how == "micros":
        return array.cast(column.arrow)
    if how.startswith("decimal:"):
        scale = int(how.split(":", 1)[1])
        return pa.array([_decimal(v, scale) for v in array.to_pylist()], type=column.arrow)
    raise AssertionError(how)


def _decimal(raw: bytes | None, scale: int) -> Decimal | None:
    if raw is None:
        return None
    return Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)
