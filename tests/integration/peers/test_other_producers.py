"""Events written and read by another language's SDK: the JavaScript Event Hubs SDK (``@azure/event-hubs`` from npm,
on rhea, an AMQP implementation independent of the Python SDK's) sends to the emulator, and the connector's
decoders make of them what the Python SDK's EventData make: every body kind JavaScript sends, every
property type, the message's own properties, a partition key, and a long run of alike events that goes
column by column; and what the connector's sink writes, read by the JavaScript SDK as written. Real
producers and consumers are .NET, Java, JavaScript and C clients; the connector must read what they write
and write what they read, and the emulator must speak their AMQP as the service does."""

from __future__ import annotations

import base64
import json
import subprocess

import pytest

from eventhubs_emulator import Emulator
from eventhubs_spark.amqp.messages import RawEvents
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.codec.columns import events_to_batch
from eventhubs_spark.codec.layout import decode_spans, events_batch
from eventhubs_spark.interprocess.task_ranges import RangeResult, ReceiverConfig
from eventhubs_spark.process.runtime import current
from tests.conftest import ROOT
from tests.integration.sdk_helpers import receive

SCRIPTS = ROOT / "tests" / "integration" / "js"
RICH, ALIKE, KEYED = 5, 300, 1


def _javascript(script: str, connection_string: str, hub: str, partition: str, count: int) -> str:
    """Run one of the JavaScript SDK scripts against the hub; returns what it printed."""
    if not (ROOT / "node_modules" / "@azure" / "event-hubs" / "package.json").exists():
        raise RuntimeError(
            f"@azure/event-hubs is missing: run `npm install` in {ROOT} (the README's test command does)"
        )
    namespace_only = connection_string.split(";EntityPath=")[0]
    done = subprocess.run(
        ["node", str(SCRIPTS / script), namespace_only, hub, partition, str(count)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, f"the JavaScript SDK ({script}) failed: {done.stderr[-3000:]}"
    return done.stdout


def _normal(rows: list[dict]) -> list[dict]:
    for row in rows:  # map order is not part of the data
        row["properties"] = sorted(row["properties"])
        row["systemProperties"] = sorted(row["systemProperties"])
    return rows


def read_as_the_sdk_reads(conn: str, total: int, sender: str) -> list[dict]:
    """Partition 0's first ``total`` events, read by the Python SDK and by the connector (a receiver's range, then
    decoded as a task decodes a chunk, and column by column): the connector's rows must be the SDK's, with no event
    left to the SDK's decoder. Returns the SDK's rows (``_normal``)."""
    sdk_events = sorted(receive(conn, total, starting_position="-1"), key=lambda e: e.sequence_number)
    assert len(sdk_events) == total
    config = ReceiverConfig(consumer_group="$Default", prefetch=500, receiver_timeout=10.0, exclusive=False)
    receiver = current().pool.acquire(parse_connection_string(conn), config, "0", 0, retry=False)
    try:
        got = RawEvents()
        for chunk in receiver.read_range(0, total, True, RangeResult()):
            got.extend(chunk)
    finally:
        current().pool.release(receiver, False)
    assert list(got.seqs) == list(range(total))
    reference = _normal(events_to_batch(sdk_events, "0").to_pylist())
    task_batch, task_fallbacks = events_batch(got, "0")  # the way a task decodes a chunk
    columnwise, fallbacks = decode_spans(*got.spans(), "0", min_rows=0)
    assert _normal(task_batch.to_pylist()) == reference
    assert _normal(columnwise.to_pylist()) == reference
    assert task_fallbacks == fallbacks == 0, f"nothing {sender} sends needs the SDK's decoder"
    return reference


def test_events_from_the_javascript_sdk_read_as_the_python_sdk_reads_them():
    total = RICH + ALIKE + KEYED
    with Emulator({"js": 1}) as emulator:
        conn = emulator.connection_string("js")
        _javascript("send_events.mjs", conn, "js", "0", ALIKE)
        reference = read_as_the_sdk_reads(conn, total, "JavaScript")

    # The JavaScript SDK writes a body that is not bytes as its JSON, strings included (quoted)
    rows = {bytes(row["body"]): row for row in reference}
    assert b'"plain text"' in rows and bytes([0, 1, 2, 255]) in rows
    assert b'{"id":7,"name":"json","nested":[1,2.5,null]}' in rows
    props = dict(rows[b'"with properties"']["properties"])
    assert props["s"] == "x" and props["n"] == "42" and props["negative"] == "-3" and props["f"] == "1.5"
    assert props["big"] == str(2**40) and props["yes"] == "true" and props["no"] == "false"
    assert props["when"] == "1767323045678"  # an AMQP timestamp: milliseconds since 1970, as the Python SDK gives
    system = dict(rows[b'"with ids"']["systemProperties"])
    assert system.get("message-id") == "m-1" and system.get("correlation-id") == "c-1"
    assert rows[b'"keyed"']["partitionKey"] == "device-9"
    last = dict(rows[f'"event-{ALIKE - 1}"'.encode()]["properties"])
    assert (
        last["i"] == str(ALIKE - 1) and last["big"] == str(2**33 + ALIKE - 1) and last["tag"] == f"t{(ALIKE - 1) % 5}"
    )


@pytest.mark.spark
def test_what_the_sink_writes_the_javascript_sdk_reads_as_written(spark, eventhubs_emulator, eventhub):
    hub = f"{eventhub.name}-js"
    eventhubs_emulator.add_hub(hub, 1)  # one partition: explicit partitions and keys both land in it
    conn = eventhubs_emulator.connection_string(hub)
    df = spark.createDataFrame(
        [(b"\x00bytes\xff", "0", {"kind": "a", "n": "1"}), (b"text", "0", None), (b"{}", "0", {"empty": ""})],
        "body binary, partitionId string, properties map<string,string>",
    )
    df.write.format("eventhubs").option("eventhubs.connectionString", conn).mode("append").save()
    keyed = spark.createDataFrame([("keyed", "device-3")], "body string, partitionKey string")
    keyed.write.format("eventhubs").option("eventhubs.connectionString", conn).mode("append").save()
    events = [json.loads(line) for line in _javascript("receive_events.mjs", conn, hub, "0", 4).splitlines()]
    assert sorted(e["sequenceNumber"] for e in events) == [0, 1, 2, 3]
    by_body = {base64.b64decode(e["body"]["base64"]): e for e in events}  # the sink sends bytes, read as bytes
    assert set(by_body) == {b"\x00bytes\xff", b"text", b"{}", b"keyed"}
    assert by_body[b"\x00bytes\xff"]["properties"] == {"kind": "a", "n": "1"}
    assert by_body[b"text"]["properties"] == {} and by_body[b"{}"]["properties"] == {"empty": ""}
    assert by_body[b"keyed"]["partitionKey"] == "device-3" and by_body[b"text"]["partitionKey"] is None
