"""The receive engine against the emulator with the real SDK underneath: one connection for every
partition, read-ahead within its bounds, and reads that survive dropped connections and forced
detaches with every event read once."""

from __future__ import annotations

import threading
import time

import pytest

from eventhubs_spark.amqp import receive_connections
from eventhubs_spark.amqp.receive_connections import Connections
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.executor.partition_receiver import PartitionReceiver
from eventhubs_spark.interprocess.task_ranges import RangeResult, ReceiverConfig
from eventhubs_spark.process.runtime import current
from tests.integration.sdk_helpers import send, wait_until


def read(receiver: PartitionReceiver, start: int, end: int) -> list[int]:
    return [seq for chunk in receiver.read_range(start, end, True, RangeResult()) for seq in chunk.seqs]


def test_every_partition_reads_over_one_connection(eventhub):
    for p in range(4):
        send(eventhub.connection_string, [f"{p}-{i}" for i in range(50)], partition_id=str(p))
    settings = parse_connection_string(eventhub.connection_string)
    receivers = [
        PartitionReceiver(settings, ReceiverConfig("$Default", 20, 10.0, True), str(p), current().connections)
        for p in range(4)
    ]
    try:
        results: dict[int, list[int]] = {}
        threads = [
            threading.Thread(target=lambda i=i: results.__setitem__(i, read(receivers[i], 0, 50))) for i in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert all(results[i] == list(range(50)) for i in range(4))
        assert eventhub.emulator.consumer_connections(eventhub.name) == 1, "one AMQP connection for four partitions"
        assert sum(eventhub.emulator.consumer_attaches(eventhub.name).values()) == 4
    finally:
        for r in receivers:
            r.close()


def test_an_idle_receiver_reads_ahead_within_its_bounds_and_hands_that_to_the_next_range(eventhub):
    send(eventhub.connection_string, [f"e{i}" for i in range(2000)], partition_id="1")
    settings = parse_connection_string(eventhub.connection_string)
    config = ReceiverConfig("$Default", 50, 10.0, True, read_ahead_events=300)
    receiver = PartitionReceiver(settings, config, "1", current().connections)
    try:
        assert read(receiver, 0, 100) == list(range(100))
        sink = receiver._link.sink  # type: ignore[union-attr]
        wait_until(lambda: sink.buffered()[0] >= 300, timeout=10, message="reading ahead while idle")
        time.sleep(0.5)
        held = sink.buffered()[0]
        assert 300 <= held <= 300 + 50, f"bounded by readAhead.maxEvents plus one credit window: {held}"
        attaches = sum(eventhub.emulator.consumer_attaches(eventhub.name).values())
        started = time.monotonic()
        assert read(receiver, 100, 350) == list(range(100, 350))
        assert time.monotonic() - started < 1.0
        assert sum(eventhub.emulator.consumer_attaches(eventhub.name).values()) == attaches, "no new link"
    finally:
        receiver.close()


def test_a_reader_that_makes_room_in_a_full_sink_gets_its_link_read_on_without_waiting(eventhub, monkeypatch):
    """With read-ahead full the connection's reader holds the link's credit back and waits on the socket;
    the task that takes the events must wake it, or the link sits dry for the whole wait (0.2 s each time
    read-ahead fills: stalls that halved a backlog's throughput). The wait is made 60 s here: a range
    several read-aheads long can only finish in time if every refill wakes the reader."""

    monkeypatch.setattr(receive_connections, "_READ_WAIT", 60.0)
    send(eventhub.connection_string, [f"e{i}" for i in range(1000)], partition_id="0")
    settings = parse_connection_string(eventhub.connection_string)
    config = ReceiverConfig("$Default", 50, 20.0, True, read_ahead_events=100)
    connections = Connections()  # a connection of its own, started with the long wait
    receiver = PartitionReceiver(settings, config, "0", connections)
    try:
        started, seqs = time.monotonic(), []
        for chunk in receiver.read_range(0, 1000, True, RangeResult()):
            seqs.extend(chunk.seqs)
            time.sleep(0.05)  # a task slower than the link: read-ahead fills while it works
        assert seqs == list(range(1000))
        assert time.monotonic() - started < 15.0, "every refill of the read-ahead woke the reader"
    finally:
        receiver.close()  # its connection, left without links, closes itself


def test_a_read_survives_dropped_connections_and_forced_detaches_reading_every_event_once(eventhub):
    emulator = eventhub.emulator
    send(eventhub.connection_string, [f"e{i}" for i in range(3000)], partition_id="2")
    settings = parse_connection_string(eventhub.connection_string)
    receiver = PartitionReceiver(
        settings, ReceiverConfig("$Default", 100, 20.0, True, read_ahead_events=200), "2", current().connections
    )
    emulator.slow(eventhub.name, 2, 0.002)
    stop = threading.Event()

    def faults() -> None:
        turn = 0
        while not stop.wait(0.3):
            if turn % 2:
                emulator.drop_connections()
            else:
                emulator.detach_receivers(eventhub.name, "2")
            turn += 1

    injector = threading.Thread(target=faults, daemon=True)
    injector.start()
    try:
        got = read(receiver, 0, 3000)
    finally:
        stop.set()
        injector.join(5)
        emulator.slow(eventhub.name, 2, 0)
        receiver.close()
    assert got == list(range(3000)), "in order, nothing lost, nothing twice"
    assert receiver.reconnects >= 2


def test_connections_the_process_no_longer_uses_close(eventhub, monkeypatch):

    monkeypatch.setattr(receive_connections, "_IDLE_CLOSE", 0.5)
    send(eventhub.connection_string, ["a"], partition_id="3")
    settings = parse_connection_string(eventhub.connection_string)
    receiver = PartitionReceiver(settings, ReceiverConfig("$Default", 10, 10.0, False), "3", current().connections)
    assert read(receiver, 0, 1) == [0]
    connection = receiver._connection
    receiver.close()
    wait_until(lambda: connection.closed, timeout=10, message="the idle connection retired")  # type: ignore[union-attr]
    assert Connections.key(settings) not in current().connections._by_key


@pytest.mark.partitions(16)
def test_a_step_looks_only_at_links_something_happened_to_and_a_sweep_at_every_link(eventhub, monkeypatch):
    """A connection may hold 1,024 links; walking all of them every step cost about 3 ms a time at idle (and held the
    GIL the service's other threads wait on). A step looks at the links events came to; a detach is seen from the
    frame that brings it, with no sweep; every link's token is still looked at in the periodic sweep."""
    monkeypatch.setattr(receive_connections, "_SWEEP_EVERY", 3600.0)  # no sweep: only what happened is looked at
    kept: list[str] = []
    keep = receive_connections.SharedConnection._keep

    def counting_keep(self, link, now):  # type: ignore[no-untyped-def]
        kept.append(link.spec.partition)
        keep(self, link, now)

    monkeypatch.setattr(receive_connections.SharedConnection, "_keep", counting_keep)
    settings = parse_connection_string(eventhub.connection_string)
    connections = Connections()  # a connection of its own, driven with the settings above
    config = ReceiverConfig("$Default", 20, 10.0, True)
    receivers = [PartitionReceiver(settings, config, str(p), connections) for p in range(16)]
    try:
        for r in receivers:
            r.open_at(0)
        links = [r._link for r in receivers]
        wait_until(lambda: all(x.state == "open" for x in links), timeout=30, message="all 16 links open")  # type: ignore[union-attr]
        time.sleep(1.0)  # the links' first credit is looked at once each
        kept.clear()
        send(eventhub.connection_string, [f"e{i}" for i in range(30)], partition_id="5")
        assert read(receivers[5], 0, 30) == list(range(30))
        time.sleep(1.0)
        assert kept and set(kept) == {"5"}, f"only the link events came to was looked at: {sorted(set(kept))}"

        sink = links[9].sink  # type: ignore[union-attr]
        assert eventhub.emulator.detach_receivers(eventhub.name, "9") == 1
        wait_until(lambda: sink.error is not None, timeout=5, message="the detach seen from its frame, no sweep")
        assert all(x.sink.error is None for i, x in enumerate(links) if i != 9)  # type: ignore[union-attr]

        renewed: set[str] = set()
        signed_in = receive_connections.sdk.keep_signed_in

        def renewing(consumer):  # type: ignore[no-untyped-def]
            renewed.add(next(x.spec.partition for x in links if x.consumer is consumer))  # type: ignore[union-attr]
            signed_in(consumer)

        monkeypatch.setattr(receive_connections.sdk, "keep_signed_in", renewing)
        monkeypatch.setattr(receive_connections, "_SIGN_IN_EVERY", 0.0)
        monkeypatch.setattr(receive_connections, "_SWEEP_EVERY", 0.3)
        receivers[0]._connection._wake_reader()  # type: ignore[union-attr]
        want = {str(p) for p in range(16) if p != 9}
        wait_until(lambda: renewed >= want, timeout=10, message="every open link's token looked at by a sweep")
    finally:
        for r in receivers:
            r.close()
