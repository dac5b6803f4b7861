"""Unit tests of :mod:`eventhubs_spark.json_bodies.json_schema`: a registered JSON Schema as the value column's
type, and the schema the sink registers for a column."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from eventhubs_spark.errors import SchemaError
from eventhubs_spark.json_bodies import types as T
from eventhubs_spark.json_bodies.json_schema import column_type, of_spark

ORDER = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Order",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "placed": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "total": {"type": "number"},
        "paid": {"type": "boolean"},
        "note": {"type": ["string", "null"]},
        "ship_to": {"$ref": "#/$defs/address"},
        "lines": {"type": "array", "items": {"type": "object", "properties": {
            "sku": {"type": "string"}, "qty": {"type": "integer"}}}},
        "extra": {"type": "object", "additionalProperties": {"type": "string"}},
        "either": {"oneOf": [{"type": "integer"}, {"type": "string"}]},
        "maybe": {"anyOf": [{"type": "number"}, {"type": "null"}]},
        "kind": {"enum": ["a", "b"]},
        "anything": {},
    },
    "required": ["id", "placed"],
    "$defs": {"address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}}}},
}  # fmt: skip


def test_a_registered_schema_types_every_field_with_refs_formats_and_unions():
    t = column_type(json.dumps(ORDER), "schema id x")
    assert t == pa.struct([
        ("id", T.LONG), ("placed", T.TIMESTAMP), ("day", T.DATE), ("total", T.DOUBLE), ("paid", T.BOOL),
        ("note", T.TEXT), ("ship_to", pa.struct([("city", T.TEXT), ("zip", T.TEXT)])),
        ("lines", pa.list_(pa.struct([("sku", T.TEXT), ("qty", T.LONG)]))),
        ("extra", T.TEXT), ("either", T.TEXT), ("maybe", T.DOUBLE), ("kind", T.TEXT), ("anything", T.TEXT),
    ])  # fmt: skip
    # the kept form reads back the same (a schema location keeps it as DDL)
    assert T.parse_schema(T.to_text(t)) == t


def test_definitions_json_pointer_escapes_and_all_of_are_followed():
    parts = [{"type": "object", "properties": {"x": {"type": "integer"}}},
             {"type": "object", "properties": {"y": {"type": "string"}}}]  # fmt: skip
    schema = {"type": "object", "definitions": {"a/b": {"type": "integer"}},
              "properties": {"n": {"$ref": "#/definitions/a~1b"}, "both": {"allOf": parts}}}  # fmt: skip
    assert column_type(schema, "s") == pa.struct([("n", T.LONG), ("both", pa.struct([("x", T.LONG), ("y", T.TEXT)]))])


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"type": "object", "properties": {"me": {"$ref": "#"}}}, "within itself"),
        ({"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}}, "outside the schema"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "does not have"),
        ({"type": "array", "items": {"type": "integer"}}, "not an object"),
        ({"type": "string"}, "not an object"),
    ],
)
def test_a_schema_the_columns_cannot_be_typed_from_is_an_error_naming_why(schema, words):
    with pytest.raises(SchemaError, match=words) as caught:
        column_type(schema, "eventhubs.json.schemaId (s1)")
    assert "eventhubs.json.schemaId (s1)" in str(caught.value) and caught.value.example


def test_the_sinks_schema_made_from_a_column_requires_what_is_not_nullable():
    from pyspark.sql import types as st

    column = st.StructType([
        st.StructField("id", st.LongType(), nullable=False),
        st.StructField("at", st.TimestampType()),
        st.StructField("day", st.DateType()),
        st.StructField("price", st.DecimalType(9, 2)),
        st.StructField("raw", st.BinaryType()),
        st.StructField("tags", st.ArrayType(st.StringType(), containsNull=False)),
        st.StructField("counts", st.MapType(st.StringType(), st.IntegerType())),
        st.StructField("where", st.StructType([st.StructField("site", st.StringType(), nullable=False)])),
    ])  # fmt: skip
    schema = of_spark(column, "Reading")
    assert schema["title"] == "Reading" and schema["type"] == "object" and schema["required"] == ["id"]
    p = schema["properties"]
    assert p["id"] == {"type": "integer"}
    assert p["at"] == {"type": ["string", "null"], "format": "date-time"}
    assert p["day"] == {"type": ["string", "null"], "format": "date"}
    assert p["price"] == {"type": ["number", "null"]}
    assert p["raw"] == {"type": ["string", "null"], "contentEncoding": "base64"}
    assert p["tags"] == {"type": ["array", "null"], "items": {"type": "string"}}
    assert p["counts"] == {"type": ["object", "null"], "additionalProperties": {"type": ["integer", "null"]}}
    assert p["where"]["required"] == ["site"]
    # and it types the column back as the reader reads it (a map is text: a free-form object)
    back = column_type(schema, "s")
    assert back.field("at").type == T.TIMESTAMP and back.field("where").type == pa.struct([("site", T.TEXT)])
    with pytest.raises(SchemaError, match="keys"):
        of_spark(st.StructType([st.StructField("m", st.MapType(st.IntegerType(), st.StringType()))]), "X")
