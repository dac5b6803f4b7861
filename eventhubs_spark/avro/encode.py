"""The sink's Avro: a struct column written as registered Avro bodies, content type ``avro/binary+<id>``.

The schema is registered (or found: registering a schema already there returns its id) once per query, on
the driver, when Spark makes the writer; the executors only encode. The bodies are what the official
encoders (Python ``AvroEncoder``, JavaScript ``AvroSerializer``, .NET, Java) decode: a plain Avro body (no
header, no fingerprint) and the schema id in the content type.
"""

from __future__ import annotations

import datetime
import functools
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from eventhubs_spark.avro.types import avro_of_spark, full_name, parse
from eventhubs_spark.codec import arrays
from eventhubs_spark.errors import SchemaError, SinkError
from eventhubs_spark.registry.client import Registry, content_type


@dataclass(frozen=True)
class AvroWriting:
    """What a sink task needs to write Avro: the schema and its id (plain data, pickled to the executors), and the
    column's Spark type (its JSON), which says how the column's Python values become what fastavro's writer takes."""

    schema: str
    schema_id: str
    spark_type: str  # the value column's Spark type, as DataType.json() gives it
    column: str = "value"

    @property
    def content_type(self) -> str:
        return content_type("Avro", self.schema_id)

    @functools.cached_property
    def _parsed(self) -> Any:
        import fastavro

        return fastavro.parse_schema(json.loads(self.schema))

    @functools.cached_property
    def _from_rows(self) -> Callable[[Any], Any] | None:
        from pyspark.sql.types import _parse_datatype_json_string

        return row_preparer(_parse_datatype_json_string(self.spark_type))

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_parsed", "_from_rows")}

    def encode_arrow(self, array: Any) -> list[bytes]:
        """Each value's Avro body, from the column as an Arrow array (Spark 4.1+'s stream sink, every batch sink).

        The column becomes Python values once, for all its rows and field by field (:func:`python_values`): Arrow's
        own ``to_pylist`` gives a map as (key, value) pairs, which fastavro's writer refuses, and converts a struct
        one scalar at a time, several times slower."""
        return self._write(python_values(array, self.column))

    def encode(self, values: list[Any]) -> list[bytes]:
        """Each value's Avro body, from rows' values (Spark 4.0's stream sink passes rows: structs as Rows, maps as
        dicts, timestamps as naive datetimes in the worker's time zone) or dicts as fastavro takes them."""
        prepare = self._from_rows
        return self._write([prepare(v) for v in values] if prepare is not None else values)

    def _write(self, values: list[Any]) -> list[bytes]:
        """Each value's Avro body; a value the schema cannot hold is an error naming the row and the field."""
        from fastavro import schemaless_writer

        parsed = self._parsed
        out = io.BytesIO()
        ends: list[int] = []
        for row, value in enumerate(values):
            try:
                schemaless_writer(out, parsed, value)
            except Exception as exc:
                raise SinkError(
                    f"row {row} of the batch: column {self.column!r} cannot be written with the Avro schema "
                    f"(schema id {self.schema_id}): {type(exc).__name__}: {str(exc)[:300]}"
                ) from None
            ends.append(out.tell())
        data = out.getbuffer()
        bodies, start = [], 0
        for end in ends:
            bodies.append(bytes(data[start:end]))
            start = end
        return bodies


def python_values(array: Any, column: str = "value") -> list[Any]:
    """An Arrow array's values as fastavro's writer takes them: structs as dicts, maps as dicts, lists as lists, the
    rest as ``to_pylist`` gives them (datetimes, dates, Decimals, bytes). Converted child array by child array, not
    value by value; a map with a key twice is an error naming ``column`` (Avro cannot hold it; nothing is dropped)."""
    import pyarrow as pa

    kind = array.type
    if pa.types.is_struct(kind):
        names = [kind.field(i).name for i in range(kind.num_fields)]
        children = [python_values(child, column) for child in array.flatten()]
        rows: list[Any] = [dict(zip(names, values, strict=True)) for values in zip(*children, strict=True)]
        if not children:
            rows = [{} for _ in range(len(array))]
        return _nulls(array, rows)
    if pa.types.is_map(kind):
        first, last, spans = _spans(array)
        keys = array.keys.slice(first, last - first).to_pylist()
        items = python_values(array.items.slice(first, last - first), column)
        rows = []
        for start, end in spans:
            one = dict(zip(keys[start:end], items[start:end], strict=True))
            if len(one) != end - start:
                raise SinkError(f"column {column!r} holds a map with a key twice, which Avro cannot write: "
                                f"{keys[start:end]}; make the keys unique")  # fmt: skip
            rows.append(one)
        return _nulls(array, rows)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        first, last, spans = _spans(array)
        values = python_values(array.values.slice(first, last - first), column)
        rows = [values[a:b] for a, b in spans]
        return _nulls(array, rows)
    if pa.types.is_timestamp(kind) and kind.unit != "ns":
        return _timestamps(array)
    return array.to_pylist()


# Nothing here asks Arrow for numpy or datetimes itself: ``to_numpy`` and a timestamp array's ``to_pylist`` import
# pandas, 0.3-0.6 s of CPU in each fresh Python worker (see codec.arrays), which Spark starts at a query's start and
# after a minute idle.


def _spans(array: Any) -> tuple[int, int, Any]:
    """A list or map array's first and last child index, and each row's (start, end) from the first."""
    offsets = arrays.int_values(array.offsets)
    first, last = int(offsets[0]), int(offsets[-1])
    return first, last, zip((offsets[:-1] - first).tolist(), (offsets[1:] - first).tolist(), strict=True)


