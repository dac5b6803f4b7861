"""Avro with the Schema Registry, without a registry (issue 40): the type mapping, the batch decoder with Avro's
schema resolution, every bad-record path in both modes, the sink's encoder, and the options."""

from __future__ import annotations

import datetime
import io
import json
import sys
from decimal import Decimal
from types import ModuleType
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventhubs_spark.auth.credentials import EntraSettings
from eventhubs_spark.auth.network import NetworkSettings
from eventhubs_spark.avro import registry as registry_module
from eventhubs_spark.avro import types
from eventhubs_spark.avro.decode import PERMISSIVE, AvroDecodeError, AvroReading, Decoder
from eventhubs_spark.avro.encode import AvroWriting
from eventhubs_spark.avro.registry import Registry, RegistryError, schema_id
from eventhubs_spark.codec.schema import ARROW_SCHEMA
from eventhubs_spark.errors import OptionError, SinkError
from eventhubs_spark.options import read_options, write_options

from ..avro_shapes import schemas_and_values
from ..fresh import without_pandas

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


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    """Schemas by id, as if fetched from a registry (the process cache the decoder asks first)."""
    monkeypatch.setattr(registry_module, "_SCHEMAS", {})
    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)
    from eventhubs_spark.avro import decode

    monkeypatch.setattr(decode, "_DECODERS", {})

    def register(sid: str, schema: Any) -> None:
        registry_module._SCHEMAS[(NAMESPACE, sid)] = json.dumps(schema)

    return register


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


# -- types ---------------------------------------------------------------------------------------------------------


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


def test_schema_ids_come_from_the_encoders_content_type():
    assert schema_id("avro/binary+0f5ebc3e0b0c4c2f8d0c1f7f1b0f9e41") == "0f5ebc3e0b0c4c2f8d0c1f7f1b0f9e41"
    assert schema_id("application/json") is None and schema_id(None) is None and schema_id("avro/binary+") is None


# -- decoding ------------------------------------------------------------------------------------------------------


def test_a_batch_decodes_into_the_value_struct_with_its_logical_types(registered):
    registered("one", READING)
    reading = AvroReading(REGISTRY, json.dumps(READING))
    bodies = [body(READING, {**VALUE, "id": i}) for i in range(5)]
    out = reading.apply(batch(bodies, ["avro/binary+one"] * 5))
    assert out.schema.names[-1] == "value" and out.schema.field("value").type == reading.column.arrow
    values = out.column("value").to_pylist()
    assert [v["id"] for v in values] == list(range(5))
    assert values[0] == {**VALUE, "id": 0, "counters": [("x", 1)]}  # Arrow gives maps as pairs
    assert out.column("body").to_pylist() == bodies  # the source's columns stay as they were


def test_writer_schemas_resolve_to_the_reader_schema_by_avros_rules(registered):
    reader = {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},  # int in the old writer: promoted
            {"name": "amount", "type": "double"},  # float in the old writer: promoted
            {"name": "note", "type": "string", "default": "none"},  # added, with a default
            {"name": "raw", "type": "bytes"},  # string in the old writer: promoted
        ],
    }
    old = {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "int"},
            {"name": "amount", "type": "float"},
            {"name": "dropped", "type": "string"},  # removed in the reader: skipped
            {"name": "raw", "type": "string"},
        ],
    }
    registered("old", old)
    registered("new", reader)
    bodies = [
        body(old, {"id": 1, "amount": 2.5, "dropped": "gone", "raw": "r"}),
        body(reader, {"id": 2, "amount": 3.25, "note": "n", "raw": b"q"}),
    ]
    out = AvroReading(REGISTRY, json.dumps(reader)).apply(batch(bodies, ["avro/binary+old", "avro/binary+new"]))
    assert out.column("value").to_pylist() == [
        {"id": 1, "amount": 2.5, "note": "none", "raw": b"r"},
        {"id": 2, "amount": 3.25, "note": "n", "raw": b"q"},
    ]


