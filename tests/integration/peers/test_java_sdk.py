"""The Java Event Hubs SDK 5.x beside the connector (issue 47), against the emulator and Azurite: what a Java
producer sends, the connector reads as the Python SDK reads it; what the connector's sink writes, a Java consumer
reads as written; and a query in ownership mode shares a consumer group with a Java ``EventProcessorClient``
through the blob checkpoint store both write, splitting the partitions both ways and taking them all when the
other stops, every event read once.

The Java SDK names the namespace by the endpoint's host without its port; the connector and the Python SDK keep
``host:port``. On Azure both are ``<ns>.servicebus.windows.net``; here the endpoint names no port on either side
(both then take AMQP's 5672), so the emulator for these tests listens at 5672 on a loopback address of its own."""

from __future__ import annotations

import base64
import collections
import json
import subprocess
import time
import types
from pathlib import Path

import pytest

from eventhubs_emulator import Emulator
from eventhubs_spark.amqp import sdk
from eventhubs_spark.auth.settings import parse_connection_string
from tests import jvm_peers
from tests.integration.peers.test_other_producers import read_as_the_sdk_reads
from tests.integration.sdk_helpers import send, wait_until

# The tests that take the spark fixture are not marked spark: the compatibility runs (-m spark) leave them to the
# newest Spark, where ./dev test runs them in whichever of its processes they are dealt to
pytestmark = [pytest.mark.slow]


HOST = jvm_peers.loopback_address(5672)  # ./dev test's processes may run such emulators at once
ALIKE = 300


@pytest.fixture(scope="module")
def java() -> None:
    lacking = jvm_peers.missing()
    if lacking:
        pytest.skip(f"the Java SDK peer {lacking}")
    jvm_peers.classpath("sdk")


@pytest.fixture(scope="module")
def portless():
    """An emulator at HOST:5672 whose connection strings name no port, as a real namespace's."""
    with Emulator({"fromjava": 1, "tojava": 1, "shared": 4}, host=HOST, port=5672) as emulator:
        yield emulator


def _conn(emulator: Emulator, hub: str | None = None) -> str:
    conn = emulator.connection_string(hub).replace(f"{HOST}:5672", HOST)
    assert f"sb://{HOST};" in conn, conn
    return conn


def _namespace(conn: str) -> str:
    return conn.split(";EntityPath=")[0]


def test_events_from_the_java_sdk_read_as_the_python_sdk_reads_them(java, portless):
    conn = _conn(portless, "fromjava")
    jvm_peers.run_peer("send", _namespace(conn), "fromjava", "0", str(ALIKE))
    total = 3 + ALIKE + 1
    # the SDK's decoder has no entry for the AMQP char a Java Character is sent as (its receive stopped at that
    # event): the connector fills that gap (amqp.sdk.fill_decoder_gaps), and the SDK is the reference after it
    sdk.fill_decoder_gaps()
    # the Java SDK's namespace too: the checkpoint store's paths agree
    assert parse_connection_string(conn).namespace == HOST
    reference = read_as_the_sdk_reads(conn, total, "the Java SDK")

    rows = {bytes(row["body"]): row for row in reference}
    props = dict(rows[b"with properties"]["properties"])
    assert props["s"] == "x" and props["i"] == "42" and props["negative"] == "-3" and props["l"] == str(2**40)
    assert props["short"] == "7" and props["byte"] == "-2" and props["d"] == "1.5" and props["f"] == "0.25"
    assert props["yes"] == "true" and props["no"] == "false" and props["c"] == "z"
    assert props["uuid"] == "12345678-1234-5678-1234-567812345678"
    assert props["when"] == "1767323045678"  # java.util.Date: an AMQP timestamp, milliseconds since 1970
    system = dict(rows[bytes([0, 1, 2, 255])]["systemProperties"])
    assert system.get("message-id") == "m-1" and system.get("correlation-id") == "c-1"
    assert system.get("content-type") == "application/octet-stream"
    assert rows[b"keyed"]["partitionKey"] == "device-9"
    last = dict(rows[f"event-{ALIKE - 1}".encode()]["properties"])
    assert last == {"i": str(ALIKE - 1), "big": str(2**33 + ALIKE - 1), "tag": f"t{(ALIKE - 1) % 5}"}


