"""Unit tests of :mod:`eventhubs_spark.json_bodies.encode`: the sink's registered JSON bodies, from Arrow and from
rows, as the official JSON Schema encoder's validator takes them."""

from __future__ import annotations

import datetime
import json
from decimal import Decimal

import pyarrow as pa
import pytest

from eventhubs_spark.errors import SinkError
from eventhubs_spark.json_bodies.encode import JsonWriting, plain
from eventhubs_spark.json_bodies.json_schema import of_spark
from eventhubs_spark.json_bodies.registered import validator

AT = datetime.datetime(2026, 12, 7, 10, 30, 15, 123456, tzinfo=datetime.timezone.utc)


def _column():
    from pyspark.sql import types as st

    return st.StructType([
        st.StructField("id", st.LongType(), nullable=False),
        st.StructField("at", st.TimestampType()),
        st.StructField("day", st.DateType()),
        st.StructField("price", st.DecimalType(9, 2)),
        st.StructField("raw", st.BinaryType()),
        st.StructField("lines", st.ArrayType(st.StructType([st.StructField("sku", st.StringType())]))),
        st.StructField("note", st.StringType()),
    ])  # fmt: skip


def test_bodies_from_arrow_are_compact_json_that_validates_nulls_left_out():
    column = _column()
    schema = json.dumps(of_spark(column, "Order"))
    writing = JsonWriting(schema, "id1", column.json(), validate=True)
    assert writing.content_type == "application/json;serialization=Json+id1"
    array = pa.array([
        {"id": 1, "at": AT, "day": datetime.date(2026, 12, 7), "price": Decimal("12.34"), "raw": b"\x00\xff",
         "lines": [{"sku": "tea"}, {"sku": None}], "note": None},
        {"id": 2, "at": None, "day": None, "price": Decimal("3.00"), "raw": None, "lines": None, "note": "é"},
    ], pa.struct([("id", pa.int64()), ("at", pa.timestamp("us", tz="UTC")), ("day", pa.date32()),
                  ("price", pa.decimal128(9, 2)), ("raw", pa.binary()),
                  ("lines", pa.list_(pa.struct([("sku", pa.string())]))), ("note", pa.string())]))  # fmt: skip
    bodies = writing.encode_arrow(array)
    assert bodies[0] == (b'{"id":1,"at":"2026-12-07T10:30:15.123456Z","day":"2026-12-07","price":12.34,"raw":"AP8=",'
                         b'"lines":[{"sku":"tea"},{}]}')  # fmt: skip
    assert json.loads(bodies[1]) == {"id": 2, "price": 3, "note": "é"}
    check = validator(schema, "s")
    assert [check(json.loads(b)) for b in bodies] == [None, None]


def test_rows_give_the_same_bodies_as_arrow():
    from pyspark.sql import Row

    column = _column()
    writing = JsonWriting(json.dumps(of_spark(column, "Order")), "id1", column.json())
    local = AT.astimezone().replace(tzinfo=None)  # Spark 4.0's rows: a naive local time
    row = Row(id=1, at=local, day=datetime.date(2026, 12, 7), price=Decimal("12.34"), raw=b"\x00\xff",
              lines=[Row(sku="tea")], note=None)  # fmt: skip
    assert json.loads(writing.encode([row])[0]) == {"id": 1, "at": "2026-12-07T10:30:15.123456Z",
                                                    "day": "2026-12-07", "price": 12.34, "raw": "AP8=",
                                                    "lines": [{"sku": "tea"}]}  # fmt: skip


def test_what_json_cannot_hold_or_the_schema_refuses_fails_the_write_naming_the_row():
    from pyspark.sql import types as st

    column = st.StructType([st.StructField("x", st.DoubleType())])
    writing = JsonWriting(json.dumps(of_spark(column, "X")), "id1", column.json())
    with pytest.raises(SinkError, match=r"row 1 .*'value': x is nan"):
        writing.encode([{"x": 1.0}, {"x": float("nan")}])
    strict = {"title": "X", "type": "object", "properties": {"x": {"type": "number", "minimum": 0}}}
    checked = JsonWriting(json.dumps(strict), "id2", column.json(), validate=True)
    assert checked.encode([{"x": 1.0}]) == [b'{"x":1.0}']
    with pytest.raises(SinkError, match=r"row 0 .*does not validate against schema id id2.*x: -1.0 is less"):
        checked.encode([{"x": -1.0}])
    with pytest.raises(SinkError, match="null"):
        writing.encode([None])


def test_plain_keeps_wall_clocks_and_integral_decimals():
    assert plain({"t": datetime.datetime(2026, 1, 2, 3, 4, 5), "d": Decimal("7"), "n": None}) == {
        "t": "2026-01-02T03:04:05", "d": 7}  # fmt: skip


def test_a_decimal_with_a_fraction_is_written_in_its_own_digits_and_validates_as_a_number():
    """A decimal(38,18) written through a double kept 17 digits of its 38: each is written as its own digits, as
    Spark's to_json writes it, and the validator still sees a number (minimum, maximum)."""
    from pyspark.sql import types as st

    column = st.StructType([st.StructField("amount", st.DecimalType(38, 18)), st.StructField("note", st.StringType()),
                            st.StructField("parts", st.ArrayType(st.DecimalType(10, 9)))])  # fmt: skip
    schema = json.dumps(of_spark(column, "Payment"))
    strict = json.loads(schema)
    strict["properties"]["amount"]["minimum"] = 0
    writing = JsonWriting(json.dumps(strict), "id3", column.json(), validate=True)
    big = Decimal("12345678901234567890.123456789012345678")
    tiny = Decimal("1.5E-7")
    array = pa.array([{"amount": big, "note": 'a "quote" é', "parts": [tiny, Decimal("2")]}],
                     pa.struct([("amount", pa.decimal128(38, 18)), ("note", pa.string()),
                                ("parts", pa.list_(pa.decimal128(10, 9)))]))  # fmt: skip
    (body,) = writing.encode_arrow(array)
    assert body == ('{"amount":12345678901234567890.123456789012345678,"note":"a \\"quote\\" é",'
                    '"parts":[1.50E-7,2]}').encode()  # fmt: skip
    assert json.loads(body, parse_float=Decimal) == {"amount": big, "note": 'a "quote" é', "parts": [tiny, 2]}
    with pytest.raises(SinkError, match=r"row 0 .*does not validate against schema id id3"):
        writing.encode([{"amount": -big, "note": None, "parts": None}])
    assert writing.encode([{"amount": Decimal("0.5"), "note": None, "parts": None}]) == [b'{"amount":0.5}']
