"""The real service's limits and faults, taught to the emulator, and the connector through each of them.

Throughput units (sends refused as busy past the ingress allowance, deliveries held to the egress one, as
the service documents them), forced detaches of sending and receiving links, and black holes (a
connection that stops answering without closing): the emulator does each as the service does, proven
with the official SDK, and the connector keeps every event exactly once through each.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

import pytest
from azure.eventhub import EventData, EventHubProducerClient

from eventhubs_emulator import Emulator
from eventhubs_emulator.metering import EGRESS_EVENTS
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.interprocess.task_ranges import RangeRequest, ReceiverConfig
from eventhubs_spark.process.runtime import Runtime
from tests.integration.sdk_helpers import Receiver, receive, send


class _HeldClock:
    """An allowance's clock that moves only when the test moves it."""

    now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def metered(eventhub):
    """The shared emulator scaled to one throughput unit for the test, unmetered again after."""
    eventhub.emulator.set_throughput_units(1)
    try:
        yield eventhub
    finally:
        eventhub.emulator.set_throughput_units(None)


def _batch(producer, partition: str, bodies: list[str]):
    batch = producer.create_batch(partition_id=partition)
    for body in bodies:
        batch.add(EventData(body))
    return batch


def test_past_its_throughput_units_the_namespace_refuses_sends_as_busy_and_paces_deliveries(metered):
    """Ingress: a send that finds the running total over 1,000 events/s is refused with
    com.microsoft:server-busy, as the SDK sees it; nothing of it is stored. Egress: nothing is refused, but
    the deliveries of 12,000 events wait for 4,096 events/s."""
    emulator, name = metered.emulator, metered.name
    # the allowance's clock held still while the four sends go: the rule is tested, not the machine's speed
    # (a slow send let the allowance refill, so a third send fit and the test failed on a loaded machine)
    emulator.set_throughput_units(1, clock=lambda: 0.0)
    producer = EventHubProducerClient.from_connection_string(metered.connection_string, retry_total=0)
    refused = []
    try:
        for i in range(4):  # 600 + 600 fit (the second borrows from the next second); the rest are refused
            try:
                producer.send_batch(_batch(producer, "0", [f"in-{i}-{j}" for j in range(600)]))
            except Exception as exc:
                refused.append(str(exc))
    finally:
        producer.close()
    assert len(refused) == 2 and all("com.microsoft:server-busy" in r and "50002" in r for r in refused), refused
    figures = emulator.throttling()
    assert figures["throttled_requests"] >= 2 and figures["throttled_events"] >= 1200, figures
    assert emulator.partition_properties(name, 0)["last_enqueued_sequence_number"] == 1199, "refused: not stored"

    emulator.set_throughput_units(None)
    for k in range(12):
        send(metered.connection_string, [f"out-{k}-{j}" for j in range(900)], partition_id="1")
    # Egress on a clock the test moves, a second at a time: the first second's allowance goes at once, then the
    # deliveries wait until the clock gives the next 4,096 (a real clock made it depend on the machine: a receiver
    # slower than 4,096 events/s on a loaded machine never met the allowance, and no delivery waited)
    clock = _HeldClock()
    emulator.set_throughput_units(1, clock=clock)
    prefetch = 300  # a delivery that crosses the allowance is taken whole: at most one prefetch over it
    with Receiver(metered.connection_string, partition_id="1", starting_position="-1", prefetch=prefetch) as r:
        for second in range(3):
            allowed = (second + 1) * EGRESS_EVENTS
            if allowed >= 10800:
                assert len(r.wait_for(10800)) == 10800
                break
            r.wait_for(allowed - prefetch)
            time.sleep(1.0)  # the clock stands still: nothing more may come
            got = len(r.wait_for(10800, timeout=0))
            assert allowed - prefetch <= got <= allowed + prefetch, f"{got} events delivered in {second + 1} s"
            clock.now += 1.0
    assert emulator.throttling()["egress_waits"] > 0


