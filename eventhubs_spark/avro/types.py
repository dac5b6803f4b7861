"""Avro schemas as Spark and Arrow types, and Spark struct types as Avro schemas.

The mapping is Spark's own (``from_avro``/``to_avro``, the spark-avro module), so a query that moves from the
old connector's registry jar or from ``from_avro`` sees the same columns: records are structs, ``[null, T]``
unions are a nullable ``T``, enums are strings, fixed is binary, maps have string keys, and the logical types
``date``, ``timestamp-millis``/``-micros`` (UTC), ``local-timestamp-millis``/``-micros`` (no zone) and
``decimal`` become Spark's date, timestamp, timestamp_ntz and decimal.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from eventhubs_spark.errors import SchemaError

PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
ARROW_PRIMITIVE = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
_SPARK_PRIMITIVE = {
    "null": "void",
    "boolean": "boolean",
    "int": "int",
    "long": "bigint",
    "float": "float",
    "double": "double",
    "bytes": "binary",
    "string": "string",
}
# logical type -> (the Arrow type of the column, how the plain value converts: see decode.convert)
_LOGICAL: dict[tuple[str, Any], tuple[pa.DataType, str]] = {
    ("int", "date"): (pa.date32(), "date"),
    ("long", "timestamp-millis"): (pa.timestamp("us", tz="UTC"), "millis"),
    ("long", "timestamp-micros"): (pa.timestamp("us", tz="UTC"), "micros"),
    ("long", "local-timestamp-millis"): (pa.timestamp("us"), "millis"),
    ("long", "local-timestamp-micros"): (pa.timestamp("us"), "micros"),
}
_SPARK_OF_ARROW = {pa.date32(): "date", pa.timestamp("us", tz="UTC"): "timestamp", pa.timestamp("us"): "timestamp_ntz"}
_EXAMPLE = '{"type": "record", "name": "Reading", "fields": [{"name": "id", "type": "long"}]}'


@dataclass(frozen=True)
class Column:
    """How one Avro type lands in Arrow: its final Arrow type, the plain Arrow type the decoder's values fill
    first, and the conversion between them (None: the plain array is the column)."""

    arrow: pa.DataType
    plain: pa.DataType
    convert: str | None = None  # "date", "millis", "micros", "decimal:<scale>", "struct", "list", "map"
    children: tuple[Column, ...] = field(default=())


def parse(text: str, option: str) -> Any:
    """The JSON of an Avro schema, or an error naming ``option`` with an example."""
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise SchemaError(f"{option} is not JSON ({exc}); give an Avro schema, e.g. {_EXAMPLE}", _EXAMPLE) from None
    if isinstance(schema, str):
        schema = {"type": schema}
    if not isinstance(schema, dict | list):
        raise SchemaError(f"{option} is not an Avro schema; e.g. {_EXAMPLE}", _EXAMPLE)
    return schema


def column(schema: Any, names: dict[str, Any] | None = None) -> Column:
    """The Arrow layout of values of this (parsed JSON) Avro schema; a schema Spark cannot hold is a SchemaError.
    ``names``: the named types defined before it (by :func:`full_name`), for a part of a larger schema."""
    return _column(schema, dict(names or {}), "value", set())


def spark_type(col: Column) -> str:
    """The Spark type, in DDL, of a column laid out as ``col`` (every field nullable, as Arrow batches give them)."""
    t = col.arrow
    if col.convert == "struct":
        inner = ", ".join(f"`{f.name}`: {spark_type(c)}" for f, c in zip(t, col.children, strict=True))
        return f"struct<{inner}>"
    if col.convert == "list":
        return f"array<{spark_type(col.children[0])}>"
    if col.convert == "map":
        return f"map<string, {spark_type(col.children[0])}>"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision}, {t.scale})"
    if t in _SPARK_OF_ARROW:
        return _SPARK_OF_ARROW[t]
    for name, arrow in ARROW_PRIMITIVE.items():
        if t == arrow:
            return _SPARK_PRIMITIVE[name]
    raise AssertionError(f"no Spark type for {t}")  # every Column built above has one


def full_name(schema: dict[str, Any]) -> str:
    """A named type's full name: its name, in its namespace unless the name has one of its own."""
    name = str(schema.get("name", ""))
    namespace = schema.get("namespace")
    return f"{namespace}.{name}" if namespace and "." not in name else name


