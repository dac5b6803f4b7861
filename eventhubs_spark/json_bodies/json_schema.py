"""JSON Schema (the Schema Registry's Json format) as the types JSON bodies are read into, and made from a column.

A registered JSON Schema types the ``value`` column with no sampling: ``integer`` is ``bigint``, ``number``
``double``, ``boolean``, ``string`` (``format: date-time`` a timestamp, ``date`` a date), an object with properties
a struct in their order, an array its items' list; ``$ref`` within the document is followed; a type the decoder has
no column for (an object without properties, a union of two kinds) is ``string``, which takes any value as its JSON
text. Every field is nullable: ``required`` is the validator's to check, not the column's (Spark's ``from_json``
does the same). The sink's schema is made the other way, from the value column's Spark type.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from eventhubs_spark.errors import SchemaError
from eventhubs_spark.json_bodies import types

DRAFT = "https://json-schema.org/draft/2020-12/schema"  # what a schema made from a column says it is


EXAMPLE = '{"title": "Order", "type": "object", "properties": {"id": {"type": "integer"}}}'


def column_type(schema: str | Mapping[str, Any], where: str) -> pa.StructType:
    """The value struct a registered JSON Schema describes; ``where`` names the schema in errors."""
    document = json.loads(schema) if isinstance(schema, str) else schema
    if not isinstance(document, Mapping):
        raise SchemaError(f"{where} is not a JSON Schema object, e.g. {EXAMPLE}", EXAMPLE)
    t = _Typer(document, where).of(document, "", ())
    if not pa.types.is_struct(t):
        raise _unusable(f"{where} describes {types.ddl(t)} at the top, not an object: a body is read into the "
                              "struct column value, so the schema's top must be {\"type\": \"object\", "
                              "\"properties\": {...}}")  # fmt: skip
    return t


class _Typer:
    def __init__(self, document: Mapping[str, Any], where: str) -> None:
        self.document, self.where = document, where

    def of(self, node: Any, path: str, refs: tuple[str, ...]) -> pa.DataType:
        if node is True or node is None or node == {}:
            return types.TEXT  # anything: kept as its JSON text
        if not isinstance(node, Mapping):
            raise _unusable(f"{self.where}: {path or 'the top'} is not a schema ({node!r})")
        if "$ref" in node:
            ref = node["$ref"]
            if ref in refs:
                raise _unusable(f"{self.where}: {path or 'the top'} refers to {ref!r} within itself (a recursive "
                                      "schema has no column type; read such bodies as text with eventhubs.json.schema "
                                      "'... string')")  # fmt: skip
            return self.of(self._resolve(ref, path), path, (*refs, ref))
        for union in ("anyOf", "oneOf"):
            if union in node:
                members = [m for m in node[union] if not _only_null(m)]
                kinds = [self.of(m, path, refs) for m in members]
                return kinds[0] if kinds and all(k == kinds[0] for k in kinds) else types.TEXT
        if "allOf" in node:
            parts = [self.of(m, path, refs) for m in node["allOf"]]
            if parts and all(pa.types.is_struct(p) for p in parts):
                fields: dict[str, pa.DataType] = {}
                for part in parts:
                    for f in part:
                        fields.setdefault(f.name, f.type)
                return pa.struct([pa.field(n, t) for n, t in fields.items()])
            return parts[0] if parts and all(p == parts[0] for p in parts) else types.TEXT
        kind = node.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if k != "null"]
            if len(kinds) != 1:
                return types.TEXT
            kind = kinds[0]
        if kind is None:
            if "properties" in node:
                kind = "object"
            elif "items" in node:
                kind = "array"
            elif "enum" in node or "const" in node:
                values = node.get("enum", [node.get("const")])
                found = {type(v) for v in values if v is not None}
                return types.LONG if found == {int} else types.DOUBLE if found <= {int, float} and found else types.TEXT
            else:
                return types.TEXT
        if kind == "object":
            properties = node.get("properties")
            if not isinstance(properties, Mapping) or not properties:
                return types.TEXT  # a map or free-form object: its JSON text
            return pa.struct([pa.field(str(name), self.of(sub, f"{path}.{name}" if path else str(name), refs))
                              for name, sub in properties.items()])  # fmt: skip
        if kind == "array":
            items = node.get("items", node.get("prefixItems"))
            if isinstance(items, list):  # a tuple: its members as one type, if they agree
                kinds = [self.of(m, f"{path}[]", refs) for m in items]
                element = kinds[0] if kinds and all(k == kinds[0] for k in kinds) else types.TEXT
            else:
                element = self.of(items, f"{path}[]", refs)
            return pa.list_(element)
        if kind == "string":
            return {"date-time": types.TIMESTAMP, "date": types.DATE}.get(str(node.get("format", "")), types.TEXT)
        return {"integer": types.LONG, "number": types.DOUBLE, "boolean": types.BOOL}.get(str(kind), types.TEXT)

    def _resolve(self, ref: Any, path: str) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise _unusable(
                f"{self.where}: {path or 'the top'} refers to {ref!r}, outside the schema; only "
                "references within the document (#/$defs/..., #/definitions/...) are followed"
            )
        node: Any = self.document
        for part in [p for p in ref[1:].split("/") if p]:
            key = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                raise _unusable(f"{self.where}: {path or 'the top'} refers to {ref!r}, which the schema "
                                      "does not have")  # fmt: skip
        return node


def _unusable(message: str) -> SchemaError:
    return SchemaError(f"{message}; a schema the columns can be typed from: {EXAMPLE}", EXAMPLE)


def _only_null(node: Any) -> bool:
    return isinstance(node, Mapping) and node.get("type") == "null"


def of_spark(data_type: Any, title: str) -> dict[str, Any]:
    """The JSON Schema a sink registers for a value column of Spark type ``data_type`` (a struct): the row's JSON
    as :mod:`eventhubs_spark.json_bodies.encode` writes it validates against it. A non-nullable field is required;
    a nullable one may be null or left out (the sink leaves nulls out, as Spark's ``to_json`` does)."""
    schema = {"$schema": DRAFT, "title": title, **_spark_node(data_type, nullable=False)}
    return schema


def _spark_node(t: Any, nullable: bool) -> dict[str, Any]:
    from pyspark.sql import types as st

    node: dict[str, Any]
    if isinstance(t, st.StructType):
        node = {"type": "object", "properties": {f.name: _spark_node(f.dataType, f.nullable) for f in t.fields}}
        required = [f.name for f in t.fields if not f.nullable]
        if required:
            node["required"] = required
    elif isinstance(t, st.ArrayType):
        node = {"type": "array", "items": _spark_node(t.elementType, t.containsNull)}
    elif isinstance(t, st.MapType):
        if not isinstance(t.keyType, st.StringType):
            raise _unusable(f"a map with {t.keyType.simpleString()} keys has no JSON form (JSON object keys are "
                                  "text): cast its keys to string")  # fmt: skip
        node = {"type": "object", "additionalProperties": _spark_node(t.valueType, t.valueContainsNull)}
    elif isinstance(t, st.BooleanType):
        node = {"type": "boolean"}
    elif isinstance(t, st.ByteType | st.ShortType | st.IntegerType | st.LongType):
        node = {"type": "integer"}
    elif isinstance(t, st.FloatType | st.DoubleType | st.DecimalType):
        node = {"type": "number"}
    elif isinstance(t, st.StringType):
        node = {"type": "string"}
    elif isinstance(t, st.TimestampType):
        node = {"type": "string", "format": "date-time"}
    elif isinstance(t, st.TimestampNTZType):
        node = {"type": "string"}  # a local time has no offset, which date-time (RFC 3339) requires
    elif isinstance(t, st.DateType):
        node = {"type": "string", "format": "date"}
    elif isinstance(t, st.BinaryType):
        node = {"type": "string", "contentEncoding": "base64"}
    else:
        raise _unusable(f"a {t.simpleString()} value has no JSON Schema type here: cast it (to string, say)")
    if nullable:
        node["type"] = [node["type"], "null"]
    return node
