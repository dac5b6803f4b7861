"""Unit tests of :mod:`eventhubs_spark.avro.types`."""

from __future__ import annotations

import datetime
import io
import json
from decimal import Decimal

import fastavro
import pyarrow as pa
import pytest

from eventhubs_spark.avro import types
from eventhubs_spark.avro.encode import AvroWriting
from eventhubs_spark.errors import SinkError
from tests.fresh import without_pandas
from tests.unit.support.avro import AT, READING, VALUE, body


def test_avro_types_map_to_sparks_from_avro_types():
    column = types.column(READING)
    assert types.spark_type(column) == (
        "struct<`id`: bigint, `device`: string, `celsius`: double, `at`: timestamp, `day`: date, "
        "`price`: decimal(9, 2), `state`: string, `tags`: array<string>, `counters`: map<string, bigint>, "
        "`where`: struct<`site`: string, `since`: timestamp>>"
    )
    assert column.arrow.field("at").type == pa.timestamp("us", tz="UTC")
    local = types.column({"type": "long", "logicalType": "local-timestamp-micros"})
    assert types.spark_type(local) == "timestamp_ntz" and local.plain == pa.int64()
    assert types.spark_type(types.column({"type": "fixed", "name": "F", "size": 4})) == "binary"
    uuid = types.column({"type": "string", "logicalType": "uuid"})
    assert types.spark_type(uuid) == "string"


def test_what_spark_cannot_hold_is_refused_naming_the_field():
    recursive = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    with pytest.raises(types.SchemaError, match=r"value.next: record 'Node' contains itself"):
        types.column(recursive)
    union = {"type": "record", "name": "R", "fields": [{"name": "either", "type": ["int", "string"]}]}
    with pytest.raises(types.SchemaError, match=r"value.either: the union .* has 2 types besides null"):
        types.column(union)
    with pytest.raises(types.SchemaError, match="precision 1 to 38"):
        types.column({"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2})
    with pytest.raises(types.SchemaError, match="eventhubs.avro.schema is not JSON"):
        types.parse("{not json", "eventhubs.avro.schema")


def test_a_spark_struct_becomes_the_avro_schema_spark_writes():
    from pyspark.sql.types import StringType, StructField, StructType, TimestampType

    struct = StructType([StructField("id", StringType(), False), StructField("at", TimestampType())])
    schema = types.avro_of_spark(struct, "topLevelRecord", "shop")
    assert schema == {
        "type": "record",
        "name": "topLevelRecord",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}], "default": None},
        ],
    }
    fastavro.parse_schema(schema)


def test_the_sink_encodes_rows_the_official_decoder_reads():
    from pyspark.sql.pandas.types import from_arrow_type

    spark_type = from_arrow_type(types.column(READING).arrow, prefer_timestamp_ntz=True)
    writing = AvroWriting(json.dumps(READING), "abc", spark_type.json())
    assert writing.content_type == "avro/binary+abc"
    bodies = writing.encode([VALUE, {**VALUE, "id": 8, "celsius": None}])
    parsed = fastavro.parse_schema(READING)
    decoded = [fastavro.schemaless_reader(io.BytesIO(b), parsed, None) for b in bodies]
    assert [d["id"] for d in decoded] == [7, 8] and decoded[1]["celsius"] is None
    assert decoded[0]["price"] == Decimal("12.34") and decoded[0]["at"] == AT
    from pyspark.sql import Row  # Spark 4.0's stream sink passes rows, structs as Rows

    row = Row(**{**VALUE, "where": Row(**VALUE["where"])})
    assert writing.encode([row]) == writing.encode([VALUE])
    with pytest.raises(SinkError, match=r"row 1 of the batch: column 'value' cannot be written"):
        writing.encode([VALUE, {**VALUE, "id": "not a number"}])


