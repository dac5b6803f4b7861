"""Unit tests of :mod:`eventhubs_spark.avro.columnar`."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.support.avro import READING, body

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