def _nulls(array: Any, rows: list[Any]) -> list[Any]:
    """``rows`` with None where ``array`` is null."""
    if array.null_count:
        for i in np.flatnonzero(~arrays.valid_values(array)).tolist():
            rows[i] = None
    return rows


_EPOCH_UTC = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_EPOCH_NAIVE = datetime.datetime(1970, 1, 1)
_MICROS_PER = {"s": 1_000_000, "ms": 1000, "us": 1}


def _timestamps(array: Any) -> list[Any]:
    """A timestamp array's values as datetimes: aware (in UTC) where the type has a zone, naive where not, the same
    instants and wall clocks ``to_pylist`` gives, which is all Avro's timestamp types keep."""
    per = _MICROS_PER[array.type.unit]
    base = _EPOCH_UTC if array.type.tz else _EPOCH_NAIVE
    values = arrays.int_values(array).tolist()
    delta = datetime.timedelta
    if not array.null_count:
        return [base + delta(microseconds=v * per) for v in values]
    valid = arrays.valid_values(array).tolist()  # a null's slot holds whatever is there: not read
    return [base + delta(microseconds=v * per) if ok else None for v, ok in zip(values, valid, strict=True)]


def row_preparer(data_type: Any) -> Callable[[Any], Any] | None:
    """A function that makes a Python value of ``data_type`` what fastavro's writer takes, or None where the value
    is that already: a struct (a Row, or a dict) becomes a dict, a map (a dict, or Arrow's list of pairs) a dict, a
    timestamp without a zone (Spark's rows give local time for TIMESTAMP) an aware datetime. Built once per column
    type; the parts that need nothing cost nothing per value."""
    from pyspark.sql import types as T

    if isinstance(data_type, T.StructType):
        fields = [(i, f.name, row_preparer(f.dataType)) for i, f in enumerate(data_type.fields)]

        def struct(value: Any) -> Any:
            if value is None:
                return None
            if isinstance(value, dict):
                return {name: (p(value.get(name)) if p else value.get(name)) for _, name, p in fields}
            return {name: (p(value[i]) if p else value[i]) for i, name, p in fields}

        return struct
    if isinstance(data_type, T.MapType):
        inner = row_preparer(data_type.valueType)

        def mapping(value: Any) -> Any:
            if value is None:
                return None
            if isinstance(value, dict):
                return {k: inner(v) for k, v in value.items()} if inner else value
            out = {k: inner(v) for k, v in value} if inner else dict(value)  # Arrow's (key, value) pairs
            if len(out) != len(value):
                raise SinkError(f"a map holds a key twice, which Avro cannot write: {[k for k, _ in value]}; "
                                "make the keys unique")  # fmt: skip
            return out

        return mapping
    if isinstance(data_type, T.ArrayType):
        item = row_preparer(data_type.elementType)
        if item is None:
            return None
        return lambda value: None if value is None else [item(v) for v in value]
    if isinstance(data_type, T.TimestampType):
        # a naive datetime here is local time (pyspark's rows); astimezone reads it so, its fold included

        def instant(value: Any) -> Any:
            return value.astimezone(datetime.timezone.utc) if value is not None and value.tzinfo is None else value

        return instant
    return None


def writing(
    registry: Registry,
    group: str,
    data_type: Any,
    schema: str | None,
    record_name: str,
    record_namespace: str | None,
    column: str = "value",
) -> AvroWriting:
    """Driver side, once per query: the writer schema (given, or made from the column's type as Spark's
    ``to_avro`` makes it) registered in ``group``, with its id."""
    import fastavro

    if schema is None:
        parsed_json = avro_of_spark(data_type, record_name, record_namespace, column)
        text = json.dumps(parsed_json)
    else:
        text = schema
        parsed_json = parse(text, "eventhubs.avro.schema")
    try:
        fastavro.parse_schema(parsed_json)
    except Exception as exc:
        example = '{"type": "record", "name": "Reading", "fields": [{"name": "id", "type": "long"}]}'
        raise SchemaError(
            f"eventhubs.avro.schema is not a valid Avro schema ({exc}), e.g. {example}", example
        ) from None
    if schema is not None:
        _check_fields(parsed_json, data_type, column)
    name = parsed_json.get("name") if isinstance(parsed_json, dict) else None
    if not isinstance(name, str):
        raise SchemaError("eventhubs.avro.schema must be a named type (a record) to be registered", "a record schema")
    return AvroWriting(text, registry.register(group, full_name(parsed_json), text), data_type.json(), column)


def _check_fields(schema: Any, data_type: Any, column: str) -> None:
    """A given writer schema names the column's fields: a field of one missing from the other fails here, on the
    driver, not once per row on the executors."""
    from pyspark.sql.types import StructType

    if not isinstance(schema, dict) or schema.get("type") != "record" or not isinstance(data_type, StructType):
        return
    theirs = {f.get("name") for f in schema.get("fields", []) if isinstance(f, dict)}
    ours = set(data_type.fieldNames())
    if ours - theirs:
        raise SinkError(f"column {column!r} has fields {sorted(ours - theirs)} that eventhubs.avro.schema does not: "
                        "add them to the schema, or drop them from the struct")  # fmt: skip
    missing = [
        f.get("name")
        for f in schema.get("fields", [])
        if isinstance(f, dict) and f.get("name") not in ours and "default" not in f
    ]
    if missing:
        raise SinkError(f"eventhubs.avro.schema has fields {missing} without defaults that column {column!r} lacks: "
                        "add them to the struct, or give them defaults in the schema")  # fmt: skip
