"""The sink's JSON bodies with a schema in the Schema Registry: each row's value column as compact JSON, sent with
content type ``application/json;serialization=Json+<schema id>``, which the official ``JsonSchemaEncoder`` decodes.

A value is written as Spark's ``to_json`` writes it, less what JSON Schema's types ask otherwise: a null field is left
out, a timestamp is RFC 3339 text in UTC (``format: date-time``), a date ``YYYY-MM-DD``, binary base64 text, a
decimal a number in its own digits (``12345678901234567890.123456789012345678``, not a double's 17); NaN and the
infinities, which JSON has no text for, fail the write naming the column.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eventhubs_spark.avro.encode import python_values, row_preparer
from eventhubs_spark.errors import SchemaError, SinkError
from eventhubs_spark.json_bodies.json_schema import of_spark
from eventhubs_spark.registry.client import Registry, content_type


@dataclass(frozen=True)
class JsonWriting:
    """What a sink task needs to write registered JSON (plain data, pickled to the executors): the schema and its
    id, the column's Spark type (its JSON), and, when eventhubs.json.validate is on, whether to check each body."""

    schema: str
    schema_id: str
    spark_type: str  # the value column's Spark type, as DataType.json() gives it
    column: str = "value"
    validate: bool = False

    @property
    def content_type(self) -> str:
        return content_type("Json", self.schema_id)

    @functools.cached_property
    def _from_rows(self) -> Callable[[Any], Any] | None:
        from pyspark.sql.types import _parse_datatype_json_string

        return row_preparer(_parse_datatype_json_string(self.spark_type))

    @functools.cached_property
    def _validator(self) -> Any:
        from eventhubs_spark.json_bodies.registered import validator

        return validator(self.schema, f"schema id {self.schema_id}")

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_from_rows", "_validator")}

    def encode_arrow(self, array: Any) -> list[bytes]:
        """Each value's body, from the column as an Arrow array (Spark 4.1+'s stream sink, every batch sink)."""
        return self._write(python_values(array, self.column))

    def encode(self, values: list[Any]) -> list[bytes]:
        """Each value's body, from rows' values (Spark 4.0's stream sink passes rows: structs as Rows, timestamps as
        naive datetimes in the worker's time zone)."""
        prepare = self._from_rows
        return self._write([prepare(v) for v in values] if prepare is not None else values)

    def _write(self, values: list[Any]) -> list[bytes]:
        validator = self._validator if self.validate else None
        bodies = []
        for row, value in enumerate(values):
            if value is None:
                raise SinkError(f"row {row} of the batch: column {self.column!r} is null; every event needs a value")
            exact: list[bool] = []
            try:
                document = plain(value, exact)
            except ValueError:
                raise SinkError(f"row {row} of the batch: column {self.column!r}: {_not_finite(value)}, which JSON "
                                "has no number for") from None  # fmt: skip
            if validator is not None:
                problem = validator(document)
                if problem is not None:
                    raise SinkError(f"row {row} of the batch: column {self.column!r} does not validate against schema "
                                    f"id {self.schema_id} (eventhubs.json.validate): {problem}")  # fmt: skip
            if exact:  # a decimal with a fraction: its own digits, not a double's
                bodies.append(_exact_text(document).encode())
            else:
                bodies.append(json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode())
        return bodies


def writing(registry: Registry, group: str | None, data_type: Any, schema_id: str | None, name: str, validate: bool,
            column: str = "value") -> JsonWriting:  # fmt: skip
    """Driver side, once per query: the schema to write with, its id and text: the registered one
    eventhubs.json.schemaId names (its properties must name the column's fields), else one made from the column's
    type and registered in ``group`` under ``name`` (registering a schema already there returns its id)."""
    if schema_id:
        text = registry.schema(schema_id, context=" (eventhubs.json.schemaId)")
        _check_fields(json.loads(text), data_type, schema_id)
    else:
        text = json.dumps(of_spark(data_type, name), separators=(",", ":"))
        schema_id = registry.register(str(group), name, text, "Json")
    found = JsonWriting(text, schema_id, data_type.json(), column, validate)
    if validate:
        found._validator  # noqa: B018 (made here, so a missing jsonschema fails the query on the driver, at once)
    return found


def _check_fields(schema: Any, data_type: Any, schema_id: str) -> None:
    """A registered schema the sink writes with has a property for each of the column's fields, and the column has
    each of its required ones: a mismatch fails here, on the driver, not row by row."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict) or not hasattr(data_type, "fields"):
        return
    names = [f.name for f in data_type.fields]
    example = ".option('eventhubs.json.schemaGroup', 'telemetry-schemas') (a schema made from the column)"
    extra = [n for n in names if n not in properties]
    if extra and schema.get("additionalProperties") is False:
        raise SchemaError(f"eventhubs.json.schemaId {schema_id}: the value column's fields {extra} are not in the "
                          f"schema's properties {list(properties)}; select only those, or register the column's own "
                          f"schema: {example}", example)  # fmt: skip
    missing = [n for n in schema.get("required", []) if n not in names]
    if missing:
        raise SchemaError(f"eventhubs.json.schemaId {schema_id}: the schema requires {missing}, which the value "
                          f"column lacks (it has {names}); add them, or register the column's own schema: {example}",
                          example)  # fmt: skip


class _Decimal(float):
    """A decimal with a fraction in a document: a number to a validator (its double), its own digits in the body
    (:func:`_exact_text`)."""

    text: str


def plain(value: Any, exact: list[bool] | None = None) -> Any:
    """``value`` (dicts, lists, datetimes, dates, Decimals, bytes) as JSON's types, null fields left out; ValueError
    for NaN or an infinity (:func:`_not_finite` says where, only then: no path is built per field per row). A decimal
    with a fraction becomes a :class:`_Decimal`, and ``exact`` (when given) gets an entry: write the document with
    :func:`_exact_text` then."""
    if isinstance(value, dict):
        return {k: plain(v, exact) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [plain(v, exact) for v in value]
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(value)
        return value
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:  # timestamp_ntz: a wall clock, written as one
            return value.isoformat()
        return value.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise ValueError(value)
        if value == value.to_integral_value():
            return int(value)
        number = _Decimal(value)
        number.text = str(value)  # a JSON number: digits, a point, maybe an exponent (1.5E-7)
        if exact is not None:
            exact.append(True)
        return number
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    return value


def _exact_text(value: Any) -> str:
    """A :func:`plain` document as compact JSON, its decimals in their own digits (Python's ``json`` writes a
    number only from its double)."""
    if isinstance(value, _Decimal):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_exact_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_exact_text(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _not_finite(value: Any, path: str = "") -> str:
    """Where in ``value`` the first NaN or infinity is, and which (``reading.temp is nan``)."""
    if isinstance(value, dict):
        items: Any = ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[]", v) for v in value)
    else:
        return f"{path or 'the value'} is {value}" if isinstance(value, float) and not math.isfinite(value) else ""
    return next((found for where, v in items if (found := _not_finite(v, where))), "")
