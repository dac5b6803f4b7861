"""Unit tests of :mod:`eventhubs_spark.avro.encode`."""

from __future__ import annotations

import datetime
import io
import json

import fastavro
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventhubs_spark.avro.decode import AvroReading
from eventhubs_spark.avro.encode import AvroWriting
from tests.avro_shapes import schemas_and_values
from tests.unit.support.avro import REGISTRY, batch, body


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schemas_and_values())
def test_whatever_the_reader_reads_the_sink_writes_back_byte_for_byte(registered, generated):
    """Every shape the reader reads (maps, arrays of records, maps of arrays, enums, fixed, decimals, dates, the
    timestamp kinds, nullable unions, nested records), written back by the sink from the column the reader made:
    from Arrow (Spark 4.1+, every batch sink) and from Spark's own rows of it (Spark 4.0's stream sink), each the
    very bodies the writer wrote."""
    from pyspark.sql.conversion import ArrowTableToRowsConversion
    from pyspark.sql.pandas.types import from_arrow_type

    schema, values = generated
    sid = f"g{abs(hash(json.dumps(schema)))}"
    registered(sid, schema)
    bodies = [body(schema, v) for v in values]
    column = AvroReading(REGISTRY, json.dumps(schema)).apply(batch(bodies, [f"avro/binary+{sid}"] * len(bodies)))
    value = column.column("value")
    spark_type = from_arrow_type(value.type, prefer_timestamp_ntz=True)
    writing = AvroWriting(json.dumps(schema), sid, spark_type.json())
    assert writing.encode_arrow(value) == bodies
    to_row = ArrowTableToRowsConversion._create_converter(spark_type)
    rows = [to_row(v) for v in ArrowTableToRowsConversion._to_pylist(value)]
    assert writing.encode(rows) == bodies


_DAY_US = 86_400 * 10**6


_SPARK_US = (-62_135_596_800 * 10**6 + _DAY_US, 253_402_300_799 * 10**6 - _DAY_US)  # years 1-9999, a day inside


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["s", "ms", "us"]), st.sampled_from([None, "UTC", "America/New_York", "+05:30"]),
       st.lists(st.none() | st.integers(*_SPARK_US)), st.integers(0, 3))  # fmt: skip
def test_timestamps_reach_the_avro_writer_as_the_instants_arrow_gives(unit, tz, micros, cut):
    """Any instant of Spark's range (years 1 to 9999), in each unit, with and without a zone, nulls, a slice."""
    from eventhubs_spark.avro.encode import python_values

    per = {"s": 10**6, "ms": 1000, "us": 1}[unit]
    values = [None if m is None else m // per for m in micros]
    array = pa.array(values, pa.timestamp(unit, tz)).slice(min(cut, len(values)))
    assert python_values(array) == array.to_pylist()


def test_a_row_timestamp_is_local_time_and_reaches_avro_as_the_same_instant(monkeypatch):
    """pyspark's rows give TIMESTAMP as a naive datetime in the worker's zone: written as that instant."""
    import time

    from pyspark.sql.types import StructField, StructType, TimestampType

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        schema = {"type": "record", "name": "T", "fields": [
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}}]}  # fmt: skip
        writing = AvroWriting(json.dumps(schema), "t", StructType([StructField("at", TimestampType())]).json())
        local = datetime.datetime(2026, 11, 1, 1, 30, fold=1)  # the second 01:30 of the night the clocks go back
        [encoded] = writing.encode([(local,)])
        decoded = fastavro.schemaless_reader(io.BytesIO(encoded), fastavro.parse_schema(schema), None)
        assert decoded["at"] == datetime.datetime(2026, 11, 1, 6, 30, tzinfo=datetime.timezone.utc)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
