"""Unit tests of :mod:`eventhubs_spark.json_bodies.decode`: the columnar path agrees with Python's ``json`` and the
schema's rules on generated documents (hypothesis), and every odd body has its named behaviour, nothing lost."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventhubs_spark.json_bodies import decode as D
from eventhubs_spark.json_bodies import types as T
from eventhubs_spark.json_bodies.kept import KeptSchemas

_names = st.sampled_from(["id", "name", "temp", "ok", "tags", "pos", "n", "x"])
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),  # past bigint too
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
_values = st.recursive(
    _scalars, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_names, inner, max_size=4)),
    max_leaves=12,
)  # fmt: skip
_documents = st.dictionaries(_names, _values, max_size=5)
# bodies that are not JSON objects, or odd ones: empty, text, an array, bytes that are not UTF-8, a duplicate key, a
# number, line breaks, a number past a double, an escape
ODD = [b"", b"not json", b"[1, 2]", b"\xff\xfe", b'{"id": 1, "id": 2}', b"7", b'{\n  "id": 3\n}', b'{"n": 1e400}',
       b'{"x": "\\u00e9"}']  # fmt: skip


def _bodies(draw_docs: list[dict[str, Any]], odd: list[bytes]) -> list[bytes]:
    return [json.dumps(d).encode() for d in draw_docs] + odd


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sample=st.lists(_documents, min_size=1, max_size=5),
    docs=st.lists(_documents, max_size=30),
    odd=st.lists(st.sampled_from(ODD), max_size=4),
    mode=st.sampled_from(D.MODES),
)
def test_the_columnar_path_agrees_with_pythons_json_and_the_rules_body_by_body(sample, docs, odd, mode):
    """A schema inferred from ``sample``; ``docs`` (which may not fit it) and odd bodies decoded at once must give
    what each body gives alone through Python's json and the rules, in order: nothing lost or moved."""
    schema = T.settled(T.of_value({}))
    for d in sample:
        schema = T.merge(schema, T.of_value(d))
    schema = T.settled(schema)
    bodies = _bodies(docs, odd)
    outcome = D.decode(pa.array(bodies, pa.binary()), schema, mode)
    assert len(outcome.values) == len(outcome.rescued) == len(bodies)
    expected = pa.array([D._one(b, schema, mode)[0] for b in bodies], type=schema)
    assert outcome.values.to_pylist() == expected.to_pylist()
    assert outcome.rescued.to_pylist() == [D._one(b, schema, mode)[1] for b in bodies]


def test_every_odd_body_has_its_named_behaviour():
    schema = T.parse_schema("id bigint, name string, temp double, at timestamp")
    bodies = [b'{"id": 1, "name": "a", "temp": 2, "at": "2026-11-28T10:00:00Z"}', b"not json", b"\xff", b"[1]",
              b'{"id": 99999999999999999999}', b'{"id": 1, "id": 2}', b'{"name": {"nested": true}}', b"",
              b'{\n "id": 7\n}', b'{"id": true}', b'{"temp": "hot"}', b'{"at": "yesterday"}']  # fmt: skip
    out = D.decode(pa.array(bodies, pa.binary()), schema, D.RESCUE)
    values, rescued = out.values.to_pylist(), out.rescued.to_pylist()
    assert values[0]["id"] == 1 and values[0]["temp"] == 2.0
    assert values[0]["at"].isoformat() == "2026-11-28T10:00:00+00:00"
    assert (values[1], rescued[1]) == (None, '{"_body": "not json"}')  # not JSON: its text kept
    assert (values[2], rescued[2]) == (None, '{"_body_base64": "/w=="}')  # not UTF-8: its bytes kept
    assert (values[3], rescued[3]) == (None, '{"_body": "[1]"}')  # not an object
    assert values[4]["id"] is None and rescued[4] == '{"id":99999999999999999999}'  # past bigint
    assert values[5]["id"] == 2 and rescued[5] is None  # a duplicate key: the last value
    assert values[6]["name"] == '{"nested":true}' and rescued[6] is None  # a string field takes any value's text
    assert (values[7], rescued[7]) == (None, '{"_body": ""}')  # an empty body
    assert values[8]["id"] == 7  # a body with line breaks: read whole
    assert values[9]["id"] is None and rescued[9] == '{"id":true}'  # a boolean is not a bigint
    assert values[10]["temp"] is None and rescued[10] == '{"temp":"hot"}'
    assert values[11]["at"] is None and rescued[11] == '{"at":"yesterday"}'  # not ISO 8601


