"""The old Scala connector beside ours (issue 47): azure-event-hubs-spark 2.3.22 on its own Spark 3.5 (a virtual
environment of its own, ``.venv-spark3.5``) reads the same emulator, over TLS on 5671 with the emulator's
authority in a JVM trust store (its legacy SDK knows no other port, no plain AMQP and no CA option). Users
migrate from it, so:

- the same starting (and ending) positions select the same events in both, batch and stream;
- a stream the old connector started and stopped is resumed by ours from the same Spark checkpoint location,
  reading on exactly (nothing lost, nothing twice);
- what each connector's sink writes, the other reads with the same body, properties and partition routing.

One Spark 3.5 application runs every step of the old connector (``tests/jvm/old_app.py``): its JVM starts once."""

from __future__ import annotations

import base64
import collections
import datetime as dt
import time

import pytest

from eventhubs_emulator import Emulator
from tests import jvm_peers
from tests.integration.sdk_helpers import send

# Its own Spark session (the spark fixture) but not marked spark: ./dev test runs it in the half beside the Spark
# tests, whose time is the CI's, and the compatibility runs leave it to the newest Spark
pytestmark = [pytest.mark.slow]
PER_ROUND = 30  # events per partition in each of the two rounds (a second apart: an enqueued time between them)


def _position(**fields) -> dict:
    """A position in the old connector's own JSON (every field present, as its EventPosition writes it)."""
    return {"offset": None, "seqNo": -1, "enqueuedTime": None, "isInclusive": True, **fields}


