"""Unit tests of :mod:`eventhubs_spark.codec.schema`."""

from __future__ import annotations

import json
from decimal import Decimal

import pyarrow as pa
import pytest

from eventhubs_spark.codec.schema import ARROW_SCHEMA
from eventhubs_spark.errors import OptionError
from tests.fresh import without_pandas
from tests.unit.support.avro import READING, VALUE, batch, body

_FRESH = """
import json, sys
import pyarrow as pa
from eventhubs_spark.auth.credentials import EntraSettings
from eventhubs_spark.auth.network import NetworkSettings
from eventhubs_spark.registry import client as registry
from eventhubs_spark.avro.decode import PERMISSIVE, AvroReading
from eventhubs_spark.registry.client import Registry
schema, other, path = sys.argv[1:]
registry._SCHEMAS[("fresh:443", "one")] = schema
registry._SCHEMAS[("fresh:443", "two")] = other
with pa.ipc.open_file(path) as file:
    batch = file.get_batch(0)
reading = AvroReading(Registry("fresh:443", EntraSettings(), NetworkSettings()), schema, mode=PERMISSIVE)
out = reading.apply(batch)
"""


_SHOW = """
print(json.dumps([out.column("value").to_pylist(), out.column("_corrupt_record").to_pylist()], default=str))
"""


def test_decoding_avro_bodies_never_imports_pandas_in_a_fresh_worker(tmp_path):
    """Every column kind the column-by-column decoder makes (numbers, booleans, floats, text, bytes, fixed, enums,
    nullable values, records, dates, timestamps, decimals), two writer schemas in one batch and a bad record's
    corrupt-record column, all from buffers: a fresh Python worker pays no pandas import (0.3 s). (Arrays and maps
    go through fastavro: the next test.)"""
    flat = [f for f in READING["fields"] if f["name"] not in ("tags", "counters")]
    schema = {**READING, "fields": [*flat, {"name": "flag", "type": "boolean"},
              {"name": "ratio", "type": "float"}, {"name": "code", "type": {"type": "fixed", "name": "C", "size": 2}},
              {"name": "cost", "type": {"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal",
                                        "precision": 18, "scale": 4}}]}  # fmt: skip
    other = {**schema, "fields": [f for f in schema["fields"] if f["name"] != "celsius"]}  # celsius: its default
    plain = {k: v for k, v in VALUE.items() if k not in ("tags", "counters")}
    value = {**plain, "flag": True, "ratio": 0.5, "code": b"ab", "cost": Decimal("-3.1416")}
    bodies = [body(schema, {**value, "id": i, "celsius": None if i % 2 else 1.5}) for i in range(6)]
    bodies += [body(other, {**value, "id": 6}), b"plain text"]
    kinds = ["avro/binary+one"] * 6 + ["avro/binary+two", "text/plain"]
    with pa.ipc.new_file(tmp_path / "batch.arrow", ARROW_SCHEMA) as file:
        file.write_batch(batch(bodies, kinds))
    values, corrupt = json.loads(without_pandas(_FRESH, json.dumps(schema), json.dumps(other),
                                                str(tmp_path / "batch.arrow"), show=_SHOW))  # fmt: skip
    assert [v["id"] for v in values[:7]] == list(range(7)) and values[7] is None
    assert [v["celsius"] for v in values[:7]] == [1.5, None, 1.5, None, 1.5, None, None]
    assert values[0]["price"] == "12.34" and values[0]["cost"] == "-3.1416" and values[0]["state"] == "FAULT"
    assert values[0]["flag"] is True and values[0]["ratio"] == 0.5 and values[0]["where"]["site"] == "north"
    assert corrupt[:7] == [None] * 7 and "text/plain" in corrupt[7]["error"]


def test_arrays_maps_and_irregular_bodies_never_import_pandas_in_a_fresh_worker(tmp_path):
    """What goes through fastavro (arrays and maps, and every shape once a body in the batch is irregular): its
    values become Arrow from buffers too (``arrays.from_values``), so a fresh worker pays no pandas import."""
    values = [{**VALUE, "id": i, "tags": ["a"] * i, "counters": {f"k{j}": j for j in range(i)}} for i in range(4)]
    bodies = [body(READING, v) for v in values] + [body(READING, VALUE)[:-3]]  # the last one cut short
    with pa.ipc.new_file(tmp_path / "batch.arrow", ARROW_SCHEMA) as file:
        file.write_batch(batch(bodies, ["avro/binary+one"] * len(bodies)))
    got, corrupt = json.loads(without_pandas(_FRESH, json.dumps(READING), json.dumps(READING),
                                             str(tmp_path / "batch.arrow"), show=_SHOW))  # fmt: skip
    assert [v["tags"] for v in got[:4]] == [["a"] * i for i in range(4)] and got[4] is None
    assert [v["counters"] for v in got[:4]] == [[[f"k{j}", j] for j in range(i)] for i in range(4)]
    assert corrupt[:4] == [None] * 4 and "(schema id one)" in corrupt[4]["error"]


def _struct(*fields: tuple[str, object, bool]) -> object:
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(name, kind, nullable) for name, kind, nullable in fields])  # type: ignore[arg-type]