def test_what_the_sink_writes_the_java_sdk_reads_as_written(spark, java, portless):
    conn = _conn(portless, "tojava")
    df = spark.createDataFrame(
        [(b"\x00bytes\xff", "0", {"kind": "a", "n": "1"}), (b"text", "0", None), (b"{}", "0", {"empty": ""})],
        "body binary, partitionId string, properties map<string,string>",
    )
    df.write.format("eventhubs").option("eventhubs.connectionString", conn).mode("append").save()
    keyed = spark.createDataFrame([("keyed", "device-3")], "body string, partitionKey string")
    keyed.write.format("eventhubs").option("eventhubs.connectionString", conn).mode("append").save()
    printed = jvm_peers.run_peer("receive", _namespace(conn), "tojava", "0", "4")
    events = [json.loads(line) for line in printed.splitlines() if line.startswith("{")]
    assert sorted(e["sequenceNumber"] for e in events) == [0, 1, 2, 3]
    by_body = {base64.b64decode(e["body"]): e for e in events}
    assert set(by_body) == {b"\x00bytes\xff", b"text", b"{}", b"keyed"}
    assert by_body[b"\x00bytes\xff"]["properties"] == {"kind": "a", "n": "1"}
    assert by_body[b"text"]["properties"] == {} and by_body[b"{}"]["properties"] == {"empty": ""}
    assert by_body[b"keyed"]["partitionKey"] == "device-3" and by_body[b"text"]["partitionKey"] is None


class JavaProcessor:
    """Peer.java's EventProcessorClient in a process of its own, until :meth:`stop`."""

    def __init__(self, conn: str, hub: str, storage: str, container: str, partitions: int, out: Path) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            jvm_peers.peer("process", _namespace(conn), hub, storage, container, str(partitions), str(out)),
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=jvm_peers.ROOT,
        )  # fmt: skip
        wait_until(lambda: self.identifier() is not None, timeout=60, message="the Java processor started")

    def lines(self) -> list[str]:
        return self.out.read_text().splitlines() if self.out.exists() else []

    def identifier(self) -> str | None:
        started = [line.split()[1] for line in self.lines() if line.startswith("started ")]
        return started[0] if started else None

    def events(self) -> list[str]:
        return [line.split(" ", 3)[3] for line in self.lines() if line.startswith("event ")]

    def closed(self) -> int:
        return sum(1 for line in self.lines() if line.startswith("close "))

    def claimed(self) -> set[str]:
        return {line.split()[1] for line in self.lines() if line.startswith("claim ")}

    def errors(self) -> list[str]:
        return [line for line in self.lines() if line.startswith("error ")]

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise


@pytest.mark.azurite
def _checkpointed(store, sent: list[str], partitions: set[str]) -> bool:
    """Whether the store's checkpoint of each of these partitions names its last event sent (bodies end
    ``-<partition>-<n>``; a hub's sequence numbers start at 0 here)."""
    counts = collections.Counter(b.split("-")[-2] for b in sent)
    at = {c.partition_id: c.sequence_number for c in store.list_checkpoints(HOST, "shared", "$Default")}
    return all(at.get(p) == counts[p] - 1 for p in partitions)


