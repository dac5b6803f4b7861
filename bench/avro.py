"""Issues 40 and 51: Avro bodies decoded into the ``value`` struct, in the batch, against the official encoder's
``decode``; and the sink's encoding of the struct back into bodies, against its ``encode``.

The connector's path is what a task runs on each record batch (:meth:`AvroReading.apply`: content types read,
rows grouped by schema id, the bodies decoded, the struct column built with its logical types); the official
``azure-schemaregistry-avroencoder``'s ``AvroEncoder.decode`` is called once per message, as a consumer of the
SDK would, and makes only Python dicts. Both take the writer schema from a cache (a stand-in client for the
official one), so the registry is not what is measured. The record has ten fields of the usual kinds (longs,
ints, strings, doubles, a float, a boolean). Rounds alternate the two; medians are recorded.
"""

from __future__ import annotations

import datetime
import io
import json
import statistics
import time
from typing import Any

import pyarrow as pa

from eventhubs_spark.avro import types

from .results import record

EVENTS = 100_000
CHUNK = 10_000  # events per record batch, as the receiver service hands them over
ROUNDS = 5
SCHEMA = {
    "type": "record",
    "name": "Reading",
    "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "device", "type": "string"},
        {"name": "celsius", "type": "double"},
        {"name": "sequence", "type": "int"},
        {"name": "ok", "type": "boolean"},
        {"name": "site", "type": "string"},
        {"name": "at", "type": "long"},
        {"name": "humidity", "type": "float"},
        {"name": "region", "type": "string"},
        {"name": "retries", "type": "int"},
    ],
}
EVOLVED = {**SCHEMA, "fields": [*SCHEMA["fields"], {"name": "firmware", "type": "string", "default": "1.0"}]}
SCHEMA_ID = "0f5ebc3e0b0c4c2f8d0c1f7f1b0f9e41"


def _bodies() -> list[bytes]:
    import fastavro

    parsed = fastavro.parse_schema(SCHEMA)
    out = []
    for i in range(EVENTS):
        value = {"id": i, "device": f"pump-{i % 97}", "celsius": 20.0 + i % 13 / 4, "sequence": i % 1000,
                 "ok": i % 7 != 0, "site": "north", "at": 1_764_000_000_000 + i, "humidity": 0.5,
                 "region": "eu-west", "retries": i % 3}  # fmt: skip
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, value)
        out.append(buffer.getvalue())
    return out


def _batches(bodies: list[bytes]) -> list[pa.RecordBatch]:
    from eventhubs_spark.codec.schema import ARROW_SCHEMA

    content = [("content-type", f"avro/binary+{SCHEMA_ID}")]
    at = datetime.datetime(2026, 11, 26, tzinfo=datetime.timezone.utc)
    out = []
    for start in range(0, len(bodies), CHUNK):
        part = bodies[start : start + CHUNK]
        n = len(part)
        out.append(pa.RecordBatch.from_arrays([
            pa.array(part, pa.binary()), pa.array(["0"] * n), pa.array([str(i) for i in range(n)]),
            pa.array(range(start, start + n), pa.int64()), pa.array([at] * n, pa.timestamp("us", tz="UTC")),
            pa.nulls(n, pa.string()), pa.nulls(n, pa.string()), pa.array([[]] * n, pa.map_(pa.string(), pa.string())),
            pa.array([content] * n, pa.map_(pa.string(), pa.string())),
        ], schema=ARROW_SCHEMA))  # fmt: skip
    return out


class _Schemas:
    """The official encoder's client, answering from memory (what its own cache does after the first call)."""

    def get_schema_properties(self, *args: Any, **kwargs: Any) -> Any:
        class Properties:  # encoding asks the id of the schema's content (decoding looks schemas up by id only)
            id = SCHEMA_ID

        return Properties()

    def get_schema(self, schema_id: str, **kwargs: Any) -> Any:
        class Found:
            definition = json.dumps(SCHEMA)

        return Found()


def _connector(batches: list[pa.RecordBatch], reader: dict[str, Any], by_column: bool = True) -> float:
    from eventhubs_spark.auth.credentials import EntraSettings
    from eventhubs_spark.auth.network import NetworkSettings
    from eventhubs_spark.avro import columnar, decode, registry
    from eventhubs_spark.avro.decode import AvroReading
    from eventhubs_spark.registry.client import Registry

    decode._DECODERS.clear()
    if not by_column:  # the exact path alone: fastavro's compiled reader, one call per schema id and batch
        original = columnar.reader_for
        columnar.reader_for = lambda writer, reader: None  # type: ignore[assignment]
        try:
            return _connector(batches, reader)
        finally:
            columnar.reader_for = original
            decode._DECODERS.clear()

    where = Registry("bench.servicebus.windows.net", EntraSettings(), NetworkSettings())
    registry._SCHEMAS[(where.namespace, SCHEMA_ID)] = json.dumps(SCHEMA)  # fetched once per executor anyway
    reading = AvroReading(where, json.dumps(reader))
    started = time.perf_counter()
    rows = 0
    for batch in batches:
        out = reading.apply(batch)
        rows += out.num_rows
    seconds = time.perf_counter() - started
    assert rows == EVENTS and out.column("value")[0].as_py()["id"] == EVENTS - CHUNK
    return EVENTS / seconds


def _official(bodies: list[bytes]) -> float:
    from azure.schemaregistry.encoder.avroencoder import AvroEncoder

    encoder = AvroEncoder(client=_Schemas())
    content_type = f"avro/binary+{SCHEMA_ID}"
    started = time.perf_counter()
    values = [encoder.decode({"content": body, "content_type": content_type}) for body in bodies]
    seconds = time.perf_counter() - started
    assert len(values) == EVENTS and values[-1]["id"] == EVENTS - 1
    return EVENTS / seconds