@pytest.fixture(scope="module")
def old(spark, tmp_path_factory):
    """The emulator, the events, our sink's writes; then every step of the old connector, once."""
    lacking = jvm_peers.missing()
    if lacking:
        pytest.skip(f"the old connector {lacking}")
    host = jvm_peers.loopback_address(5671)  # the old connector's only port
    where = tmp_path_factory.mktemp("old")
    emulator = Emulator({"positions": 4, "migrate": 4, "oldsink": 4, "newsink": 4}, host=host, tls_port=5671)
    emulator.start()
    try:
        conn = {hub: emulator.connection_string(hub) for hub in ("positions", "migrate", "oldsink", "newsink")}
        for p in range(4):  # same-sized events: an offset names the same place in every partition
            send(conn["positions"], [f"p{p}-a-{i:03d}" for i in range(PER_ROUND)], partition_id=str(p))
            send(conn["migrate"], [f"m{p}-a-{i:03d}" for i in range(PER_ROUND)], partition_id=str(p))
        time.sleep(1.2)
        between = dt.datetime.now(dt.timezone.utc)
        time.sleep(1.2)
        for p in range(4):
            send(conn["positions"], [f"p{p}-b-{i:03d}" for i in range(PER_ROUND)], partition_id=str(p))
        events = emulator.broker.hubs["positions"].partitions
        offsets = {events[p].events[10].offset for p in range(4)}
        assert len(offsets) == 1, offsets
        offset10 = str(offsets.pop())
        cases = {
            "start": (_position(offset="-1"), None),
            "latest": (_position(offset="@latest"), None),
            "seqNo 10": (_position(seqNo=10), None),
            "seqNo 10 exclusive": (_position(seqNo=10, isInclusive=False), None),
            "offset of seqNo 10": (_position(offset=offset10), None),
            "offset of seqNo 10 exclusive": (_position(offset=offset10, isInclusive=False), None),
            # milliseconds, as its JSON writes times (java.text's .SSS: six digits would be read as milliseconds)
            "enqueued between the rounds": (
                _position(enqueuedTime=between.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"),
                None,
            ),
            "to seqNo 40": (_position(offset="-1"), _position(seqNo=40)),
            "to seqNo 40 exclusive": (_position(offset="-1"), _position(seqNo=40, isInclusive=False)),
        }
        # our sink writes first, for the old connector to read
        rows = [
            (b"\x00new\xff", "1", None, {"kind": "a", "n": "1"}),
            (b"text", "2", None, None),
            (b"keyed", None, "device-3", {"k": "v"}),
        ]
        schema = "body binary, partitionId string, partitionKey string, properties map<string,string>"
        writer = spark.createDataFrame(rows, schema).write.format("eventhubs")
        writer.option("eventhubs.connectionString", conn["newsink"]).mode("append").save()
        old_rows = [
            {"body": base64.b64encode(b"\x00old\xff").decode(), "partitionId": "3", "properties": {"x": "1"}},
            {"body": base64.b64encode(b"plain").decode(), "partitionId": "0"},
            {"body": base64.b64encode(b"old keyed").decode(), "partitionKey": "device-3", "properties": {}},
        ]
        steps: list[dict] = []
        for name, (start, end) in cases.items():
            steps.append({"do": "batch", "name": f"batch {name}", "start": start, "end": end})
            if end is None:
                steps.append({"do": "stream", "name": f"stream {name}", "start": start})
        steps += [
            {
                "do": "migrate",
                "hub": "migrate",
                "path": str(where / "migration"),
                "start": _position(offset="-1"),
                "max": 48,
            },
            {"do": "write", "hub": "oldsink", "rows": old_rows},
            {"do": "rows", "name": "newsink", "hub": "newsink"},
        ]
        tls = emulator.connection_string("positions", tls=True)
        plan = {"connection_string": tls, "namespace": tls.split(";EntityPath=")[0], "steps": steps,
                "trust_store": jvm_peers.trust_store(emulator.ca_file, where)}  # fmt: skip
        results = jvm_peers.run_old(plan, where)
        yield {"emulator": emulator, "conn": conn, "cases": cases, "results": results, "where": where,
               "old_rows": old_rows}  # fmt: skip
    finally:
        emulator.stop()


def _ours(spark, conn: str, start: dict, end: dict | None, stream: bool, tmp) -> list[list]:
    import json

    if stream:
        reader = spark.readStream.format("eventhubs").option("eventhubs.connectionString", conn)
        query = (
            reader.option("eventhubs.startingPosition", json.dumps(start)).load()
            .select("partition", "sequenceNumber").writeStream.format("parquet").option("path", str(tmp / "data"))
            .option("checkpointLocation", str(tmp / "checkpoint")).trigger(availableNow=True).start()
        )  # fmt: skip
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()
        try:
            rows = spark.read.parquet(str(tmp / "data")).collect()
        except Exception as exc:  # nothing written: no file to infer a schema from
            if "UNABLE_TO_INFER_SCHEMA" not in str(exc):
                raise
            rows = []
    else:
        reader = spark.read.format("eventhubs").option("eventhubs.connectionString", conn)
        reader = reader.option("eventhubs.startingPosition", json.dumps(start))
        if end is not None:
            reader = reader.option("eventhubs.endingPosition", json.dumps(end))
        rows = reader.load().select("partition", "sequenceNumber").collect()
    return sorted([r.partition, r.sequenceNumber] for r in rows)


def test_the_same_positions_select_the_same_events_in_both_connectors(spark, old, tmp_path):
    results, conn = old["results"], old["conn"]["positions"]
    differ = []
    for name, (start, end) in old["cases"].items():
        kinds = [False] if end is not None else [False, True]
        for stream in kinds:
            label = f"{'stream' if stream else 'batch'} {name}"
            ours = _ours(spark, conn, start, end, stream, tmp_path / label.replace(" ", "_"))
            theirs = results[label]
            if ours != theirs:
                differ.append(f"{label}: ours {len(ours)} events, theirs {len(theirs)}")
    assert differ == [], differ
    # and the cases select what they say (not all alike): the whole hub, nothing, from the middle
    assert len(results["batch start"]) == 4 * 2 * PER_ROUND and results["stream latest"] == []
    assert len(results["batch seqNo 10"]) == 4 * (2 * PER_ROUND - 10)  # (and exclusive: the same, in both)
    assert len(results["batch enqueued between the rounds"]) == 4 * PER_ROUND
    # an ending sequence number is where the read stops, before it, inclusive or not: in both
    assert len(results["batch to seqNo 40"]) == len(results["batch to seqNo 40 exclusive"]) == 4 * 40


def test_a_stream_the_old_connector_started_is_resumed_by_ours_exactly(spark, old):
    path = old["where"] / "migration"
    read_by_old = spark.read.parquet(str(path / "data")).collect()
    assert len(read_by_old) == 48, "the old connector's one trigger read its maxEventsPerTrigger (12 a partition)"
    assert {r.body[:2] for r in read_by_old} == {"m0", "m1", "m2", "m3"}
    for p in range(4):  # more events after the old connector stopped
        send(old["conn"]["migrate"], [f"m{p}-b-{i:03d}" for i in range(10)], partition_id=str(p))
    query = (
        spark.readStream.format("eventhubs").option("eventhubs.connectionString", old["conn"]["migrate"])
        .option("eventhubs.startingPosition", '{"offset": "-1"}')  # ignored: the checkpoint says where it stands
        .load().selectExpr("cast(body as string) as body", "partition", "sequenceNumber")
        .writeStream.format("parquet").option("path", str(path / "data"))
        .option("checkpointLocation", str(path / "checkpoint")).trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    counts = collections.Counter(r.body for r in spark.read.parquet(str(path / "data")).collect())
    expected = {f"m{p}-{r}-{i:03d}" for p in range(4) for r, n in (("a", PER_ROUND), ("b", 10)) for i in range(n)}
    assert set(counts) == expected, f"missing {sorted(expected - set(counts))[:5]}"
    assert [b for b, n in counts.items() if n > 1] == [], "nothing read twice at the seam"


def test_each_connectors_sink_is_read_by_the_other_as_written(spark, old):
    from pyspark.sql import functions as F

    theirs = {base64.b64decode(r["body"]): r for r in old["results"]["newsink"]}
    assert set(theirs) == {b"\x00new\xff", b"text", b"keyed"}, "the old connector read what our sink wrote"
    assert theirs[b"\x00new\xff"]["partition"] == "1" and theirs[b"\x00new\xff"]["properties"] == {
        "kind": "a",
        "n": "1",
    }
    assert theirs[b"text"]["partition"] == "2" and theirs[b"text"]["properties"] == {}
    assert theirs[b"keyed"]["partitionKey"] == "device-3" and theirs[b"keyed"]["properties"] == {"k": "v"}

    ours = {
        bytes(r.body): r
        for r in spark.read.format("eventhubs").option("eventhubs.connectionString", old["conn"]["oldsink"])
        .load().select("body", "partition", "partitionKey", F.map_entries("properties").alias("properties")).collect()
    }  # fmt: skip
    assert set(ours) == {b"\x00old\xff", b"plain", b"old keyed"}, "ours read what the old sink wrote"
    assert ours[b"\x00old\xff"].partition == "3" and dict(ours[b"\x00old\xff"].properties) == {"x": "1"}
    assert ours[b"plain"].partition == "0"
    assert ours[b"old keyed"].partitionKey == "device-3"
    # one key, one partition: the same key from either sink lands in the same partition
    assert ours[b"old keyed"].partition == theirs[b"keyed"]["partition"]