_FRESH_SINK = """
import sys
import pyarrow as pa
from eventhubs_spark.avro.encode import AvroWriting
schema, spark_type, path = sys.argv[1:]
with pa.ipc.open_file(path) as file:
    value = file.get_batch(0).column(0)
bodies = AvroWriting(schema, "s", spark_type).encode_arrow(value)
"""


def test_the_avro_sink_never_imports_pandas_in_a_fresh_worker(tmp_path):
    """The sink's Avro column from Arrow (Spark 4.1+, every batch sink) with maps, arrays, timestamps of both
    kinds, nested records and nulls: a fresh Python worker pays no pandas import (0.3-0.6 s), and the bodies are
    the official encoder's."""
    from pyspark.sql.pandas.types import from_arrow_type

    schema = {"type": "record", "name": "S", "fields": [
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": ["null", {"type": "long", "logicalType": "local-timestamp-micros"}]},
        {"name": "counts", "type": {"type": "map", "values": "long"}},
        {"name": "tags", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "inner", "type": ["null", {"type": "record", "name": "I", "fields": [
            {"name": "day", "type": {"type": "int", "logicalType": "date"}}]}]},
    ]}  # fmt: skip
    column = types.column(schema)
    utc = datetime.timezone.utc
    values = [
        {"at": datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=utc), "local": datetime.datetime(1969, 12, 31, 23),
         "counts": {"a": 1}, "tags": ["x", None], "inner": {"day": datetime.date(2026, 11, 27)}},
        {"at": datetime.datetime(1960, 1, 1, tzinfo=utc), "local": None, "counts": {}, "tags": [], "inner": None},
    ]  # fmt: skip
    array = pa.array([{**v, "counts": list(v["counts"].items())} for v in values], column.arrow)
    with pa.ipc.new_file(tmp_path / "value.arrow", pa.schema([("value", array.type)])) as file:
        file.write_batch(pa.record_batch([array], names=["value"]))
    spark_type = from_arrow_type(column.arrow, prefer_timestamp_ntz=True).json()
    show = "print(json.dumps([b.hex() for b in bodies]))"
    out = without_pandas(_FRESH_SINK, json.dumps(schema), spark_type, str(tmp_path / "value.arrow"),
                         show="import json\n" + show)  # fmt: skip
    assert json.loads(out) == [body(schema, v).hex() for v in values]


def test_a_map_reaches_the_avro_writer_as_a_dict_on_every_path():
    """Issue 51: Arrow's to_pylist gives a map as (key, value) pairs, which fastavro's writer refused on every row."""
    from pyspark.sql.pandas.types import from_arrow_type

    schema = {"type": "record", "name": "M", "fields": [
        {"name": "counts", "type": {"type": "map", "values": "long"}},
        {"name": "nested", "type": {"type": "array",
                                    "items": {"type": "map", "values": {"type": "array", "items": "int"}}}},
    ]}  # fmt: skip
    column = types.column(schema)
    writing = AvroWriting(json.dumps(schema), "m", from_arrow_type(column.arrow, prefer_timestamp_ntz=True).json())
    value = {"counts": {"a": 1, "b": 2}, "nested": [{"x": [1, 2]}, {}]}
    array = pa.array([{"counts": [("a", 1), ("b", 2)], "nested": [[("x", [1, 2])], []]}], column.arrow)
    assert writing.encode_arrow(array) == [body(schema, value)]
    assert writing.encode([{"counts": [("a", 1), ("b", 2)], "nested": [[("x", [1, 2])], []]}]) == [body(schema, value)]
    twice = pa.array([{"counts": [("a", 1), ("a", 2)], "nested": []}], column.arrow)
    with pytest.raises(SinkError, match=r"column 'value' holds a map with a key twice, .*: \['a', 'a'\]"):
        writing.encode_arrow(twice)  # nothing dropped
    with pytest.raises(SinkError, match=r"a map holds a key twice, which Avro cannot write: \['a', 'a'\]"):
        writing.encode([{"counts": [("a", 1), ("a", 2)], "nested": []}])