@pytest.mark.spark
def test_a_throttled_sink_backs_off_and_sends_every_row_once(spark, metered):
    """Spark writes 6,000 rows into a namespace of one throughput unit: many sends are refused as busy, each
    is sent again after the retry policy's wait, and every row arrives once."""
    rows = 6000
    df = spark.range(rows).repartition(4).selectExpr("concat('row-', cast(id as string)) as body")
    (df.write.format("eventhubs").option("eventhubs.connectionString", metered.connection_string)
     .option("eventhubs.retry.initialDelay", "100ms").option("eventhubs.retry.maxDelay", "1s")
     .mode("append").save())  # fmt: skip
    emulator = metered.emulator
    assert emulator.throttling()["throttled_requests"] > 0, "the write was throttled"
    emulator.set_throughput_units(None)
    bodies = []
    for p in range(metered.partitions):
        n = emulator.partition_properties(metered.name, p)["last_enqueued_sequence_number"] + 1
        bodies += [e.body_as_str() for e in receive(metered.connection_string, n, partition_id=str(p),
                                                    starting_position="-1")]  # fmt: skip
    assert len(bodies) == rows and set(bodies) == {f"row-{i}" for i in range(rows)}, "every row once"


def test_a_throttled_write_is_said_once_by_the_driver_with_the_sends_refused_and_the_wait(metered, caplog):
    """A writer task (run here, as an executor runs it) counts the sends refused as busy and the time it waited
    for them in its commit message; the driver's commit says it once for the batch, as a warning."""
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    from eventhubs_spark.sink import EventHubsBatchWriter

    options = {"eventhubs.connectionString": metered.connection_string, "eventhubs.retry.initialDelay": "100ms",
               "eventhubs.retry.maxDelay": "1s"}  # fmt: skip
    writer = EventHubsBatchWriter(options, StructType([StructField("body", StringType())]))
    chunks = [pa.RecordBatch.from_pydict({"body": [f"t{k}-{i}" for i in range(500)]}) for k in range(6)]
    report = writer.write(iter(chunks))
    assert sum(report.by_partition.values()) == 3000
    assert report.throttled > 0 and report.throttled_wait > 0, report
    with caplog.at_level(logging.INFO, logger="eventhubs_spark"):
        writer.commit([report])
    said = [r for r in caplog.records if "the namespace is throttling" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert f"refused {report.throttled} sends as busy" in said[0].getMessage()


def test_forced_detaches_of_every_link_lose_and_repeat_nothing(eventhub):
    """Every receiving link is detached with amqp:link:detach-forced, com.microsoft:timeout and
    com.microsoft:server-busy while ranges are read: each range is read exactly, from the next sequence
    number after the detach."""
    settings = parse_connection_string(eventhub.connection_string)
    for p in range(2):
        send(eventhub.connection_string, [f"d-{p}-{i}" for i in range(3000)], partition_id=str(p))
    runtime = Runtime(reap_every=0)
    config = ReceiverConfig(receiver_timeout=30, prefetch=50)
    stop = threading.Event()
    detached: list[int] = []

    def detach_all() -> None:
        conditions = ["amqp:link:detach-forced", "com.microsoft:timeout", "com.microsoft:server-busy"]
        i = 0
        while not stop.wait(0.05):
            detached.append(eventhub.emulator.detach_links(eventhub.name, condition=conditions[i % 3]))
            i += 1

    thread = threading.Thread(target=detach_all, daemon=True)
    thread.start()
    try:
        for p in range(2):
            for start in range(0, 3000, 500):
                stats: dict = {}
                request = RangeRequest(config, str(p), start, start + 500, True, settings=settings)
                seqs = [s for b in runtime.read(request, False, stats) for s in b.column("sequenceNumber").to_pylist()]
                assert seqs == list(range(start, start + 500)), (p, start)
    finally:
        stop.set()
        thread.join()
    assert sum(detached) > 0, "links were detached while reading"


def test_a_black_holed_connection_is_found_dead_by_its_idle_timeout_and_the_range_read_exactly(eventhub):
    """The connection stops answering without closing (no frames, no FIN): the receiver's connection idle
    timeout (eventhubs.connectionIdleTimeout) finds it dead, a new connection is opened, and the range is read
    from the next sequence number, long before eventhubs.receiverTimeout would have failed the task."""
    settings = parse_connection_string(eventhub.connection_string)
    settings = dataclasses.replace(settings, network=dataclasses.replace(settings.network, idle_timeout=3.0))
    send(eventhub.connection_string, [f"b{i}" for i in range(100)], partition_id="0")
    runtime = Runtime(reap_every=0)
    config = ReceiverConfig(receiver_timeout=60)

    def read(start: int, end: int, stats: dict) -> list[int]:
        request = RangeRequest(config, "0", start, end, True, settings=settings)
        return [s for b in runtime.read(request, False, stats) for s in b.column("sequenceNumber").to_pylist()]

    assert read(0, 100, {}) == list(range(100))
    assert eventhub.emulator.black_hole(None) >= 1
    send(eventhub.connection_string, [f"b{i}" for i in range(100, 200)], partition_id="0")  # a new connection
    stats: dict = {}
    started = time.monotonic()
    assert read(100, 200, stats) == list(range(100, 200))
    assert stats["reconnects"] >= 1 and time.monotonic() - started < 30


def _bounded(call, seconds: float):
    """``call()``'s result, run on a thread: a call still running after ``seconds`` fails the test instead of
    holding it (what a wait with no time-out of its own would do)."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting after {seconds} s: a wait with no time-out of its own"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_a_write_whose_connection_falls_into_a_black_hole_as_it_opens_is_made_on_a_new_one():
    """The sink's first connection is accepted and then never answered (not even the protocol header): the SDK's
    sign-in waits on a socket with no time-out there, so its opening is bounded by eventhubs.connectionIdleTimeout,
    and the write goes on over a new connection, every event once."""
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    from eventhubs_spark.sink import EventHubsBatchWriter

    emulator = Emulator({"opening": 1}).start()
    try:
        connection = emulator.connection_string("opening")
        options = {"eventhubs.connectionString": connection, "eventhubs.connectionIdleTimeout": "2s"}
        writer = EventHubsBatchWriter(options, StructType([StructField("body", StringType())]))
        emulator.black_hole_openings(1)
        rows = pa.RecordBatch.from_pydict({"body": [f"e{i}" for i in range(10)]})
        report = _bounded(lambda: writer.write(iter([rows])), 60)
        assert report.by_partition == {"0": 10} and report.resent == 0, report
        assert emulator.stats()["black_holes"] == 1
        bodies = [e.body_as_str() for e in receive(connection, 10, partition_id="0", starting_position="-1")]
        assert bodies == [f"e{i}" for i in range(10)]
        assert emulator.partition_properties("opening", 0)["last_enqueued_sequence_number"] == 9
    finally:
        emulator.stop()


def _read_after(hole, connection: str, count: int, seconds: float) -> list[int]:
    """The sequence numbers of partition 0's first ``count`` events, read by a fresh runtime's receivers (idle
    time-out 2 s) once ``hole(1)`` has set the next connection to fall into a black hole; bounded by ``seconds``."""
    settings = parse_connection_string(connection)
    settings = dataclasses.replace(settings, network=dataclasses.replace(settings.network, idle_timeout=2.0))
    runtime = Runtime(reap_every=0)
    request = RangeRequest(ReceiverConfig(receiver_timeout=60), "0", 0, count, True, settings=settings)
    hole(1)

    def read() -> list[int]:
        return [s for b in runtime.read(request, False, {}) for s in b.column("sequenceNumber").to_pylist()]

    return _bounded(read, seconds)


def test_a_range_read_whose_connection_falls_into_a_black_hole_as_it_opens_is_read_on_a_new_one():
    """The receivers' first connection is accepted and never answered: its opening gives up after the connection
    idle time-out, and the range is read exactly over a new connection."""
    emulator = Emulator({"opening": 1}).start()
    try:
        connection = emulator.connection_string("opening")
        send(connection, [f"b{i}" for i in range(50)], partition_id="0")
        assert _read_after(emulator.black_hole_openings, connection, 50, 60) == list(range(50))
        assert emulator.stats()["black_holes"] == 1
    finally:
        emulator.stop()


def test_a_write_and_a_range_read_whose_sign_in_falls_into_a_black_hole_go_on_over_a_new_connection():
    """The connection opens and is answered, then its sign-in (the CBS put-token) and everything after it are not:
    the SDK would wait its auth_timeout, 60 s; each client's sign-in waits eventhubs.connectionIdleTimeout, and
    the write, then a range read, go on over new connections, every event once."""
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    from eventhubs_spark.sink import EventHubsBatchWriter

    emulator = Emulator({"signin": 1}).start()
    try:
        connection = emulator.connection_string("signin")
        options = {"eventhubs.connectionString": connection, "eventhubs.connectionIdleTimeout": "2s"}
        # to a partition named: the producer's connection is the first to sign in (not the management client's)
        schema = StructType([StructField("body", StringType()), StructField("partitionId", StringType())])
        writer = EventHubsBatchWriter(options, schema)
        emulator.black_hole_sign_ins(1)
        rows = pa.RecordBatch.from_pydict({"body": [f"e{i}" for i in range(10)], "partitionId": ["0"] * 10})
        report = _bounded(lambda: writer.write(iter([rows])), 30)
        assert report.by_partition == {"0": 10} and report.resent == 0, report
        assert emulator.stats()["black_holes"] == 1

        assert _read_after(emulator.black_hole_sign_ins, connection, 10, 30) == list(range(10))
        assert emulator.stats()["black_holes"] == 2
    finally:
        emulator.stop()


def test_a_black_hole_that_heals_delivers_what_it_held():
    """A black hole for a set time: the connection's frames wait, then go through in order (a network that
    heals); a producer's connection made after it is served at once."""
    emulator = Emulator({"held": 1}).start()
    try:
        connection = emulator.connection_string("held")
        producer = EventHubProducerClient.from_connection_string(connection)
        producer.send_batch(_batch(producer, "0", ["before"]))
        started = time.monotonic()
        assert emulator.black_hole(3.0) >= 1  # the producer's connection(s)
        send(connection, ["during"], partition_id="0")  # a new connection: served
        producer.send_batch(_batch(producer, "0", ["held"]))  # waits for the hole to heal, then is stored
        assert time.monotonic() - started >= 2.5
        producer.close()
        assert [e.body_as_str() for e in receive(connection, 3, partition_id="0", starting_position="-1")] == [
            "before", "during", "held"]  # fmt: skip
        assert emulator.stats()["black_holes"] >= 1
    finally:
        emulator.stop()