def test_an_ownership_mode_query_and_a_java_event_processor_share_a_consumer_group(
    spark, java, portless, azurite, tmp_path
):
    """Java's processor never writes the connector's ``releasedby`` marker: a partition the query takes from it
    is read once the ownership expiration has passed since the steal, from Java's checkpoint, and Java reads on
    until the query's owner-level receiver takes the link (as between any two Event Hubs processors: at least
    once across that hand-over). Events sent once a hand-over is over are read once, by their owner."""
    from azure.storage.blob import BlobServiceClient

    from eventhubs_spark.checkpoints.balancer import active_ownerships
    from eventhubs_spark.checkpoints.blob import BlobCheckpointStore
    from tests.integration.sdk_helpers import LiveProducer
    from tests.integration.spark.test_reader_spark import output, stream

    conn = _conn(portless, "shared")
    hub = types.SimpleNamespace(connection_string=conn, name="shared")
    container = "javainterop"
    with BlobServiceClient.from_connection_string(azurite.connection_string) as service:
        service.create_container(container)  # the Java store expects it; so do users, who make it once
    store = BlobCheckpointStore.from_connection_string(azurite.connection_string, container)

    def owners() -> dict[str, int]:
        listed = store.list_ownership(HOST, "shared", "$Default")
        return dict(collections.Counter(o.owner_id for o in active_ownerships(listed, time.time(), 10.0).values()))

    def owned_by(owner: str) -> set[str]:
        listed = store.list_ownership(HOST, "shared", "$Default")
        return {p for p, o in active_ownerships(listed, time.time(), 10.0).items() if o.owner_id == owner}

    expected: list[str] = []

    def produce(tag: str, count: int) -> list[str]:
        sent = []
        for p in range(4):
            bodies = [f"{tag}-{p}-{i}" for i in range(count)]
            send(conn, bodies, partition_id=str(p))
            sent += bodies
        expected.extend(sent)
        return sent

    def hand_over(seed: int, done) -> None:
        """Events keep coming while partitions change hands (the new owner reads, and takes the link)."""
        producer = LiveProducer(conn, 4, seed=seed)
        producer.start()
        try:
            wait_until(done, timeout=120, message="the hand-over")
        finally:
            expected.extend(producer.stop())

    options = {
        "eventhubs__checkpointStore__connectionString": azurite.connection_string,
        "eventhubs__checkpointStore__container": container,
        "eventhubs__ownership": "true",
        "eventhubs__loadBalancing__updateInterval": "1s",
        "eventhubs__loadBalancing__ownershipExpiration": "10s",  # as the Java processor's (Peer.java)
        "eventhubs__startingPosition": '{"offset": "-1"}',
    }
    trigger = {"processingTime": "500 milliseconds"}
    first = JavaProcessor(conn, "shared", azurite.connection_string, container, 4, tmp_path / "java1.log")
    second: JavaProcessor | None = None
    query = None

    def ours() -> list[str]:
        return output(spark, tmp_path / "a")

    def read_all() -> list[str]:
        return first.events() + (second.events() if second else []) + ours()

    def once_by(sent: list[str], reader, partitions: set[str]) -> None:
        mine = [b for b in sent if b.split("-")[-2] in partitions]
        got = collections.Counter(reader())
        assert all(got[b] == 1 for b in mine), "each event once, by its partition's owner"

    try:
        produce("first", 25)
        wait_until(lambda: owners() == {first.identifier(): 4}, timeout=60, message="Java owns every partition")
        wait_until(lambda: set(expected) <= set(first.events()), timeout=60, message="Java read the backlog")
        # the query joins: balanced, it takes two partitions from Java
        query = stream(spark, hub, tmp_path / "a", trigger, eventhubs__ownerId="query-a", **options)
        wait_until(lambda: owners() == {first.identifier(): 2, "query-a": 2}, timeout=120, message="a 2/2 split")
        hand_over(
            1, lambda: first.closed() >= 2 and len({b.split("-")[1] for b in ours() if b.startswith("live-")}) == 2
        )
        mid = produce("mid", 10)
        wait_until(lambda: set(expected) <= set(read_all()), timeout=120, message="every event, split")
        once_by(mid, ours, owned_by("query-a"))
        once_by(mid, first.events, owned_by(first.identifier()))
        # Java stops and gives its partitions up: the query takes all four from Java's checkpoints at once
        first.stop()
        wait_until(lambda: owners() == {"query-a": 4}, timeout=60, message="the query owns every partition")
        after = produce("after-java", 5)
        wait_until(lambda: set(after) <= set(ours()), timeout=120, message="every event, the query alone")
        once_by(after, read_all, {"0", "1", "2", "3"})

        # the other way: a Java processor joins the query's group and takes two partitions from it; the query
        # hands them over exactly (it writes its checkpoint with the releasedby marker Java does not need)
        second = JavaProcessor(conn, "shared", azurite.connection_string, container, 4, tmp_path / "java2.log")
        wait_until(lambda: owners() == {second.identifier(): 2, "query-a": 2}, timeout=120, message="2/2 again")
        hand_over(2, lambda: len({b.split("-")[1] for b in second.events() if b.startswith("live-")}) == 2)
        late = produce("late", 5)
        wait_until(lambda: set(expected) <= set(read_all()), timeout=120, message="every event, split again")
        once_by(late, ours, owned_by("query-a"))
        once_by(late, second.events, owned_by(second.identifier()))
        # the query stops (Spark never tells a source): Java takes its partitions after the ownership expires, from
        # the query's checkpoints in the store. Those follow the query's progress by a trigger (each trigger writes
        # where the batch before it ended): stopped sooner, the query hands over at least once, as any processor
        # that stops without a last checkpoint does; here it stops once the store has what it read.
        wait_until(lambda: _checkpointed(store, expected, owned_by("query-a")), timeout=60,
                   message="the query's checkpoints reach what it read")  # fmt: skip
        query.stop()
        query = None
        wait_until(lambda: owners() == {second.identifier(): 4}, timeout=90, message="Java owns every partition")
        last = produce("last", 5)
        wait_until(lambda: set(expected) <= set(read_all()), timeout=120, message="every event, Java alone")
        once_by(last, read_all, {"0", "1", "2", "3"})
        # what Java reports is its link taken by the new owner's receiver (how a hand-over ends for it) and its
        # own shutdown; nothing else
        expected_errors = ("with higher epoch", "Scheduler unavailable")
        unexpected = [e for e in first.errors() + second.errors() if not any(x in e for x in expected_errors)]
        assert unexpected == [], unexpected
        counts = collections.Counter(read_all())
        assert set(counts) == set(expected), "every event read, none lost"
        twice = sorted(b for b, n in counts.items() if n > 1)
        assert all(b.startswith("live-") for b in twice), f"only while partitions changed hands: {twice[:10]}"
    finally:
        for processor in (first, second):
            if processor is not None:
                processor.stop()
        if query is not None:
            query.stop()
