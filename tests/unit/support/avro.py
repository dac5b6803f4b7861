"""Helpers shared by the unit tests that came from test_avro.py."""

from __future__ import annotations

import datetime
import io
from decimal import Decimal
from typing import Any

import fastavro
import pyarrow as pa

from eventhubs_spark.auth.credentials import EntraSettings
from eventhubs_spark.auth.network import NetworkSettings
from eventhubs_spark.codec.schema import ARROW_SCHEMA
from eventhubs_spark.registry.client import Registry

READING = {
    "type": "record",
    "name": "Reading",
    "namespace": "plant",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "device", "type": "string"},
        {"name": "celsius", "type": ["null", "double"], "default": None},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["OK", "FAULT"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counters", "type": {"type": "map", "values": "long"}},
        {"name": "where", "type": {"type": "record", "name": "Where", "fields": [
            {"name": "site", "type": "string"},
            {"name": "since", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        ]}},
    ],
}  # fmt: skip


AT = datetime.datetime(2026, 11, 26, 8, 30, 15, 123000, tzinfo=datetime.timezone.utc)


VALUE = {
    "id": 7,
    "device": "pump-1",
    "celsius": 21.5,
    "at": AT,
    "day": datetime.date(2026, 11, 26),
    "price": Decimal("12.34"),
    "state": "FAULT",
    "tags": ["a", "b"],
    "counters": {"x": 1},
    "where": {"site": "north", "since": AT},
}


NAMESPACE = "registry.test:443"


REGISTRY = Registry(NAMESPACE, EntraSettings(), NetworkSettings())


def body(schema: Any, value: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def batch(bodies: list[bytes | None], content_types: list[str | None]) -> pa.RecordBatch:
    n = len(bodies)
    columns = {
        "body": pa.array(bodies, pa.binary()),
        "partition": pa.array(["3"] * n),
        "offset": pa.array([str(i) for i in range(n)]),
        "sequenceNumber": pa.array(range(100, 100 + n), pa.int64()),
        "enqueuedTime": pa.array([AT] * n, pa.timestamp("us", tz="UTC")),
        "publisher": pa.nulls(n, pa.string()),
        "partitionKey": pa.nulls(n, pa.string()),
        "properties": pa.array([[]] * n, pa.map_(pa.string(), pa.string())),
        "systemProperties": pa.array(
            [[("content-type", c)] if c is not None else [] for c in content_types], pa.map_(pa.string(), pa.string())
        ),
    }
    return pa.RecordBatch.from_arrays(list(columns.values()), schema=ARROW_SCHEMA)