def test_a_send_that_goes_unanswered_is_sent_again_and_the_possible_repeat_is_counted_and_said(caplog):
    """A writer task's connection falls into a black hole that heals later: its send goes unanswered for
    eventhubs.connectionIdleTimeout, so it is sent again over a new connection; when the hole heals the first
    send is stored too (the client had closed, the network delivered it). The task counts the events sent again
    and the driver's commit says the hub may hold them twice: at least once, told, never silent."""
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    from eventhubs_spark.sink import EventHubsBatchWriter

    emulator = Emulator({"doubt": 1}).start()
    try:
        connection = emulator.connection_string("doubt")
        options = {"eventhubs.connectionString": connection, "eventhubs.connectionIdleTimeout": "2s"}
        writer = EventHubsBatchWriter(options, StructType([StructField("body", StringType())]))
        assert writer.write(iter([pa.RecordBatch.from_pydict({"body": ["warm"]})])).resent == 0
        assert emulator.black_hole(4.0) >= 1  # the pooled producer's connection
        report = writer.write(iter([pa.RecordBatch.from_pydict({"body": [f"e{i}" for i in range(10)]})]))
        assert report.by_partition == {"0": 10} and report.resent == 10, report
        with caplog.at_level(logging.INFO, logger="eventhubs_spark"):
            writer.commit([report])
        said = [r.getMessage() for r in caplog.records if "sent again after a send of theirs" in r.getMessage()]
        assert len(said) == 1 and "10 events" in said[0] and "at least once" in said[0], said

        def twice() -> bool:
            return emulator.partition_properties("doubt", 0)["last_enqueued_sequence_number"] + 1 == 21

        from tests.integration.sdk_helpers import wait_until

        wait_until(twice, timeout=30, message="the held send stored when the hole heals")
        bodies = [e.body_as_str() for e in receive(connection, 21, partition_id="0", starting_position="-1")]
        assert bodies == ["warm"] + [f"e{i}" for i in range(10)] * 2
        sends = emulator.stored_sends("doubt")
        assert [(s["first"], s["count"]) for s in sends] == [(0, 1), (1, 10), (11, 10)]
        assert sends[2]["client_let_go"] and not sends[1]["client_let_go"], "the held send: its client let it go"
        assert sends[2]["connection"] != sends[1]["connection"]
    finally:
        emulator.stop()


