"""JSON Schema from the Schema Registry through Spark (issue 90, item 5): what the official ``JsonSchemaEncoder``
writes (two schema versions: required and optional fields, nested arrays of objects, a date-time, a ``$ref``) read
into a struct typed from the registered schema, exactly as the official decoder gives it; rows written back by the
sink decoded by the official encoder; validation; a new version growing a kept schema, typed by the registry. The
emulator serves the registry (Entra ID sign-in from LocalEntra, over HTTPS)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eventhubs_emulator import Emulator
from eventhubs_emulator.entra import LocalEntra
from tests.integration.notebook_runner import run_notebook
from tests.integration.registry_helpers import credential, entra_options, registry_emulator
from tests.integration.sdk_helpers import send
from tests.integration.spark.test_json_spark import run_to_parquet

pytestmark = [pytest.mark.spark, pytest.mark.slow]
SECRET = "json-registry-secret-TOPSECRET-7"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
ADDRESS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
    "required": ["city"],
}
V1: dict[str, Any] = {
    "$schema": DRAFT, "title": "Order", "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "item": {"type": "string"},
        "placed": {"type": "string", "format": "date-time"},
        "lines": {"type": "array", "items": {"type": "object", "properties": {
            "sku": {"type": "string"}, "qty": {"type": "integer"}}, "required": ["sku"]}},
        "ship_to": {"$ref": "#/$defs/address"},
        "total": {"type": "number"},
    },
    "required": ["id", "item", "placed"],
    "$defs": {"address": ADDRESS},
}  # fmt: skip
V2: dict[str, Any] = {**V1, "properties": {**V1["properties"], "coupon": {"type": "string"},
                                          "due": {"type": "string", "format": "date-time"}}}  # fmt: skip


class Setting:
    def __init__(self, entra: LocalEntra, emulator: Emulator) -> None:
        self.entra, self.emulator = entra, emulator

    def encoder(self) -> Any:
        from azure.schemaregistry import SchemaRegistryClient
        from azure.schemaregistry.encoder.jsonencoder import JsonSchemaEncoder

        client = SchemaRegistryClient(
            self.emulator.schema_registry_namespace, credential(self.entra, "json-app", SECRET)
        )
        return JsonSchemaEncoder(client=client, validate=DRAFT, group_name="jsonshop")

    def register(self, schema: dict[str, Any]) -> str:
        encoder = self.encoder()
        return str(encoder._schema_registry_client.register_schema("jsonshop", schema["title"], json.dumps(schema),
                                                                   "Json").id)  # fmt: skip

    def options(self, hub: str, **extra: str) -> dict[str, str]:
        return {
            "eventhubs.connectionString": self.emulator.connection_string(hub),
            "eventhubs.json.schemaRegistry": self.emulator.schema_registry_namespace,
            **entra_options(self.entra, "json-app", SECRET),
            **extra,
        }

    def send(self, hub: str, partition: str, messages: list[dict[str, Any]]) -> None:
        from azure.eventhub import EventData, EventHubProducerClient

        with EventHubProducerClient.from_connection_string(self.emulator.connection_string(hub)) as producer:
            batch = producer.create_batch(partition_id=partition)
            for message in messages:
                event = EventData(message["content"])
                event.content_type = message["content_type"]
                batch.add(event)
            producer.send_batch(batch)

    def received(self, hub: str, partitions: int) -> list[Any]:
        from azure.eventhub import EventHubConsumerClient

        events = []
        for pid in range(partitions):
            client = EventHubConsumerClient.from_connection_string(self.emulator.connection_string(hub), "$Default")
            events += _read_all(client, str(pid))
        return events


def _read_all(client: Any, partition: str) -> list[Any]:
    import threading

    got: list[Any] = []
    done = threading.Event()

    def on_event(_context: Any, event: Any) -> None:
        if event is None:
            done.set()
        else:
            got.append(event)

    receive = {"on_event": on_event, "partition_id": partition, "starting_position": "-1", "max_wait_time": 2}
    worker = threading.Thread(target=client.receive, kwargs=receive)
    worker.start()
    done.wait(60)
    client.close()
    worker.join(30)
    return got


@pytest.fixture(scope="module")
def setting() -> Iterator[Setting]:
    hubs = {"json-in": 2, "json-out": 2, "json-grow": 1, "json-nb": 2}
    groups = {"jsonshop": "Json", "jsonout": "Json", "readings": "Json"}
    with registry_emulator("json-app", SECRET, hubs, groups) as (entra, emulator):
        yield Setting(entra, emulator)


def _order(i: int, v2: bool) -> dict[str, Any]:
    order: dict[str, Any] = {"id": i, "item": f"tea-{i}", "placed": f"2026-12-0{1 + i % 7}T10:1{i % 10}:00Z"}
    if i % 2:
        order["lines"] = [{"sku": "a", "qty": i}, {"sku": "b"}]
    if i % 3:
        order["ship_to"] = {"city": "Oslo", "zip": f"0{i}"} if i % 3 == 1 else {"city": "Bergen"}
    if i % 4 == 1:
        order["total"] = 12.5 + i
    if v2:
        order["coupon"] = f"C{i}"
        if i % 2 == 0:
            order["due"] = "2026-12-24T00:00:00.250000Z"
    return order


def _as_row(decoded: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    """What the official decoder gives, as the value column holds it: a field left out is null, date-times parsed."""

    def moment(text: str | None) -> datetime.datetime | None:
        return None if text is None else datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))

    lines = decoded.get("lines")
    ship = decoded.get("ship_to")
    row = {
        "id": decoded["id"], "item": decoded["item"], "placed": moment(decoded["placed"]),
        "lines": None if lines is None else [{"sku": x["sku"], "qty": x.get("qty")} for x in lines],
        "ship_to": None if ship is None else {"city": ship["city"], "zip": ship.get("zip")},
        "total": decoded.get("total"), "coupon": decoded.get("coupon"), "due": moment(decoded.get("due")),
    }  # fmt: skip
    return {k: row[k] for k in fields}


def _utc(value: Any) -> Any:
    """A row's value with its timestamps in UTC (Spark gives them in the session's zone)."""
    if isinstance(value, dict):
        return {k: _utc(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_utc(v) for v in value]
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.timezone.utc)
    return value


def test_the_official_encoders_events_read_exactly_and_the_sinks_rows_decode(spark, setting):
    encoder = setting.encoder()
    v1, v2 = setting.register(V1), setting.register(V2)
    assert v1 != v2
    sent = {0: [encoder.encode(_order(i, False), schema=json.dumps(V1)) for i in range(6)],
            1: [encoder.encode(_order(10 + i, True), schema=json.dumps(V2)) for i in range(6)]}  # fmt: skip
    assert {m["content_type"] for m in sent[0]} == {f"application/json;serialization=Json+{v1}"}
    for pid, messages in sent.items():
        setting.send("json-in", str(pid), messages)
    expected = {d["id"]: d for d in (encoder.decode(m) for ms in sent.values() for m in ms)}

    df = spark.read.format("eventhubs").options(**setting.options("json-in", **{"eventhubs.json.schemaId": v2})).load()
    value = df.schema["value"].dataType
    assert [f.name for f in value.fields] == ["id", "item", "placed", "lines", "ship_to", "total", "coupon", "due"]
    assert value["placed"].dataType.simpleString() == "timestamp"
    assert value["lines"].dataType.simpleString() == "array<struct<sku:string,qty:bigint>>"
    assert value["ship_to"].dataType.simpleString() == "struct<city:string,zip:string>"  # the $ref followed
    rows = df.select("value", "_rescued_data").collect()
    assert len(rows) == 12 and all(r["_rescued_data"] is None for r in rows)
    fields = [f.name for f in value.fields]
    got = {r["value"]["id"]: _utc(r["value"].asDict(recursive=True)) for r in rows}
    assert got == {i: _as_row(d, fields) for i, d in expected.items()}  # both versions, as the decoder gives them

    # written back with a schema made from the column, registered in a Json group; the official encoder decodes them
    (df.select("value").write.format("eventhubs").mode("append")
       .options(**setting.options("json-out", **{"eventhubs.json.schemaGroup": "jsonout",
                                                 "eventhubs.json.validate": "true"}))
       .save())  # fmt: skip
    events = setting.received("json-out", 2)
    assert len(events) == 12
    kinds = {e.content_type for e in events}
    assert len(kinds) == 1 and next(iter(kinds)).startswith("application/json;serialization=Json+")
    decoder = setting.encoder()
    back = {}
    for event in events:
        decoded = decoder.decode(event)  # validates against the registered schema too
        back[decoded["id"]] = _as_row(decoded, fields)
    assert back == {i: _as_row(d, fields) for i, d in expected.items()}
    registered = decoder._get_schema(next(iter(kinds)).split("+")[1])
    assert json.loads(registered)["title"] == "json-out"  # named after the hub by default

    # eventhubs.json.validate: a body its own schema refuses is rescued with why; the others read as ever
    bad = {"content": json.dumps({"id": "seven", "item": "x", "placed": "2026-12-01T00:00:00Z"}).encode(),
           "content_type": f"application/json;serialization=Json+{v1}"}  # fmt: skip
    setting.send("json-in", "0", [bad])
    checked = (spark.read.format("eventhubs")
               .options(**setting.options("json-in", **{"eventhubs.json.schemaId": v2,
                                                        "eventhubs.json.validate": "true"}))
               .load().select("value", "_rescued_data").collect())  # fmt: skip
    refused = [r for r in checked if r["_rescued_data"] is not None]
    assert len(checked) == 13 and len(refused) == 1 and refused[0]["value"] is None
    rescued = json.loads(refused[0]["_rescued_data"])
    assert json.loads(rescued["_body"])["id"] == "seven" and "is not of type 'integer'" in rescued["_invalid"]


def test_a_new_schema_version_grows_the_kept_schema_typed_by_the_registry(spark, setting, tmp_path):
    encoder = setting.encoder()
    v1 = setting.register(V1)
    setting.register(V2)
    setting.send("json-grow", "0", [encoder.encode(_order(i, False), schema=json.dumps(V1)) for i in range(3)])
    location, out, checkpoint = str(tmp_path / "schema"), str(tmp_path / "out"), str(tmp_path / "cp")

    def run() -> Exception | None:
        df = (spark.readStream.format("eventhubs")
              .options(**setting.options("json-grow", **{"eventhubs.json.schemaId": v1,
                                                         "eventhubs.json.schemaLocation": location}))
              .option("eventhubs.startingPosition", '{"offset": "-1"}').load())  # fmt: skip
        return run_to_parquet(df, out, checkpoint)

    assert run() is None
    setting.send("json-grow", "0", [encoder.encode(_order(20 + i, True), schema=json.dumps(V2)) for i in range(2)])
    failed = run()
    assert failed is not None and "coupon, due" in str(failed) and "Schema version 1" in str(failed), failed
    assert run() is None  # defined again: reads the new version's columns
    rows = spark.read.option("mergeSchema", "true").parquet(out).collect()
    assert sorted(r.id for r in rows) == [0, 1, 2, 20, 21]  # every event once across the stop
    grown = spark.read.option("mergeSchema", "true").parquet(out).schema
    assert grown["due"].dataType.simpleString() == "timestamp"  # its registered format, not a string
    assert {r.id: r.coupon for r in rows if r.coupon} == {20: "C20", 21: "C21"}


def test_the_json_notebook_writes_and_reads_json_schema_through_the_registry(spark, setting, tmp_path):
    hub = setting.emulator.connection_string("json-nb")
    for p, device in enumerate(["a", "b"]):
        send(hub, [json.dumps({"device": device, "temperature": 20.0 + i, "ts": f"2024-05-01T00:00:0{i}Z"})
                   for i in range(3)], partition_id=str(p))  # fmt: skip
    run = run_notebook(
        Path(__file__).resolve().parents[3] / "notebooks" / "01_stream_json_to_table.py", spark,
        secrets={("eventhubs", "connection-string"): hub, ("eventhubs", "tenant-id"): setting.entra.tenant_id,
                 ("eventhubs", "client-id"): "json-app", ("eventhubs", "client-secret"): SECRET},
        widgets={"output_path": str(tmp_path / "out"), "checkpoint_path": str(tmp_path / "cp"),
                 "schema_path": str(tmp_path / "schema"), "available_now": "true",
                 "registry": setting.emulator.schema_registry_namespace, "schema_group": "readings",
                 "ca_file": setting.entra.ca_file, "authority_host": setting.entra.authority},
    )  # fmt: skip
    plain, typed = run.tables()
    assert {r["device"]: r["readings"] for r in plain} == {"a": 3, "b": 3}
    latest = {r["device"]: (r["readings"], _utc(r["latest"])) for r in typed}
    moment = datetime.datetime(2024, 5, 1, 0, 0, 2, tzinfo=datetime.timezone.utc)
    assert latest == {"a": (3, moment), "b": (3, moment)}  # ts typed as a timestamp by the registered schema
    schema = json.loads(setting.encoder()._schema_registry_client.get_schema(group_name="readings", name="json-nb",
                                                                             version=1).definition)  # fmt: skip
    assert schema["properties"]["ts"] == {"type": ["string", "null"], "format": "date-time"}
