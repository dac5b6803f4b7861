"""The sink's Avro: a struct column written as registered Avro bodies, content type ``avro/binary+<id>``.

The schema is registered (or found: registering a schema already there returns its id) once per query, on
the driver, when Spark makes the writer; the executors only encode. The bodies are what the official
encoders (Python ``AvroEncoder``, JavaScript ``AvroSerializer``, .NET, Java) decode: a plain Avro body (no
header, no fingerprint) and the schema id in the content type.
"""

from __future__ import annotations

import functools
import io
import json
from dataclasses import dataclass
from typing import Any

from ..errors import SinkError
from .registry import Registry
from .types import SchemaError, avro_of_spark, full_name, parse


@dataclass(frozen=True)
class AvroWriting:
    """What a sink task needs to write Avro: the schema and its id (plain data, pickled to the executors)."""

    schema: str
    schema_id: str
    column: str = "value"

    @property
    def content_type(self) -> str:
        return f"avro/binary+{self.schema_id}"

    @functools.cached_property
    def _parsed(self) -> Any:
        import fastavro

        return fastavro.parse_schema(json.loads(self.schema))

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_parsed"}

    def encode(self, values: list[Any]) -> list[bytes]:
        """Each value's Avro body; a value the schema cannot hold is an error naming the row and the field."""
        from fastavro import schemaless_writer

        parsed = self._parsed
        out = io.BytesIO()
        ends: list[int] = []
        for row, value in enumerate(values):
            if value is not None and not isinstance(value, dict):
                value = value.asDict(recursive=True)  # a Row (Spark 4.0's stream sink passes rows)
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
    return AvroWriting(text, registry.register(group, full_name(parsed_json), text), column)


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
