"""JSON bodies into columns on Spark (eventhubs.json.*): a schema inferred from a hub of mixed documents and kept,
a new field arriving mid-stream under addNewColumns (the stop and the start again read every event once, the new
column from the first event that had it), a fixed schema's rescue column, and a restart that reads with the kept
schema."""

from __future__ import annotations

import json

import pytest

from tests.integration.sdk_helpers import send

pytestmark = pytest.mark.spark


def reader(spark, eventhub, location: str, **options: str):
    r = (
        spark.readStream.format("eventhubs")
        .option("eventhubs.connectionString", eventhub.connection_string)
        .option("eventhubs.startingPosition", '{"offset": "-1"}')
        .option("eventhubs.json.schemaLocation", location)
    )
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def run_to_parquet(df, out: str, checkpoint: str) -> Exception | None:
    query = (
        df.selectExpr("partition", "sequenceNumber", "value.*", "_rescued_data")
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(180)
    except Exception as exc:
        return exc
    finally:
        query.stop()
    return None


def test_a_schema_is_inferred_from_mixed_documents_kept_and_read_by_a_batch_read_too(spark, eventhub, tmp_path):
    docs = [
        {"id": 1, "device": "a", "reading": {"temp": 20, "tags": ["x"]}},
        {"id": 2, "device": "b", "reading": {"temp": 21.5}, "ok": True},
        {"id": 3, "when": "2026-11-28T10:00:00Z"},
    ]
    send(eventhub.connection_string, [json.dumps(d) for d in docs] + ["not json"], partition_id="0")
    location = str(tmp_path / "schema")
    df = reader(spark, eventhub, location)
    value = {f.name: f.dataType.simpleString() for f in df.schema["value"].dataType.fields}
    assert value == {
        "id": "bigint",
        "device": "string",
        "reading": "struct<temp:double,tags:array<string>>",
        "ok": "boolean",
        "when": "string",
    }  # fmt: skip  (timestamps stay text)
    assert df.schema["_rescued_data"].dataType.simpleString() == "string"
    assert (tmp_path / "schema" / "_schemas" / "0").exists()
    # a batch read takes the same options, and the schema kept
    rows = (
        spark.read.format("eventhubs")
        .option("eventhubs.connectionString", eventhub.connection_string)
        .option("eventhubs.json.schemaLocation", location)
        .load()
        .selectExpr("value.id", "value.reading.temp", "_rescued_data")
        .collect()
    )
    got = sorted((r.id, r.temp, r._rescued_data) for r in rows if r.id is not None)
    assert got == [(1, 20.0, None), (2, 21.5, None), (3, None, None)]
    assert [r._rescued_data for r in rows if r.id is None] == ['{"_body": "not json"}']


def test_an_inferred_batch_read_right_after_a_read_samples_where_it_starts_and_writes_sparks_text(
    spark, eventhub, tmp_path
):
    """Right after a read of the same hub (whose owner-level receivers stay pooled a while), a read that infers its
    schema loads and reads (it failed with ReceiverDisconnectedError, its sampler refused by them); a batch read
    with no starting position samples the start of the stream too (quakes, then films: it inferred only the films'
    fields); a non-string value in a string field reads as Spark's own from_json writes it."""
    quakes = [json.dumps({"mag": 1.5 + i, "place": "x", "extra": {"depth": 0.0007482, "note": "\U0001F633"}})
              for i in range(60)]  # fmt: skip
    films = [json.dumps({"title": f"film {i}", "extra": "plain"}) for i in range(60)]
    send(eventhub.connection_string, quakes + films, partition_id="0")
    plain = spark.read.format("eventhubs").option("eventhubs.connectionString", eventhub.connection_string).load()
    assert plain.count() == 120  # its receivers are pooled, owner level, for a while
    location = str(tmp_path / "schema")
    df = (
        spark.read.format("eventhubs")
        .option("eventhubs.connectionString", eventhub.connection_string)
        .option("eventhubs.json.schemaLocation", location)
        .option("eventhubs.json.sampleEvents", "40")  # 10 a partition: 5 of the first events, 5 of the newest
        .load()
    )
    fields = {f.name: f.dataType.simpleString() for f in df.schema["value"].dataType.fields}
    assert fields == {"mag": "double", "place": "string", "extra": "string", "title": "string"}, fields
    extras = [r.extra for r in df.selectExpr("value.extra").collect()]
    # what Spark's own reader makes of the same bodies with the same schema
    bodies = spark.createDataFrame([(b,) for b in quakes + films], "body string")
    expected = [r.extra for r in bodies.selectExpr("from_json(body, 'extra string').extra as extra").collect()]
    assert sorted(extras) == sorted(expected)
    assert '{"depth":7.482E-4,"note":"\\uD83D\\uDE33"}' in extras, extras[:2]


def test_a_new_field_mid_stream_stops_once_then_every_event_is_read_once_with_its_new_column(spark, eventhub, tmp_path):
    location, out, checkpoint = str(tmp_path / "schema"), str(tmp_path / "out"), str(tmp_path / "cp")
    send(eventhub.connection_string, [json.dumps({"id": i, "device": f"d{i}"}) for i in range(20)], partition_id="1")
    assert run_to_parquet(reader(spark, eventhub, location), out, checkpoint) is None
    # events with a new field, and a type change
    send(eventhub.connection_string, [json.dumps({"id": 20 + i, "device": "d", "battery": 0.5 + i}) for i in range(5)],
         partition_id="1")  # fmt: skip
    defined = reader(spark, eventhub, location)
    failed = run_to_parquet(defined, out, checkpoint)
    assert failed is not None and "battery" in str(failed) and "Schema version 1" in str(failed), failed
    assert (tmp_path / "schema" / "_schemas" / "1").exists()
    # the same DataFrame again would read with the old schema: it is refused, saying why
    stale = run_to_parquet(defined, out, checkpoint)
    assert stale is not None and "Define it again" in str(stale), stale
    assert run_to_parquet(reader(spark, eventhub, location), out, checkpoint) is None
    rows = spark.read.option("mergeSchema", "true").parquet(out).collect()  # files of both schema versions
    assert sorted(r.id for r in rows) == list(range(25))  # every event once, across the stop and the start again
    assert {r.id: r.battery for r in rows if r.battery is not None} == {20 + i: 0.5 + i for i in range(5)}
    assert all(r._rescued_data is None for r in rows)


def test_a_fixed_schema_rescues_what_does_not_fit_and_nothing_is_lost(spark, eventhub):
    bodies = ['{"id": 1, "temp": 20.5}', '{"id": "two", "temp": 21}', '{"id": 3, "extra": [1, 2]}', "caf\u00e9 au lait",
              '[1, 2]', '{"id": 4, "id": 5}', b"\xff\xfe"]  # fmt: skip
    send(eventhub.connection_string, bodies, partition_id="2")
    rows = (
        spark.read.format("eventhubs")
        .option("eventhubs.connectionString", eventhub.connection_string)
        .option("eventhubs.json.schema", "id bigint, temp double")
        .load()
        .where("partition = '2'")
        .orderBy("sequenceNumber")
        .selectExpr("value.id", "value.temp", "_rescued_data")
        .collect()
    )
    assert [(r.id, r.temp, r._rescued_data) for r in rows] == [
        (1, 20.5, None),
        (None, 21.0, '{"id":"two"}'),
        (3, None, '{"extra":[1,2]}'),
        (None, None, '{"_body": "caf\u00e9 au lait"}'),
        (None, None, '{"_body": "[1, 2]"}'),
        (5, None, None),  # a duplicate key: the last value, as Spark's from_json and Python's json
        (None, None, '{"_body_base64": "//4="}'),  # bytes that are not UTF-8, kept
    ]


def test_a_json_read_that_asks_for_value_alone_leaves_the_body_behind(spark, eventhub):
    """Spark gives a Python source no column pruning: a query that needs only the document names its columns with
    ``.schema`` (as the JSON page shows), and the batches carry no body (what makes 2 KB bodies as fast as
    ``from_json`` in bench json)."""
    send(eventhub.connection_string, ['{"id": 1, "device": "a", "temp": 20.5}', '{"id": 2, "device": "b"}'],
         partition_id="3")  # fmt: skip
    df = (
        spark.read.format("eventhubs")
        .option("eventhubs.connectionString", eventhub.connection_string)
        .option("eventhubs.json.schema", "id bigint, device string, temp double")
        .schema("value struct<id:bigint,device:string,temp:double>, partition string, sequenceNumber bigint")
        .load()
    )
    assert df.columns == ["value", "partition", "sequenceNumber"]
    rows = df.where("partition = '3'").orderBy("sequenceNumber").selectExpr("value.*").collect()
    assert [tuple(r) for r in rows] == [(1, "a", 20.5), (2, "b", None)]


def test_a_json_read_has_no_body_column_unless_told_to_keep_it(spark, eventhub):
    """The body would travel to the JVM beside its parsed value (no column pruning for a Python source): a JSON
    read's columns leave it out; eventhubs.json.keepBody keeps it, the bytes as sent."""
    send(eventhub.connection_string, ['{"id": 7}'], partition_id="2")

    def read(**options: str):
        r = (spark.read.format("eventhubs").option("eventhubs.connectionString", eventhub.connection_string)
             .option("eventhubs.json.schema", "id bigint"))  # fmt: skip
        return r.options(**options).load().where("partition = '2'")

    plain = read()
    assert "body" not in plain.columns and plain.columns[:2] == ["partition", "offset"]
    assert plain.columns[-2:] == ["value", "_rescued_data"]
    assert [r.value.id for r in plain.collect()] == [7]
    kept = read(**{"eventhubs.json.keepBody": "true"})
    assert kept.columns[0] == "body" and kept.columns[-2:] == ["value", "_rescued_data"]
    assert [(bytes(r.body), r.value.id) for r in kept.collect()] == [(b'{"id": 7}', 7)]


def test_bad_json_options_name_the_option(spark, eventhub, tmp_path):
    def base():  # a DataFrameReader keeps its options: a new one per case
        return spark.read.format("eventhubs").option("eventhubs.connectionString", eventhub.connection_string)

    with pytest.raises(Exception, match="eventhubs.json.schema: type 'varchar'"):
        base().option("eventhubs.json.schema", "id varchar").load()
    with pytest.raises(Exception, match="not both"):
        base().option("eventhubs.json.schema", "id bigint").option(
            "eventhubs.json.schemaLocation", str(tmp_path)
        ).load()
    with pytest.raises(Exception, match="would be unused"):
        base().option("eventhubs.json.schemaEvolutionMode", "rescue").load()
    with pytest.raises(Exception, match="a fixed eventhubs.json.schema does not grow"):
        base().option("eventhubs.json.schema", "id bigint").option("eventhubs.json.schemaEvolutionMode",
                                                                   "addNewColumns").load()  # fmt: skip
    with pytest.raises(Exception, match="no JSON object among the 0 events"):
        base().option("eventhubs.json.schemaLocation", str(tmp_path / "empty")).load()  # an empty hub


def test_json_bodies_through_spark_connect(eventhub, tmp_path):
    """Inference, the kept schema and the rescue column through a Spark Connect client (a server of its own)."""
    import subprocess
    import sys
    from pathlib import Path

    send(eventhub.connection_string, ['{"id": 1, "n": {"x": 1.5}}', '{"id": 2}', "not json"], partition_id="0")
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "-m", "tests.integration.connect_json_app", eventhub.connection_string,
                           str(tmp_path)], cwd=root, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["value"] == "struct<id:bigint,n:struct<x:double>>"
    assert result["rows"] == [[1, None], [2, None], [None, '{"_body": "not json"}']]
    assert (tmp_path / "schema" / "_schemas" / "0").exists()