def test_a_slice_of_bodies_is_read_from_its_own_offsets():
    schema = T.parse_schema("id bigint")
    bodies = pa.array([f'{{"id": {i}}}'.encode() for i in range(10)], pa.binary())
    assert D.decode(bodies.slice(4, 3), schema, D.RESCUE).values.to_pylist() == [{"id": 4}, {"id": 5}, {"id": 6}]
    wide = pa.array([b'{"id": 1}', b"odd"], pa.large_binary())
    assert D.decode(wide, schema, D.RESCUE).rescued.to_pylist() == [None, '{"_body": "odd"}']


def test_deep_nesting_and_fields_the_schema_lacks_by_mode():
    schema = T.parse_schema("a struct<b:struct<c:array<struct<d:bigint>>>>")
    body = b'{"a": {"b": {"c": [{"d": 1, "e": 2}, {"d": 3}]}}, "z": 1}'
    for mode, rescued in [(D.RESCUE, '{"z":1,"a.b.c[].e":2}'), (D.NONE, None), (D.ADD, '{"z":1,"a.b.c[].e":2}'),
                          (D.FAIL, '{"z":1,"a.b.c[].e":2}')]:  # fmt: skip
        out = D.decode(pa.array([body], pa.binary()), schema, mode)
        assert out.values.to_pylist() == [{"a": {"b": {"c": [{"d": 1}, {"d": 3}]}}}]
        assert out.rescued.to_pylist() == [rescued], mode
        assert (out.added == ["a.b.c[].e", "z"]) == (mode != D.NONE), (mode, out.added)


def _batch(bodies: list[bytes]) -> pa.RecordBatch:
    n = len(bodies)
    return pa.RecordBatch.from_arrays(
        [pa.array(bodies, pa.binary()), pa.array(["3"] * n), pa.array(range(100, 100 + n), pa.int64())],
        ["body", "partition", "sequenceNumber"],
    )


def test_add_new_columns_records_one_version_and_stops_naming_fields_and_where(tmp_path):
    kept = KeptSchemas(str(tmp_path))
    assert kept.create(0, "`id` bigint", ["id"]) and not kept.create(0, "`x` bigint", ["x"])
    reading = D.JsonReading("`id` bigint", D.ADD, "_rescued_data", str(tmp_path), 0)
    with pytest.raises(D.SchemaEvolved) as caught:
        reading.apply(_batch([b'{"id": 1}', b'{"id": 2.5, "battery": 0.5}']))
    message = str(caught.value)
    assert "partition 3, sequence number 101" in message and "battery" in message and "Schema version 1" in message
    assert [v.number for v in kept.versions()] == [0, 1]
    assert T.parse_schema(kept.latest().schema) == T.parse_schema("id double, battery double")
    # another task of the same batch finds the version there already: no third one
    with pytest.raises(D.SchemaEvolved, match="Schema version 1"):
        reading.apply(_batch([b'{"battery": 1.5}']))
    assert len(kept.versions()) == 2


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "batch"])
def test_a_stop_for_new_columns_says_what_a_stream_or_a_batch_read_does_next(tmp_path, stream):
    """A stream is defined again and started; a batch read is loaded again and its action run again: each is told
    its own next step, never the other's."""
    reading = D.JsonReading("`id` bigint", D.ADD, "_rescued_data", str(tmp_path), 0, stream=stream)
    with pytest.raises(D.SchemaEvolved) as caught:
        reading.apply(_batch([b'{"id": 1, "battery": 0.5}']))
    message = str(caught.value)
    if stream:
        assert "spark.readStream.format('eventhubs')" in message and "start it" in message
    else:
        assert "spark.read.format('eventhubs')" in message and "run the action again" in message
        assert "readStream" not in message and "stream" not in message.split("addNewColumns)")[1]