def test_a_query_schema_picks_columns_in_its_own_order_and_spelling() -> None:
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import BinaryType, LongType, MapType, StringType

    from eventhubs_spark.codec.schema import ARROW_SCHEMA, projection

    assert projection(None) is None
    assert projection(from_arrow_schema(ARROW_SCHEMA)) is None  # the source's own: nothing to pick
    picked = projection(
        _struct(("SequenceNumber", LongType(), True), ("body", BinaryType(), True),
                ("properties", MapType(StringType(), StringType(), True), True))
    )  # fmt: skip
    assert picked is not None and picked.indexes == (3, 0, 7)
    full = pa.RecordBatch.from_pylist(
        [{"body": b"b", "partition": "0", "offset": "1", "sequenceNumber": 5, "enqueuedTime": None,
          "publisher": None, "partitionKey": None, "properties": [("k", "v")], "systemProperties": []}],
        schema=ARROW_SCHEMA,
    )  # fmt: skip
    out = picked.apply(full)
    assert out.schema.names == ["SequenceNumber", "body", "properties"]
    assert out.to_pylist() == [{"SequenceNumber": 5, "body": b"b", "properties": [("k", "v")]}]


def test_a_projection_decodes_its_own_columns_and_those_a_task_reports_and_all_past_the_sources_own() -> None:
    """A task decodes only the columns its query's schema names (plus the sequence number, offset and enqueued time
    it tells the driver), in the worker that unpickled its own copy of the projection too; an Avro or JSON read
    decodes all (its value is made from the body)."""
    import pickle

    from pyspark.sql.types import BinaryType, StringType

    from eventhubs_spark.codec.schema import ARROW_SCHEMA, REPORTED, Projection, projection

    picked = projection(_struct(("body", BinaryType(), True), ("partition", StringType(), True)))
    assert picked is not None
    names = {"body", "partition", "offset", "sequenceNumber", "enqueuedTime"}
    assert picked.needed == frozenset(ARROW_SCHEMA.get_field_index(n) for n in names)
    assert picked.needed >= REPORTED
    assert pickle.loads(pickle.dumps(picked)).needed == picked.needed
    wider = pa.schema([*ARROW_SCHEMA, pa.field("value", pa.string())])
    assert Projection((0, 9), ("body", "value"), wider).needed is None


def test_a_projection_crosses_to_a_task_without_the_sources_schema_and_a_worker_keeps_the_one_it_made() -> None:
    """Every task unpickles its reader's projection: one of the source's own columns goes as its indexes and names,
    and comes back as the projection the worker already made for them (its narrowed schema made once); one of a
    wider source (Avro, JSON) goes whole."""
    import pickle

    from eventhubs_spark.codec.schema import ARROW_SCHEMA, Projection

    picked = Projection((3, 0), ("sequenceNumber", "Body"))
    blob = pickle.dumps(picked)
    assert b"enqueuedTime" not in blob, "the source's schema went with it"
    first, second = pickle.loads(blob), pickle.loads(blob)
    assert first == picked and first is second and first.source is ARROW_SCHEMA
    assert first.arrow_schema.names == ["sequenceNumber", "Body"] and first.needed == picked.needed
    copy = Projection((3, 0), ("sequenceNumber", "Body"), pa.schema(list(ARROW_SCHEMA)))  # equal, not the same
    assert pickle.loads(pickle.dumps(copy)) is first
    wider = Projection((0, 9), ("body", "value"), pa.schema([*ARROW_SCHEMA, pa.field("value", pa.string())]))
    back = pickle.loads(pickle.dumps(wider))
    assert back == wider and back.needed is None and back.arrow_schema.names == ["body", "value"]


@pytest.mark.parametrize(
    ("fields", "named", "says"),
    [
        ((("bodie", "binary", True),), "'bodie'", "is not a column"),
        ((("body", "string", True),), "'body'", "declare it binary"),
        # the conversion the hint shows goes to the type the query declared
        (
            (("offset", "bigint", True),),
            "'offset'",
            "declare it string and convert it after load() (e.g. col('offset').cast(\"bigint\"))",
        ),
        ((("body", "bigint", True),), "'body'", 'col(\'body\').cast("string").cast("bigint")'),
        ((("sequenceNumber", "string", True),), "'sequenceNumber'", "col('sequenceNumber').cast(\"string\")"),
        ((("enqueuedTime", "timestamp_ntz", True),), "'enqueuedTime'", "declare it timestamp"),
        ((("sequenceNumber", "bigint", False),), "'sequenceNumber'", "NOT NULL"),
        ((("body", "binary", True), ("BODY", "binary", True)), "'body'", "appears twice"),
        ((("properties", "map<string,int>", True),), "'properties'", "map<string,string>"),
        ((), "schema has no columns", "body binary"),
    ],
)
def test_a_query_schema_that_does_not_fit_names_the_column_and_shows_one_that_works(fields, named, says) -> None:
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        MapType,
        StringType,
        TimestampNTZType,
        TimestampType,
    )

    from eventhubs_spark.codec.schema import projection

    types = {"binary": BinaryType(), "string": StringType(), "timestamp": TimestampType(),
             "timestamp_ntz": TimestampNTZType(), "bigint": LongType(),
             "map<string,int>": MapType(StringType(), IntegerType())}  # fmt: skip
    with pytest.raises(OptionError) as caught:
        projection(_struct(*((name, types[kind], nullable) for name, kind, nullable in fields)))
    message = str(caught.value)
    assert named in message and says in message
    assert caught.value.example and caught.value.example.startswith(".schema(") and caught.value.example in message
