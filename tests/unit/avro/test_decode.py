"""Unit tests of :mod:`eventhubs_spark.avro.decode`."""

from __future__ import annotations

import json
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventhubs_spark.avro.decode import PERMISSIVE, AvroReading, Decoder
from eventhubs_spark.errors import AvroDecodeError, RegistryError
from eventhubs_spark.registry import client as registry_module
from tests.unit.support.avro import NAMESPACE, READING, REGISTRY, VALUE, batch, body


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


def test_the_reading_travels_pickled_without_its_worked_out_layout():
    import pickle

    reading = AvroReading(REGISTRY, json.dumps(READING))
    assert reading.column.convert == "struct"
    copy = pickle.loads(pickle.dumps(reading))
    assert copy == reading and "column" not in copy.__dict__


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