@pytest.mark.spark
@pytest.mark.slow
def test_a_hub_to_hub_stream_through_forced_detaches_and_a_black_hole_loses_and_repeats_nothing(spark, tmp_path):
    """A stream reads one hub and writes another while every link of events is detached every second, and
    once, mid-stream, every open connection (the receivers' and the sink's) falls into a black hole for good:
    each finds its connection dead by eventhubs.connectionIdleTimeout and opens another; every event reaches
    the target hub, once unless a send of it went unanswered (at least once: the sink sends it again)."""
    import collections

    from tests.integration.sdk_helpers import wait_until

    with Emulator({"source": 2, "target": 2}, detach_every=1.0) as emu:
        source, target = emu.connection_string("source"), emu.connection_string("target")
        query = (
            spark.readStream.format("eventhubs")
            .option("eventhubs.connectionString", source)
            .option("eventhubs.startingPosition", '{"offset": "-1"}')
            .option("eventhubs.connectionIdleTimeout", "3s")
            .option("maxEventsPerTrigger", "200")
            .load()
            .selectExpr("body", "partition as partitionId")
            .writeStream.format("eventhubs")
            .option("eventhubs.connectionString", target)
            .option("eventhubs.connectionIdleTimeout", "3s")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="1 second")
            .start()
        )
        expected: list[str] = []
        try:
            for round_ in range(3):
                for p in range(2):
                    batch = [f"r{round_}-p{p}-{i}" for i in range(300)]
                    _send_through_detaches(emu, "source", source, batch, str(p))
                    expected += batch

                def arrived(count: int = len(expected)) -> bool:
                    props = [emu.partition_properties("target", p) for p in range(2)]
                    return sum(x["last_enqueued_sequence_number"] + 1 for x in props) >= count

                wait_until(arrived, timeout=120, message=f"round {round_} in the target hub")
                if round_ == 0:
                    assert emu.black_hole(None) >= 1, "the stream's connections fall into a black hole"
            assert query.exception() is None, query.exception()
        finally:
            query.stop()
        stats = emu.stats()
        assert stats["forced_detaches"] > 0 and stats["black_holes"] > 0, stats

        def everything(hub: str, connection: str) -> dict[str, list[tuple[str, int]]]:
            """Each body in ``hub``: where its copies are (partition, sequence number). The links are still detached
            every second while this reads, and the SDK's consumer can hand an event out again after it reattaches:
            one stored event received twice is one copy (its sequence number says so), not two."""
            got: dict[str, list[tuple[str, int]]] = collections.defaultdict(list)
            for p in range(2):
                n = emu.partition_properties(hub, p)["last_enqueued_sequence_number"] + 1
                with Receiver(connection, starting_position="-1", partition_id=str(p)) as receiver:
                    deadline = time.monotonic() + 60
                    events = receiver.wait_for(n)
                    while len({e.sequence_number for e in events}) < n and time.monotonic() < deadline:
                        events = receiver.wait_for(len(events) + 1, timeout=1.0)
                for e in events:
                    where = (str(p), e.sequence_number)
                    if where not in got[e.body_as_str()]:
                        got[e.body_as_str()].append(where)
            return got

        stored, copies = everything("source", source), everything("target", target)
        assert sorted(stored) == sorted(expected) and all(len(v) == 1 for v in stored.values()), (
            "the test's own events each once in the source"
        )
        lost = sorted(body for body in stored if body not in copies)
        assert not lost and len(copies) == len(stored), f"every event of the source in the target: {len(lost)} lost"
        # A repeat is allowed only where at least once allows it: the sink sent a batch again after a send of it
        # went unanswered (timed out under the machine's load, and stored all the same), so the client let go of
        # that copy's link right after it (Emulator.stored_sends). A detach or a black hole alone repeats nothing.
        sends = sorted(emu.stored_sends("target"), key=lambda s: (s["partition"], s["first"]))

        def let_go(partition: str, sequence: int) -> bool:
            for s in sends:
                if s["partition"] == partition and s["first"] <= sequence < s["first"] + s["count"]:
                    return bool(s["client_let_go"])
            raise AssertionError(f"no stored send holds partition {partition} sequence number {sequence}")

        unexplained = {
            body: where for body, where in copies.items()
            if len(where) > 1 and sum(let_go(*copy) for copy in where) < len(where) - 1
        }  # fmt: skip
        assert not unexplained, f"events repeated with no unanswered send before: {sorted(unexplained.items())[:5]}"
        repeated = sum(len(where) - 1 for where in copies.values())
        print(f"repeats after unanswered sends: {repeated} events")  # at least once, told by the sink's driver log