def _per_body(batches: list[pa.RecordBatch]) -> float:
    """The obvious way, for comparison: fastavro's schemaless reader per body, then one Arrow array of dicts."""
    import fastavro

    from eventhubs_spark.avro.types import column

    parsed = fastavro.parse_schema(SCHEMA)
    arrow = column(SCHEMA).arrow
    started = time.perf_counter()
    for batch in batches:
        values = [fastavro.schemaless_reader(io.BytesIO(b), parsed, None) for b in batch.column(0).to_pylist()]
        pa.array(values, type=arrow)
    return EVENTS / (time.perf_counter() - started)


def _values() -> list[dict[str, Any]]:
    import fastavro

    parsed = fastavro.parse_schema(SCHEMA)
    return [fastavro.schemaless_reader(io.BytesIO(b), parsed, None) for b in _bodies()]


def _sink(columns: list[pa.Array], expected: list[bytes]) -> float:
    """What a sink task does with each record batch's value column (Spark 4.1+ and every batch write: Arrow)."""
    from pyspark.sql.pandas.types import from_arrow_type

    from eventhubs_spark.avro.encode import AvroWriting

    writing = AvroWriting(json.dumps(SCHEMA), SCHEMA_ID, from_arrow_type(columns[0].type).json())
    started = time.perf_counter()
    bodies = [body for column in columns for body in writing.encode_arrow(column)]
    seconds = time.perf_counter() - started
    assert bodies == expected
    return EVENTS / seconds


def _official_encode(values: list[dict[str, Any]], expected: list[bytes]) -> float:
    from azure.schemaregistry.encoder.avroencoder import AvroEncoder

    encoder = AvroEncoder(client=_Schemas(), group_name="bench")
    schema = json.dumps(SCHEMA)
    started = time.perf_counter()
    messages = [encoder.encode(value, schema=schema) for value in values]
    seconds = time.perf_counter() - started
    assert [m["content"] for m in messages] == expected and messages[0]["content_type"] == f"avro/binary+{SCHEMA_ID}"
    return EVENTS / seconds


def run() -> None:
    bodies = _bodies()
    batches = _batches(bodies)
    figures: dict[str, list[float]] = {"connector": [], "connector, evolved reader": [], "official": [],
                                       "per body": [], "fastavro path": []}  # fmt: skip
    for _ in range(ROUNDS):
        figures["connector"].append(_connector(batches, SCHEMA))
        figures["official"].append(_official(bodies))
        figures["connector, evolved reader"].append(_connector(batches, EVOLVED))
        figures["fastavro path"].append(_connector(batches, SCHEMA, by_column=False))
        figures["per body"].append(_per_body(batches))
    values = _values()
    struct = types.column(SCHEMA).arrow
    columns = [pa.array(values[start : start + CHUNK], struct) for start in range(0, EVENTS, CHUNK)]
    figures |= {"sink": [], "official encode": []}
    for _ in range(ROUNDS):
        figures["sink"].append(_sink(columns, bodies))
        figures["official encode"].append(_official_encode(values, bodies))
    median = {name: statistics.median(values) for name, values in figures.items()}
    ratio = round(median["connector"] / median["official"], 2)
    write_ratio = round(median["sink"] / median["official encode"], 2)
    rows = [
        {"path": "connector: AvroReading.apply, into the value struct", "events/s": round(median["connector"])},
        {
            "path": "connector, writer schema resolved to a reader with one more field",
            "events/s": round(median["connector, evolved reader"]),
        },
        {
            "path": "connector's exact path alone (fastavro, one call per batch)",
            "events/s": round(median["fastavro path"]),
        },
        {"path": "fastavro schemaless_reader per body, then pa.array", "events/s": round(median["per body"])},
        {"path": "official AvroEncoder.decode per message (dicts only)", "events/s": round(median["official"])},
        {
            "path": "write: the sink's AvroWriting.encode_arrow, value struct column to bodies",
            "events/s": round(median["sink"]),
        },
        {
            "path": "write: official AvroEncoder.encode per message (from dicts)",
            "events/s": round(median["official encode"]),
        },
    ]
    for row in rows:
        print(row, flush=True)
    record(
        "avro",
        {
            "target": ">= 150,000 events/s decoded into the struct, 10-field record",
            "events/s": round(median["connector"]),
            "ratio to the official encoder's decode": ratio,
            "target met": median["connector"] >= 150_000,
            "write target": ">= 5x the official encoder's encode per message, 10-field record",
            "write events/s": round(median["sink"]),
            "write ratio to the official encoder's encode": write_ratio,
            "write target met": write_ratio >= 5,
        },
        rows,
        notes=(
            f"{EVENTS:,} events in record batches of {CHUNK:,}, medians of {ROUNDS} alternating rounds, one process. "
            "The connector's figure includes reading each row's content type, grouping by schema id and building "
            "the Arrow struct column; the official encoder's makes Python dicts only. Both take the writer schema "
            "from memory. The connector decodes field by field over all bodies (avro/columnar.py); its exact path "
            "(fastavro's compiled reader, which it takes for schemas the columnar reader does not, or when a body "
            "is irregular) is shown alone too, as is the obvious per-body loop. Writing: the sink's work on a batch's "
            "value column (Arrow to Python values once per column, maps as dicts, then fastavro's writer per row, "
            "the bodies byte for byte what the official encoder writes), against the official encoder's encode per "
            "message from dicts; neither sends."
        ),
    )