def test_a_writer_schema_that_cannot_resolve_is_a_bad_record_of_its_own(registered):
    fields = [{"name": "id", "type": "long"}, {"name": "sku", "type": "string"}]
    reader = {"type": "record", "name": "Order", "fields": fields}
    writer = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}  # no sku, no default
    registered("w", writer)
    reading = AvroReading(REGISTRY, json.dumps(reader))
    with pytest.raises(AvroDecodeError, match=r"partition 3, sequence number 100 \(schema id w\).*cannot be resolved"):
        reading.apply(batch([body(writer, {"id": 1})], ["avro/binary+w"]))


def test_a_body_with_bytes_too_few_or_to_spare_spoils_no_other_record(registered):
    schema = {"type": "record", "name": "P", "fields": [{"name": "n", "type": "long"}, {"name": "s", "type": "string"}]}
    registered("p", schema)
    decoder = Decoder(json.dumps(schema), json.dumps(schema))
    good = [body(schema, {"n": i, "s": f"v{i}"}) for i in range(6)]
    spare = [*good[:2], good[2] + b"\x04zz", *good[3:]]  # a body with bytes after its record
    values, failed = decoder.decode(pa.array(spare, pa.binary()))
    assert failed == {} and [v["n"] for v in values.to_pylist()] == list(range(6))
    short = [*good[:2], good[2][:-2], *good[3:]]
    values, failed = decoder.decode(pa.array(short, pa.binary()))
    assert list(failed) == [2] and "shorter than its schema needs" in failed[2]
    assert [v and v["n"] for v in values.to_pylist()] == [0, 1, None, 3, 4, 5]


def test_failfast_names_the_partition_sequence_number_and_schema_id(registered):
    registered("p", READING)
    bodies = [body(READING, VALUE), b"\x02", body(READING, VALUE)]
    with pytest.raises(AvroDecodeError) as error:
        AvroReading(REGISTRY, json.dumps(READING)).apply(batch(bodies, ["avro/binary+p"] * 3))
    assert "partition 3, sequence number 101 (schema id p)" in str(error.value)
    assert "PERMISSIVE" in str(error.value)


def test_permissive_gives_a_null_value_and_the_body_and_error_of_each_bad_record(registered):
    registered("p", READING)
    bad = b"\x02"
    bodies = [body(READING, VALUE), bad, body(READING, VALUE), b"plain text", b"x", None]
    kinds = ["avro/binary+p", "avro/binary+p", "avro/binary+unknown", "text/plain", None, "avro/binary+p"]
    reading = AvroReading(REGISTRY, json.dumps(READING), mode=PERMISSIVE)
    with pytest.raises(RegistryError):  # no registry here: a schema id not in the cache is fetched, and fails
        REGISTRY.schema("unknown")
    registry_module._SCHEMAS.pop((NAMESPACE, "unknown"), None)
    # an unknown id: the registry says 404 (a bad record); stood in for by a non-retriable RegistryError
    from eventhubs_spark.avro import decode

    decode._DECODERS[(REGISTRY, "unknown", reading.reader_schema)] = "schema id unknown is not in the registry"
    out = reading.apply(batch(bodies, kinds))
    assert out.schema.names[-2:] == ["value", "_corrupt_record"]
    values = out.column("value").to_pylist()
    corrupt = out.column("_corrupt_record").to_pylist()
    assert values[0]["id"] == 7 and corrupt[0] is None
    assert values[1] is None and corrupt[1]["body"] == bad and "shorter than its schema needs" in corrupt[1]["error"]
    assert values[2] is None and "not in the registry" in corrupt[2]["error"]
    assert values[3] is None and "content type is 'text/plain'" in corrupt[3]["error"]
    assert values[4] is None and "no content type" in corrupt[4]["error"] and corrupt[4]["body"] == b"x"
    assert values[5] is None and corrupt[5]["body"] is None