def named(name: str, names: dict[str, Any]) -> str | None:
    """The full name of the named type a schema refers to by ``name`` (full, or short), among ``names``."""
    return name if name in names else next((n for n in names if n.rsplit(".", 1)[-1] == name), None)


def _column(schema: Any, names: dict[str, Any], where: str, open_records: set[str]) -> Column:
    if isinstance(schema, list):
        return _union(schema, names, where, open_records)
    if isinstance(schema, str):
        if schema in PRIMITIVES:
            arrow = ARROW_PRIMITIVE[schema]
            return Column(arrow, arrow)
        full = named(schema, names)
        if full is None:
            raise SchemaError(f"Avro field {where}: unknown type {schema!r} (named types must be defined before use)",
                              _EXAMPLE)  # fmt: skip
        if full in open_records:
            raise SchemaError(f"Avro field {where}: record {full!r} contains itself; Spark's types cannot be "
                              "recursive", _EXAMPLE)  # fmt: skip
        return _column(names[full], names, where, open_records)
    if not isinstance(schema, dict) or "type" not in schema:
        raise SchemaError(f"Avro field {where}: {json.dumps(schema)[:200]} is not an Avro type", _EXAMPLE)
    kind = schema["type"]
    logical = schema.get("logicalType")
    if isinstance(kind, str) and kind in PRIMITIVES:
        if (kind, logical) in _LOGICAL:
            arrow, convert = _LOGICAL[(kind, logical)]
            return Column(arrow, ARROW_PRIMITIVE[kind], convert)
        if kind == "bytes" and logical == "decimal":
            return _decimal(schema, where)
        arrow = ARROW_PRIMITIVE[kind]  # other logical types (uuid, time-*) keep their underlying type
        return Column(arrow, arrow)
    if kind in ("record", "error"):
        full = full_name(schema)
        names[full] = schema
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise SchemaError(f"Avro field {where}: record {full!r} has no fields list", _EXAMPLE)
        children = []
        for f in fields:
            if not isinstance(f, dict) or "name" not in f or "type" not in f:
                raise SchemaError(f"Avro field {where}: a field of record {full!r} lacks a name or a type", _EXAMPLE)
            children.append(_column(f["type"], names, f"{where}.{f['name']}", open_records | {full}))
        arrow = pa.struct([pa.field(str(f["name"]), c.arrow) for f, c in zip(fields, children, strict=True)])
        plain = pa.struct([pa.field(str(f["name"]), c.plain) for f, c in zip(fields, children, strict=True)])
        return Column(arrow, plain, "struct", tuple(children))
    if kind == "enum":
        names[full_name(schema)] = schema
        return Column(pa.string(), pa.string())
    if kind == "fixed":
        names[full_name(schema)] = schema
        if logical == "decimal":
            return _decimal(schema, where)
        return Column(pa.binary(), pa.binary())
    if kind == "array":
        item = _column(schema.get("items"), names, f"{where}[]", open_records)
        return Column(pa.list_(item.arrow), pa.list_(item.plain), "list", (item,))
    if kind == "map":
        value = _column(schema.get("values"), names, f"{where}{{}}", open_records)
        return Column(pa.map_(pa.string(), value.arrow), pa.map_(pa.string(), value.plain), "map", (value,))
    if isinstance(kind, dict | list | str):  # {"type": {"type": "array", ...}} or {"type": "Named"}
        return _column(kind, names, where, open_records)
    raise SchemaError(f"Avro field {where}: {json.dumps(schema)[:200]} is not an Avro type", _EXAMPLE)


def _decimal(schema: dict[str, Any], where: str) -> Column:
    precision, scale = schema.get("precision"), schema.get("scale", 0)
    if not isinstance(precision, int) or not isinstance(scale, int) or not 0 < precision <= 38 or scale > precision:
        raise SchemaError(f"Avro field {where}: decimal(precision={precision}, scale={scale}) does not fit Spark's "
                          "decimal (precision 1 to 38, scale at most the precision)", _EXAMPLE)  # fmt: skip
    return Column(pa.decimal128(precision, scale), pa.binary(), f"decimal:{scale}")


