"""Unit tests of :mod:`eventhubs_spark.registry.client`."""

from __future__ import annotations

import json

import pytest

from eventhubs_spark.avro.decode import PERMISSIVE, AvroReading
from eventhubs_spark.errors import RegistryError
from eventhubs_spark.registry import client as registry_module
from eventhubs_spark.registry.client import Registry, schema_id
from tests.unit.support.avro import READING, REGISTRY, VALUE, batch, body


def test_schema_ids_come_from_the_encoders_content_type():
    assert schema_id("avro/binary+0f5ebc3e0b0c4c2f8d0c1f7f1b0f9e41") == "0f5ebc3e0b0c4c2f8d0c1f7f1b0f9e41"
    assert schema_id("application/json") is None and schema_id(None) is None and schema_id("avro/binary+") is None


def test_an_unreachable_registry_fails_the_task_rather_than_the_records(registered, monkeypatch):
    def unreachable(self: Registry, sid: str, context: str = "") -> str:
        raise RegistryError("the Schema Registry of registry.test:443 could not be reached", retriable=True)

    monkeypatch.setattr(Registry, "schema", unreachable)
    reading = AvroReading(REGISTRY, json.dumps(READING), mode=PERMISSIVE)
    with pytest.raises(RegistryError, match="could not be reached"):
        reading.apply(batch([body(READING, VALUE)], ["avro/binary+p"]))


def test_writer_schemas_are_fetched_once_per_executor(registered, tmp_path, monkeypatch):
    """The registry once; then this process's memory; a new worker of the same executor, the executor's file."""
    calls: list[str] = []

    class Answer:
        definition = json.dumps(READING)

    class Client:
        def get_schema(self, sid: str) -> Answer:
            calls.append(sid)
            return Answer()

    monkeypatch.setattr(Registry, "client", lambda self: Client())
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path))
    reading = AvroReading(REGISTRY, json.dumps(READING))
    for _ in range(3):
        reading.apply(batch([body(READING, VALUE)] * 4, ["avro/binary+abc"] * 4))
    assert calls == ["abc"]
    monkeypatch.setattr(registry_module, "_SCHEMAS", {})  # another Python worker of the executor
    from eventhubs_spark.avro import decode

    monkeypatch.setattr(decode, "_DECODERS", {})
    reading.apply(batch([body(READING, VALUE)], ["avro/binary+abc"]))
    assert calls == ["abc"]
    assert list(tmp_path.glob("eventhubs-schemas/*/abc.schema"))