_FRESH = """
import json, sys
import pyarrow as pa
from eventhubs_spark.auth.credentials import EntraSettings
from eventhubs_spark.auth.network import NetworkSettings
from eventhubs_spark.avro import registry
from eventhubs_spark.avro.decode import PERMISSIVE, AvroReading
from eventhubs_spark.avro.registry import Registry
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


def test_from_values_converts_by_itself_until_it_has_cost_a_pandas_import_then_leaves_it_to_pa_array(monkeypatch):
    """Its own conversion is slower per value than ``pa.array``'s, so it is used only while pandas is not loaded
    and until its time in the process adds up to about what importing pandas costs."""
    from eventhubs_spark.codec import arrays

    own: list[int] = []
    convert = arrays._from_values
    monkeypatch.setattr(arrays, "_from_values", lambda values, type_: own.append(len(values)) or convert(values, type_))
    values, type_ = [{"a": 1, "b": ["x"]}, None], pa.struct([("a", pa.int64()), ("b", pa.list_(pa.string()))])
    expected = pa.array(values, type_)
    monkeypatch.delitem(sys.modules, "pandas", raising=False)  # as in a fresh worker (restored after the test)
    monkeypatch.setattr(arrays, "_own_spent", 0.0)
    assert arrays.from_values(values, type_).equals(expected) and own[0] == 2, "its own (and its children's)"
    assert 0 < arrays._own_spent < arrays._OWN_BUDGET, "its time counted"
    calls = len(own)
    monkeypatch.setattr(arrays, "_own_spent", arrays._OWN_BUDGET)
    assert arrays.from_values(values, type_).equals(expected) and len(own) == calls, "budget spent: pa.array"
    monkeypatch.setattr(arrays, "_own_spent", 0.0)
    monkeypatch.setitem(sys.modules, "pandas", ModuleType("pandas"))
    assert arrays.from_values(values, type_).equals(expected) and len(own) == calls, "pandas loaded: pa.array"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schemas_and_values(), st.integers(0, 3))
def test_fastavros_values_become_the_arrays_pa_array_makes(generated, nulls):
    """``arrays.from_values``' own conversion against ``pa.array`` on every shape's plain values as fastavro gives
    them (records, arrays, maps, nullable unions, nested), nulls among them: it takes them all, as they are."""
    from eventhubs_spark.avro.decode import Decoder
    from eventhubs_spark.codec import arrays

    schema, values = generated
    decoder = Decoder(json.dumps(schema), json.dumps(schema))
    plain, _ = decoder.values(pa.array([body(schema, v) for v in values], pa.binary()))
    plain = [None] * nulls + plain
    got = arrays._from_values(plain, decoder._plain)  # not from_values: once pandas is loaded that is pa.array
    got.validate(full=True)
    assert got.equals(pa.array(plain, decoder._plain))


def test_decimals_are_read_all_at_once_as_row_by_row():
    """Avro decimals of any byte length (a writer may spend more bytes than it needs) and sign, nulls among them,
    and a value too large for the column's precision refused as before."""
    from eventhubs_spark.avro import decode

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.none() | st.integers(-(10**18) + 1, 10**18 - 1).flatmap(
        lambda u: st.integers(0, 3).map(lambda spare: u.to_bytes((u.bit_length() + 8) // 8 + spare, "big",
                                                                 signed=True)))))  # fmt: skip
    def check(raws: list[bytes | None]) -> None:
        arrow = pa.decimal128(18, 4)
        array = pa.array(raws, pa.binary())
        assert decode._decimals(array, arrow).equals(decode._decimals_by_row(array, arrow))
        assert decode._decimals(array.slice(1), arrow).equals(decode._decimals_by_row(array.slice(1), arrow))

    check()
    assert decode._decimals(pa.array([b""], pa.binary()), pa.decimal128(9, 2)).to_pylist() == [Decimal("0.00")]
    long = pa.array([(-5).to_bytes(20, "big", signed=True)], pa.binary())  # past 16 bytes: row by row
    assert decode._decimals(long, pa.decimal128(9, 2)).to_pylist() == [Decimal("-0.05")]
    big = pa.array([(10**9).to_bytes(8, "big")], pa.binary())
    with pytest.raises(pa.ArrowInvalid):
        decode._decimals_by_row(big, pa.decimal128(9, 2))
    with pytest.raises(pa.ArrowInvalid, match="does not fit in precision 9"):
        decode._decimals(big, pa.decimal128(9, 2))


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
    assert list(tmp_path.glob("eventhubs-schemas/*/abc.avsc"))