def _union(branches: list[Any], names: dict[str, Any], where: str, open_records: set[str]) -> Column:
    others = [b for b in branches if b != "null" and not (isinstance(b, dict) and b.get("type") == "null")]
    if len(others) == 1:
        return _column(others[0], names, where, open_records)
    if not others:
        return Column(pa.null(), pa.null())
    raise SchemaError(
        f"Avro field {where}: the union {json.dumps(branches)[:200]} has {len(others)} types besides null; the "
        "eventhubs source reads unions of one type and null (a nullable column). Give a reader schema "
        "(eventhubs.avro.schema) whose field is one type, or read the body as binary and decode it yourself",
        _EXAMPLE,
    )


def plain(schema: Any) -> Any:
    """The schema with every logical type taken off (the decoder's values then stay longs, ints and bytes)."""
    if isinstance(schema, list):
        return [plain(b) for b in schema]
    if isinstance(schema, dict):
        out = {k: plain(v) if k in ("type", "items", "values", "fields") else v for k, v in schema.items()
               if k != "logicalType"}  # fmt: skip
        if "fields" in out and isinstance(out["fields"], list):
            out["fields"] = [
                {**f, "type": plain(f.get("type"))} if isinstance(f, dict) else f for f in schema["fields"]
            ]
        return out
    return schema


# -- Spark struct types as Avro schemas (the sink) ---------------------------------------------------------------


def avro_of_spark(data_type: Any, name: str, namespace: str | None, where: str = "value") -> Any:
    """The Avro schema of a Spark type, as Spark's ``to_avro`` writes it: a nullable field is a union of its
    type and null (null first: fields may then default to null), a struct a record named after its field."""
    from pyspark.sql import types as T

    def nullable(t: Any) -> Any:
        return ["null", t]

    if isinstance(data_type, T.StructType):
        space = f"{namespace}.{name}" if namespace else name
        fields = [
            {
                "name": f.name,
                "type": nullable(avro_of_spark(f.dataType, f.name, space, f"{where}.{f.name}"))
                if f.nullable
                else avro_of_spark(f.dataType, f.name, space, f"{where}.{f.name}"),
                **({"default": None} if f.nullable else {}),
            }
            for f in data_type.fields
        ]
        return {"type": "record", "name": name, **({"namespace": namespace} if namespace else {}), "fields": fields}
    if isinstance(data_type, T.ArrayType):
        item = avro_of_spark(data_type.elementType, name, namespace, f"{where}[]")
        return {"type": "array", "items": nullable(item) if data_type.containsNull else item}
    if isinstance(data_type, T.MapType):
        if not isinstance(data_type.keyType, T.StringType):
            raise SchemaError(f"column {where}: Avro maps have string keys, not {data_type.keyType.simpleString()}; "
                              "cast the keys to string", "map<string, bigint>")  # fmt: skip
        value = avro_of_spark(data_type.valueType, name, namespace, f"{where}{{}}")
        return {"type": "map", "values": nullable(value) if data_type.valueContainsNull else value}
    simple = {
        T.BooleanType: "boolean",
        T.ByteType: "int",
        T.ShortType: "int",
        T.IntegerType: "int",
        T.LongType: "long",
        T.FloatType: "float",
        T.DoubleType: "double",
        T.StringType: "string",
        T.BinaryType: "bytes",
    }
    for spark, avro in simple.items():
        if isinstance(data_type, spark):
            return avro
    if isinstance(data_type, T.DateType):
        return {"type": "int", "logicalType": "date"}
    if isinstance(data_type, T.TimestampNTZType):
        return {"type": "long", "logicalType": "local-timestamp-micros"}
    if isinstance(data_type, T.TimestampType):
        return {"type": "long", "logicalType": "timestamp-micros"}
    if isinstance(data_type, T.DecimalType):
        return {"type": "bytes", "logicalType": "decimal", "precision": data_type.precision, "scale": data_type.scale}
    raise SchemaError(f"column {where}: Spark type {data_type.simpleString()} has no Avro counterpart; cast it (e.g. "
                      "to string)", "cast(x as string)")  # fmt: skip