def test_fail_on_new_columns_names_the_partition_and_sequence_number():
    reading = D.JsonReading("`id` bigint", D.FAIL, "_rescued_data")
    assert reading.apply(_batch([b'{"id": 1}'])).column("value").to_pylist() == [{"id": 1}]
    with pytest.raises(D.DoesNotFit, match=r"partition 3, sequence number 101 does not fit the schema \(\{\"x\":1\}\)"):
        reading.apply(_batch([b'{"id": 1}', b'{"x": 1}']))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1500), st.sampled_from([None, b"\n", b"\r", b"\r\n"])), min_size=1,
                max_size=12))  # fmt: skip
def test_large_bodies_are_found_one_per_line_exactly_when_none_holds_a_line_break(shapes):
    """The check that the C++ reader's lines are the bodies, by a find per body for large bodies (the count for
    small ones): the same answer as counting every byte, wherever a body holds a line break."""
    bodies = [b"x" * size + (brk or b"") + b"y" * (size % 7) for size, brk in shapes]
    array = pa.array([b"z" * 700, *bodies], pa.binary()).slice(1)  # a slice: its offsets start past 0
    text, ends = D._joined(array)
    expected = text.count(b"\n") == len(bodies) - 1 and b"\r" not in text
    assert D._one_per_line(text, ends) is expected
    assert expected is all(b"\n" not in b and b"\r" not in b for b in bodies)


def test_large_pretty_printed_bodies_are_read_whole():
    """2 KB documents, one of them printed over several lines: every one read, in order, none split."""
    docs = [{"id": i, "note": "x" * 2000} for i in range(6)]
    bodies = [json.dumps(d).encode() for d in docs]
    bodies[3] = json.dumps(docs[3], indent=2).encode()
    outcome = D.decode(pa.array(bodies, pa.binary()), T.parse_schema("id bigint, note string"), D.RESCUE)
    assert [v["id"] for v in outcome.values.to_pylist()] == list(range(6))
    assert outcome.rescued.null_count == 6 and outcome.slow_rows in (0, 1)


def test_a_json_read_leaves_the_body_out_unless_told_to_keep_it():
    """The read's columns are the source's own less the body (it would travel to the JVM beside its parsed value),
    then value and the rescue column; eventhubs.json.keepBody keeps it. What the batches hold is what the schema
    says, either way."""
    from eventhubs_spark.codec.schema import ARROW_SCHEMA
    from eventhubs_spark.source.partition_reader import source_ddl, source_schema

    rows = [{"body": b'{"id": 1}', "partition": "3", "sequenceNumber": 100},
            {"body": b"not json", "partition": "3", "sequenceNumber": 101}]  # fmt: skip
    batch = pa.RecordBatch.from_pylist(rows, schema=ARROW_SCHEMA)  # the source's own columns, as a task has them
    for keep in (False, True):
        reading = D.JsonReading("`id` bigint", D.RESCUE, "_rescued_data", keep_body=keep)
        out = reading.apply(batch)
        assert out.schema == source_schema(reading)
        assert ("body" in out.schema.names) is keep and out.schema.names[-2:] == ["value", "_rescued_data"]
        assert source_ddl(reading).startswith("body binary, partition string" if keep else "partition string, ")
        assert out.column("value").to_pylist() == [{"id": 1}, None]
        assert out.column("_rescued_data").to_pylist() == [None, '{"_body": "not json"}']  # the odd body kept
    assert [f.name for f in source_schema(None)] == ARROW_SCHEMA.names


def test_types_read_back_what_they_write_and_merge_by_the_rules():
    schema = T.parse_schema("`odd `` name` bigint, p struct<kind:string, n:array<double>>, t timestamp, d date")
    assert T.parse_schema(T.to_text(schema)) == schema
    assert T.parse_schema('{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,"metadata":{}}]}') == (
        pa.struct([pa.field("a", pa.int64())])
    )
    assert T.merge(T.LONG, T.DOUBLE) == T.DOUBLE and T.merge(T.LONG, T.TEXT) == T.TEXT
    assert T.merge(T.NULL, T.BOOL) == T.BOOL and T.settled(pa.list_(T.NULL)) == pa.list_(T.TEXT)
    with pytest.raises(ValueError, match="varchar"):
        T.parse_schema("a varchar")