def test_the_reading_travels_pickled_without_its_worked_out_layout():
    import pickle

    reading = AvroReading(REGISTRY, json.dumps(READING))
    assert reading.column.convert == "struct"
    copy = pickle.loads(pickle.dumps(reading))
    assert copy == reading and "column" not in copy.__dict__


# -- encoding (the sink) -----------------------------------------------------------------------------------------


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


# -- options -------------------------------------------------------------------------------------------------------

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub"


def test_the_avro_options_go_together():
    base = {"eventhubs.connectionString": CONN}
    with pytest.raises(OptionError, match="eventhubs.avro.schema or eventhubs.avro.schemaId"):
        read_options({**base, "eventhubs.avro.schemaRegistry": "ns.servicebus.windows.net"}, "stream")
    with pytest.raises(OptionError, match="not both"):
        read_options({**base, "eventhubs.avro.schemaRegistry": "ns.servicebus.windows.net",
                      "eventhubs.avro.schema": '"long"', "eventhubs.avro.schemaId": "x"}, "stream")  # fmt: skip
    with pytest.raises(OptionError, match="eventhubs.avro.schema would be unused"):
        read_options({**base, "eventhubs.avro.schema": '"long"'}, "stream")
    with pytest.raises(OptionError, match="did you mean 'eventhubs.avro.schemaRegistry'"):
        read_options({**base, "eventhubs.avro.schemaRegistery": "ns.servicebus.windows.net"}, "stream")
    with pytest.raises(OptionError, match="expected one of failfast, permissive"):
        read_options({**base, "eventhubs.avro.mode": "DROPMALFORMED"}, "stream")
    with pytest.raises(OptionError, match="eventhubs.avro.schemaGroup"):
        write_options({**base, "eventhubs.avro.schemaRegistry": "ns.servicebus.windows.net"})
    avro = {"eventhubs.avro.schemaRegistry": "ns.servicebus.windows.net", "eventhubs.avro.schema": '"long"'}
    options = read_options({**base, **avro, "eventhubs.avro.mode": "permissive"}, "batch")
    assert options.avro_mode == "PERMISSIVE" and options.avro_registry == "ns.servicebus.windows.net"
    # the registry signs in with Entra ID, the hub still with its connection string
    assert options.settings.auth_method == "connectionString" and options.settings.entra is not None


# -- the columnar decoder: the same values as fastavro, or it steps aside -----------------------------------------

FLAT = {
    "type": "record",
    "name": "Flat",
    "fields": [
        {"name": "l", "type": "long"},
        {"name": "i", "type": "int"},
        {"name": "s", "type": "string"},
        {"name": "b", "type": "bytes"},
        {"name": "d", "type": "double"},
        {"name": "f", "type": "float"},
        {"name": "t", "type": "boolean"},
        {"name": "n", "type": ["null", "string"]},
        {"name": "m", "type": ["long", "null"]},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
        {"name": "x", "type": {"type": "fixed", "name": "X", "size": 2}},
        {"name": "r", "type": {"type": "record", "name": "In", "fields": [{"name": "z", "type": "int"}]}},
    ],
}  # fmt: skip


def _flat(i: int) -> dict[str, Any]:
    return {"l": (-1) ** i * 7 ** (i % 22), "i": -(2**31) if i == 3 else i * 1000, "s": "é" * (i % 5) + str(i),
            "b": bytes(range(i % 7)), "d": i / 7, "f": 0.5 * i, "t": i % 2 == 1, "n": None if i % 3 else f"n{i}",
            "m": None if i % 4 == 0 else 2**62 - i, "e": "ABC"[i % 3], "x": b"xy", "r": {"z": -i}}  # fmt: skip


