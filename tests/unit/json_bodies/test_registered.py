"""Unit tests of :mod:`eventhubs_spark.json_bodies.registered`: JSON bodies named by a schema id, validated against
their own schema on request, and a schema grown from a new id's registered types."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from eventhubs_spark.auth.credentials import EntraSettings
from eventhubs_spark.auth.network import NetworkSettings
from eventhubs_spark.errors import DoesNotFit, SchemaEvolved
from eventhubs_spark.json_bodies import types as T
from eventhubs_spark.json_bodies.decode import ADD, FAIL, RESCUE
from eventhubs_spark.json_bodies.json_schema import column_type
from eventhubs_spark.json_bodies.kept import KeptSchemas
from eventhubs_spark.json_bodies.registered import RegisteredJsonReading, overlay
from eventhubs_spark.registry.client import Registry, content_type, schema_id
from tests.unit.support.avro import NAMESPACE, batch

REGISTRY = Registry(NAMESPACE, EntraSettings(), NetworkSettings(), "eventhubs.json")
V1 = {"title": "Order", "type": "object", "required": ["id"],
      "properties": {"id": {"type": "integer"}, "item": {"type": "string"}}}  # fmt: skip
V2 = {**V1, "properties": {**V1["properties"], "due": {"type": "string", "format": "date-time"}}}
CT = "application/json;serialization=Json+{}"


def _reading(mode: str, validate: bool, location: str | None = None) -> RegisteredJsonReading:
    schema = T.to_text(column_type(V1, "v1"))
    return RegisteredJsonReading(schema, mode, "_rescued_data", location, 0 if location else None,
                                 registry=REGISTRY, schema_id="v1", validate=validate)  # fmt: skip


def test_the_content_type_names_the_schema():
    assert schema_id(CT.format("0f5e-ab"), "Json") == "0f5e-ab" and content_type("Json", "0f5e-ab") == CT.format(
        "0f5e-ab"
    )
    assert schema_id("application/json; serialization=Json+x1", "Json") == "x1"
    assert schema_id("avro/binary+x1", "Json") is None and schema_id(None, "Json") is None
    assert schema_id("application/json", "Json") is None
    assert schema_id(CT.format("x1")) is None and schema_id("avro/binary+x1") == "x1"  # Avro's, the default


def test_validation_rescues_each_body_its_own_schema_refuses_and_keeps_the_rest(registered):
    registered("v1", V1)
    registered("v2", V2)
    bodies = [b'{"id": 1, "item": "tea"}', b'{"id": 2, "item": "jam", "due": "2026-12-07T10:00:00Z"}',
              b'{"id": "three"}', b'{"id": 4}', b"not json"]  # fmt: skip
    kinds = [CT.format("v1"), CT.format("v2"), CT.format("v1"), "text/plain", CT.format("v1")]
    out = _reading(RESCUE, validate=True).apply(batch(bodies, kinds))
    values = out.column("value").to_pylist()
    rescued = [json.loads(r) if r else None for r in out.column("_rescued_data").to_pylist()]
    assert values[0] == {"id": 1, "item": "tea"} and rescued[0] is None
    assert values[1] == {"id": 2, "item": "jam"} and rescued[1] == {"due": "2026-12-07T10:00:00Z"}  # v1 lacks it
    assert values[2] is None and rescued[2]["_body"] == '{"id": "three"}' and "'three' is not of type" in (
        rescued[2]["_invalid"])  # fmt: skip
    assert values[3] is None and "content type is 'text/plain'" in rescued[3]["_invalid"]
    assert values[4] is None and rescued[4] == {"_body": "not json"}
    # off (the default): only the reader's schema types the bodies; nothing is refused for its own schema
    plain = _reading(RESCUE, validate=False).apply(batch(bodies, kinds)).column("value").to_pylist()
    assert plain[2] == {"id": None, "item": None} and plain[3] == {"id": 4, "item": None}


def test_under_fail_on_new_columns_a_body_that_does_not_validate_fails_naming_it(registered):
    registered("v1", V1)
    with pytest.raises(DoesNotFit, match=r"partition 3, sequence number 101 does not validate.*schema id v1"):
        _reading(FAIL, validate=True).apply(batch([b'{"id": 1}', b'{"id": 1.5}'], [CT.format("v1")] * 2))


def test_a_new_ids_fields_grow_the_kept_schema_typed_by_the_registry(registered, tmp_path):
    registered("v1", V1)
    registered("v2", V2)
    location = str(tmp_path / "schema")
    KeptSchemas(location).create(0, T.to_text(column_type(V1, "v1")), ["id", "item"])
    body = b'{"id": 2, "item": "jam", "due": "2026-12-07T10:00:00Z", "free": 1}'
    with pytest.raises(SchemaEvolved, match="due, free"):
        _reading(ADD, validate=False, location=location).apply(batch([body], [CT.format("v2")]))
    latest = KeptSchemas(location).latest()
    assert latest is not None and latest.number == 1
    # due is a timestamp (its registered format), not the string its value alone would infer; free, which no schema
    # has, is typed from its value
    assert T.parse_schema(latest.schema) == pa.struct([("id", T.LONG), ("item", T.TEXT), ("due", T.TIMESTAMP),
                                                       ("free", T.LONG)])  # fmt: skip


def test_overlay_keeps_the_first_types_and_adds_the_second_ones_fields():
    a = pa.struct([("x", T.TIMESTAMP), ("s", pa.struct([("p", T.LONG)]))])
    b = pa.struct([("x", T.TEXT), ("s", pa.struct([("q", T.BOOL)])), ("y", T.DOUBLE)])
    assert overlay(a, b) == pa.struct([("x", T.TIMESTAMP), ("s", pa.struct([("p", T.LONG), ("q", T.BOOL)])),
                                       ("y", T.DOUBLE)])  # fmt: skip