def _send_through_detaches(emu: Emulator, hub: str, connection: str, bodies: list[str], partition: str) -> None:
    """The test's own producing, once: the bodies go in one batch (stored whole or not at all), and after a failed
    send the partition says whether it was stored (a send that timed out under the machine's load may have been)
    before it is sent again, so the source holds each body once."""

    def stored() -> int:
        return int(emu.partition_properties(hub, int(partition))["last_enqueued_sequence_number"]) + 1

    before = stored()
    for attempt in range(20):
        try:
            # The SDK's own retries would send again without asking: none here, this loop asks first.
            with EventHubProducerClient.from_connection_string(connection, retry_total=0) as producer:
                batch = producer.create_batch(partition_id=partition)
                for body in bodies:
                    batch.add(EventData(body))
                producer.send_batch(batch)
            return
        except Exception:
            if attempt == 19:
                raise
            time.sleep(0.1)
            if stored() >= before + len(bodies):
                return


@pytest.mark.geo_replicated
@pytest.mark.partitions(1)
def test_a_geo_replicated_hub_names_events_by_segment_and_a_promotion_goes_on_from_the_last_event_kept(eventhub):
    """Opaque offsets, each event's replication segment, the capability offered back, partition properties
    with segments, sequence-number filters with a segment, and a forced promotion, proven with the SDK."""
    from eventhubs_spark.positions import geo_segments

    emulator = eventhub.emulator
    send(eventhub.connection_string, [f"a{i}" for i in range(10)], partition_id="0")
    with Receiver(eventhub.connection_string, partition_id="0", starting_position="-1") as reader:
        first = reader.wait_for(10)
        mine = [link for key, links in emulator._server().receivers.items() if key[0] == eventhub.name
                for link in links]  # fmt: skip
        assert mine and all(link.georeplication for link in mine), "the capability, offered back"
    assert [e.sequence_number for e in first] == list(range(10))
    assert all(e.offset.startswith("1:") for e in first), [e.offset for e in first]
    assert {e.system_properties[b"x-opt-sequence-number-epoch"] for e in first} == {1}
    assert emulator.promote(eventhub.name, lose=3) == {"0": 3}  # a7..a9 were not replicated: gone
    send(eventhub.connection_string, [f"b{i}" for i in range(5)], partition_id="0")
    props = emulator.partition_properties(eventhub.name, 0)
    assert (props["begin_replication_segment"], props["last_enqueued_replication_segment"]) == (1, 2)
    assert props["last_enqueued_sequence_number"] == 11 and props["last_enqueued_offset"].startswith("2:")

    def bodies(position, inclusive=True):
        got = receive(eventhub.connection_string, 20, timeout=3, partition_id="0", starting_position=position,
                      starting_position_inclusive=inclusive)  # fmt: skip
        return [e.body_as_str() for e in got]

    assert bodies(geo_segments.sdk_position(geo_segments.pack(1, 5))) == ["a5", "a6", "b0", "b1", "b2", "b3", "b4"]
    # a position the promotion lost: the new segment's first event (sequence number 7 again)
    assert bodies(geo_segments.sdk_position(geo_segments.pack(1, 8))) == ["b0", "b1", "b2", "b3", "b4"]
    assert bodies(geo_segments.sdk_position(geo_segments.pack(2, 9)), inclusive=False) == ["b3", "b4"]
    assert bodies(9) == ["b2", "b3", "b4"]  # no segment: the current one
    offset = first[3].offset  # "1:..." offsets work as filters, exclusive or not
    assert bodies(offset, inclusive=False) == ["a4", "a5", "a6", "b0", "b1", "b2", "b3", "b4"]