def test_the_columnar_decoder_gives_fastavros_values():
    from eventhubs_spark.avro import columnar

    values = [_flat(i) for i in range(40)]
    bodies = pa.array([body(FLAT, v) for v in values], pa.binary())
    step = columnar.reader_for(FLAT, FLAT)
    assert step is not None
    got = columnar.decode(step, bodies).to_pylist()
    assert got == [fastavro.schemaless_reader(io.BytesIO(b), fastavro.parse_schema(FLAT), None)
                   for b in bodies.to_pylist()]  # fmt: skip
    # resolved to a reader: promoted, reordered, dropped, added with defaults, an enum symbol more
    reader = {"type": "record", "name": "Flat", "fields": [
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["C", "B", "A", "D"]}},
        {"name": "i", "type": "double"}, {"name": "s", "type": "bytes"}, {"name": "b", "type": "string"},
        {"name": "n", "type": ["null", "bytes"]}, {"name": "added", "type": "long", "default": 5},
        {"name": "none", "type": ["null", "string"], "default": None},
    ]}  # fmt: skip
    ascii_values = [{**v, "b": b"ab"} for v in values]  # bytes read as a string must be UTF-8
    ascii_bodies = pa.array([body(FLAT, v) for v in ascii_values], pa.binary())
    step = columnar.reader_for(FLAT, reader)
    assert step is not None
    expected = [fastavro.schemaless_reader(io.BytesIO(b), fastavro.parse_schema(FLAT), fastavro.parse_schema(reader))
                for b in ascii_bodies.to_pylist()]  # fmt: skip
    assert columnar.decode(step, ascii_bodies).to_pylist() == [{k: e[k] for k in (f["name"] for f in reader["fields"])}
                                                               for e in expected]  # fmt: skip


def test_the_columnar_decoder_steps_aside_for_what_it_does_not_take():
    from eventhubs_spark.avro import columnar

    assert columnar.reader_for(READING, READING) is None  # an array and a map
    two = {"type": "record", "name": "U", "fields": [{"name": "u", "type": ["int", "string"]}]}
    assert columnar.reader_for(two, two) is None
    nullable = {"type": "record", "name": "N", "fields": [{"name": "v", "type": ["null", "long"]}]}
    plain = {"type": "record", "name": "N", "fields": [{"name": "v", "type": "long"}]}
    assert columnar.reader_for(nullable, plain) is None  # a null would be an error the exact path names
    step = columnar.reader_for(FLAT, FLAT)
    good = body(FLAT, _flat(1))
    for irregular in (good + b"\x00", good[:-1], b"\xff" * 12, b""):
        with pytest.raises(columnar.Irregular):
            columnar.decode(step, pa.array([good, irregular], pa.binary()))
    bad_utf8 = {"type": "record", "name": "S", "fields": [{"name": "s", "type": "string"}]}
    with pytest.raises(columnar.Irregular):
        columnar.decode(columnar.reader_for(bad_utf8, bad_utf8), pa.array([b"\x04\xff\xfe"], pa.binary()))


def test_a_batch_of_several_schema_ids_keeps_each_value_on_its_row(registered):
    old = {"type": "record", "name": "V", "fields": [{"name": "a", "type": "int"}]}
    new = {"type": "record", "name": "V", "fields": [{"name": "a", "type": "long"}, {"name": "b", "type": "string",
                                                                                     "default": "-"}]}  # fmt: skip
    registered("old", old)
    registered("new", new)
    kinds = ["avro/binary+old", "avro/binary+new", None, "avro/binary+old", "avro/binary+new"]
    bodies = [
        body(old, {"a": 1}),
        body(new, {"a": 2, "b": "x"}),
        b"?",
        body(old, {"a": 4}),
        body(new, {"a": 5, "b": "y"}),
    ]
    out = AvroReading(REGISTRY, json.dumps(new), mode=PERMISSIVE).apply(batch(bodies, kinds))
    assert out.column("value").to_pylist() == [{"a": 1, "b": "-"}, {"a": 2, "b": "x"}, None, {"a": 4, "b": "-"},
                                               {"a": 5, "b": "y"}]  # fmt: skip
    assert [c is None for c in out.column("_corrupt_record").to_pylist()] == [True, True, False, True, True]