def test_a_hub_that_is_not_geo_replicated_stamps_segment_minus_one_and_plain_offsets(eventhub):
    send(eventhub.connection_string, ["x"], partition_id="1")
    (event,) = receive(eventhub.connection_string, 1, partition_id="1", starting_position="-1")
    assert event.system_properties[b"x-opt-sequence-number-epoch"] == -1 and event.offset.isdigit()
    with pytest.raises(ValueError, match="not geo-replicated"):
        eventhub.emulator.promote(eventhub.name)


def test_a_promotion_schedule_begins_new_segments_and_loses_the_unreplicated_tail():
    with Emulator({"g": 1}, geo_replicated=True, promote_every=0.5, promote_lose=1) as emu:
        with EventHubProducerClient.from_connection_string(emu.connection_string("g")) as producer:
            producer.send_batch([EventData(f"e{i}") for i in range(5)], partition_id="0")

        def segment() -> int:  # the segment a new event would get
            return emu._call(lambda: emu._partition("g", 0).segment)

        after_send = segment()
        deadline = time.monotonic() + 10
        while segment() < after_send + 2:
            assert time.monotonic() < deadline, "no promotions on schedule"
            time.sleep(0.05)
        props = emu.partition_properties("g", 0)
        assert props["last_enqueued_sequence_number"] <= 2  # two promotions since: each lost the last event left