_FLAT_VALUES = st.fixed_dictionaries({
    "l": st.integers(-(2**63), 2**63 - 1), "i": st.integers(-(2**31), 2**31 - 1), "s": st.text(max_size=40),
    "b": st.binary(max_size=40), "d": st.floats(allow_nan=False), "f": st.floats(width=32, allow_nan=False),
    "t": st.booleans(), "n": st.one_of(st.none(), st.text(max_size=5)),
    "m": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), "e": st.sampled_from("ABC"),
    "x": st.binary(min_size=2, max_size=2), "r": st.fixed_dictionaries({"z": st.integers(-(2**31), 2**31 - 1)}),
})  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(st.lists(_FLAT_VALUES, min_size=1, max_size=30))
def test_any_flat_values_decode_column_by_column_as_fastavro_decodes_them(values):
    from eventhubs_spark.avro import columnar

    bodies = pa.array([body(FLAT, v) for v in values], pa.binary())
    parsed = fastavro.parse_schema(FLAT)
    expected = [fastavro.schemaless_reader(io.BytesIO(b), parsed, None) for b in bodies.to_pylist()]
    assert columnar.decode(columnar.reader_for(FLAT, FLAT), bodies).to_pylist() == expected


_MAPS = st.lists(st.one_of(st.none(), st.lists(st.tuples(st.sampled_from(["content-type", "x-opt-a", "b"]),
                                                         st.text(max_size=3)), max_size=4)), max_size=12)  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(_MAPS, st.integers(0, 5))
def test_content_types_are_found_as_map_lookup_finds_them(maps, cut):
    import pyarrow.compute as pc

    from eventhubs_spark.avro.decode import content_types

    array = pa.array(maps, pa.map_(pa.string(), pa.string())).slice(min(cut, len(maps)))
    expected = pc.map_lookup(array, pa.scalar("content-type"), "first").to_pylist() if len(array) else []
    assert content_types(array).to_pylist() == expected


def test_a_nullable_writer_field_reads_into_a_plain_reader_field_until_a_null_comes(registered):
    """Avro resolves a union writer per datum: the values resolve, a null is that record's error (Spark's to_avro
    writes every nullable column as ["null", T], read here by a reader that says the field is always there)."""
    writer = {"type": "record", "name": "O", "fields": [{"name": "id", "type": ["null", "long"], "default": None}]}
    reader = {"type": "record", "name": "O", "fields": [{"name": "id", "type": "long"}]}
    registered("w", writer)
    bodies = [body(writer, {"id": 1}), body(writer, {"id": None}), body(writer, {"id": 3})]
    out = AvroReading(REGISTRY, json.dumps(reader), mode=PERMISSIVE).apply(batch(bodies, ["avro/binary+w"] * 3))
    assert out.column("value").to_pylist() == [{"id": 1}, None, {"id": 3}]
    assert "cannot be resolved" in out.column("_corrupt_record")[1].as_py()["error"]


def test_writing_avro_takes_a_value_struct_instead_of_a_body_and_says_so():
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    from eventhubs_spark.sink import layout_for

    value = StructField("value", StructType([StructField("id", LongType())]))
    layout = layout_for(StructType([StructField("partitionKey", StringType()), value]), avro=True)
    assert (layout.body, layout.partition_key, layout.body_is_text) == (1, 0, False)
    with pytest.raises(SinkError, match="column 'body' is not written when writing Avro"):
        layout_for(StructType([value, StructField("body", BinaryType())]), avro=True)
    with pytest.raises(SinkError, match="column 'value' must be a struct"):
        layout_for(StructType([StructField("value", StringType())]), avro=True)
    with pytest.raises(SinkError, match="no 'value' column"):
        layout_for(StructType([StructField("partitionKey", StringType())]), avro=True)
