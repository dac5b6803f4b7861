"""The official azure-eventhub SDK against the emulator, unchanged: every contract item, one by one."""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import pytest
from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient
from azure.eventhub.exceptions import AuthenticationError, EventHubError

from eventhubs_emulator import Emulator
from tests.integration.sdk_helpers import Receiver, attach_error, receive, send, wait_until


def bodies(events: list) -> list[str]:
    return [e.body_as_str() for e in events]


# --- management ----------------------------------------------------------------------------------


def test_hub_and_partition_properties(eventhub):
    with EventHubProducerClient.from_connection_string(eventhub.connection_string) as producer:
        props = producer.get_eventhub_properties()
        assert props["eventhub_name"] == eventhub.name
        assert props["partition_ids"] == ["0", "1", "2", "3"]
        assert isinstance(props["created_at"], dt.datetime)

        empty = producer.get_partition_properties("1")
        assert empty["is_empty"] is True
        assert empty["beginning_sequence_number"] == 0
        assert empty["last_enqueued_sequence_number"] == -1
        assert empty["last_enqueued_offset"] == "-1"

        before = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)
        send(eventhub.connection_string, ["a", "b", "c"], partition_id="1")
        full = producer.get_partition_properties("1")
        assert full["is_empty"] is False
        assert full["beginning_sequence_number"] == 0
        assert full["last_enqueued_sequence_number"] == 2
        assert isinstance(full["last_enqueued_offset"], str) and int(full["last_enqueued_offset"]) > 0
        assert full["last_enqueued_time_utc"] >= before


def test_unknown_hub_partition_and_consumer_group(eventhubs_emulator, eventhub):
    missing = eventhubs_emulator.connection_string("no-such-hub")
    with EventHubProducerClient.from_connection_string(missing, retry_total=0) as producer:
        with pytest.raises(EventHubError, match="could not be found"):
            producer.get_eventhub_properties()
    with EventHubProducerClient.from_connection_string(eventhub.connection_string, retry_total=0) as producer:
        with pytest.raises(EventHubError, match="partition is invalid"):
            producer.get_partition_properties("17")
        with pytest.raises(EventHubError, match="partition is invalid|Invalid partition"):
            producer.send_batch([EventData("x")], partition_id="17")
    assert "consumergroups/nope' could not be found" in attach_error(eventhub.connection_string, "0", "nope")
    assert "partition is invalid" in attach_error(eventhub.connection_string, "9")
    # A missing hub is refused earlier, at put-token, as the service does: see
    # test_emulator_service_rules.py::test_a_missing_hub_is_refused_at_sign_in_as_the_service_does


def test_management_failures_are_retried_by_the_sdk(eventhubs_emulator, eventhub):
    eventhubs_emulator.fail_management_calls(2)
    with EventHubProducerClient.from_connection_string(
        eventhub.connection_string, retry_total=3, retry_backoff_factor=0.01
    ) as producer:
        assert producer.get_partition_properties("0")["id"] == "0"
    eventhubs_emulator.fail_management_calls(10)
    with (
        EventHubProducerClient.from_connection_string(
            eventhub.connection_string, retry_total=1, retry_backoff_factor=0.01
        ) as producer,
        pytest.raises(EventHubError, match="server is busy"),
    ):
        producer.get_partition_properties("0")
    eventhubs_emulator.fail_management_calls(0)


# --- sending -------------------------------------------------------------------------------------


def test_round_robin_spreads_batches_over_partitions(eventhub):
    with EventHubProducerClient.from_connection_string(eventhub.connection_string) as producer:
        for i in range(8):
            producer.send_batch([EventData(f"rr{i}")])
        counts = [producer.get_partition_properties(p)["last_enqueued_sequence_number"] + 1 for p in "0123"]
    assert counts == [2, 2, 2, 2]


def test_partition_key_always_lands_on_one_partition(eventhub):
    keys = ("alpha", "beta", "gamma", "delta", "epsilon")
    with EventHubProducerClient.from_connection_string(eventhub.connection_string) as producer:
        for round_ in range(3):
            for key in keys:
                producer.send_batch([EventData(f"{key}-{round_}")], partition_key=key)
                producer.send_event(EventData(f"{key}-single-{round_}"), partition_key=key)
    partitions_of: dict[str, set[str]] = {}
    for p in map(str, range(eventhub.partitions)):
        expected = eventhub.emulator.partition_properties(eventhub.name, p)["last_enqueued_sequence_number"] + 1
        if expected == 0:
            continue
        events = receive(eventhub.connection_string, expected, partition_id=p, starting_position="-1")
        assert len(events) == expected
        for e in events:
            key = e.body_as_str().split("-")[0]
            assert e.partition_key in (key, key.encode())
            partitions_of.setdefault(key, set()).add(p)
    assert set(partitions_of) == set(keys)
    assert all(len(ps) == 1 for ps in partitions_of.values()), partitions_of
    assert len({p for ps in partitions_of.values() for p in ps}) > 1  # five keys do not all hash alike


def test_explicit_partition_single_events_and_batches(eventhub):
    with EventHubProducerClient.from_connection_string(eventhub.connection_string) as producer:
        producer.send_event(EventData("one"), partition_id="2")
        batch = producer.create_batch(partition_id="2")
        for i in range(5):
            batch.add(EventData(f"b{i}"))
        producer.send_batch(batch)
        producer.send_batch([EventData("listed")], partition_id="2")
    events = receive(eventhub.connection_string, 7, partition_id="2", starting_position="-1")
    assert bodies(events) == ["one", "b0", "b1", "b2", "b3", "b4", "listed"]
    assert [e.sequence_number for e in events] == list(range(7))
    for p in "013":
        assert eventhub.emulator.partition_properties(eventhub.name, p)["is_partition_empty"]


def test_properties_and_system_properties_round_trip(eventhub):
    event = EventData(b"\x00\x01binary")
    event.properties = {"kind": "reading", "count": 3, "ratio": 0.5, "ok": True}
    event.content_type = "application/octet-stream"
    event.correlation_id = "corr-1"
    event.message_id = "msg-1"
    with EventHubProducerClient.from_connection_string(eventhub.connection_string) as producer:
        producer.send_batch([event], partition_id="0")
    (got,) = receive(eventhub.connection_string, 1, partition_id="0", starting_position="-1")
    assert got.body_as_str(encoding="latin-1") == "\x00\x01binary"
    assert got.properties == {b"kind": b"reading", b"count": 3, b"ratio": 0.5, b"ok": True}
    assert got.content_type == "application/octet-stream"
    assert got.correlation_id == "corr-1"
    assert got.message_id == "msg-1"
    assert got.system_properties[b"x-opt-sequence-number"] == 0
    assert got.offset == "0"
    assert isinstance(got.enqueued_time, dt.datetime)


def test_message_size_limit_is_enforced_by_the_server(eventhubs_emulator):
    emu = Emulator({"small": 1}, max_message_size=64 * 1024).start()
    try:
        conn = emu.connection_string("small")
        with EventHubProducerClient.from_connection_string(conn, retry_total=0) as producer:
            batch = producer.create_batch()
            assert batch.max_size_in_bytes == 64 * 1024  # the SDK reads the link's max-message-size
            with pytest.raises(ValueError):
                batch.add(EventData(b"x" * 70 * 1024))
            # Make the client believe in a larger limit, so the server has to say no.
            producer._max_message_size_on_link = 1024 * 1024
            producer._producers["all-partitions"] = None
            big = producer.create_batch(max_size_in_bytes=1024 * 1024)
            big.add(EventData(b"x" * 70 * 1024))
            with pytest.raises(EventHubError, match="message-size-exceeded|exceeds the limit"):
                producer.send_batch(big)
        assert emu.partition_properties("small", 0)["is_partition_empty"]
    finally:
        emu.stop()


# --- receiving -----------------------------------------------------------------------------------


@pytest.fixture
def ten_events(eventhub):
    send(eventhub.connection_string, [f"e{i}" for i in range(10)], partition_id="0")
    return eventhub


def _read(hub, expected: int, **options):
    """Read partition 0 from a position; waits for ``expected`` events, then a moment for any extra."""
    with Receiver(hub.connection_string, partition_id="0", **options) as r:
        r.wait_for(expected, timeout=10)
        wait_until(lambda: hub.emulator.receiver_count(hub.name, 0) >= 1, message="receiver attached")
        time.sleep(0.3)  # room for any event that should not come
        return bodies(r.result.events)


def test_positions_by_sequence_number(ten_events):
    assert _read(ten_events, 5, starting_position=4) == [f"e{i}" for i in range(5, 10)]
    assert _read(ten_events, 6, starting_position=4, starting_position_inclusive=True) == [
        f"e{i}" for i in range(4, 10)
    ]


def test_positions_by_offset_and_special_offsets(ten_events):
    everything = receive(ten_events.connection_string, 10, partition_id="0", starting_position="-1")
    offset_of_3 = everything[3].offset
    assert isinstance(offset_of_3, str)
    assert _read(ten_events, 6, starting_position=offset_of_3) == [f"e{i}" for i in range(4, 10)]
    assert _read(ten_events, 7, starting_position=offset_of_3, starting_position_inclusive=True) == [
        f"e{i}" for i in range(3, 10)
    ]
    assert _read(ten_events, 10, starting_position="-1") == [f"e{i}" for i in range(10)]
    assert _read(ten_events, 0, starting_position="@latest") == []


def test_positions_by_enqueued_time(eventhub):
    send(eventhub.connection_string, ["old1", "old2"], partition_id="0")
    time.sleep(0.05)
    cut = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.05)
    send(eventhub.connection_string, ["new1", "new2"], partition_id="0")
    assert _read(eventhub, 2, starting_position=cut) == ["new1", "new2"]
    first = receive(eventhub.connection_string, 1, partition_id="0", starting_position="-1")[0]
    assert _read(eventhub, 4, starting_position=first.enqueued_time, starting_position_inclusive=True)[:2] == [
        "old1",
        "old2",
    ]


def test_live_tailing_from_latest(eventhub):
    with Receiver(eventhub.connection_string, partition_id="3", starting_position="@latest") as r:
        wait_until(lambda: eventhub.emulator.receiver_count(eventhub.name, 3) == 1, message="receiver attached")
        send(eventhub.connection_string, [f"live{i}" for i in range(5)], partition_id="3")
        assert bodies(r.wait_for(5)) == [f"live{i}" for i in range(5)]
        send(eventhub.connection_string, ["later"], partition_id="3")
        assert bodies(r.wait_for(6))[-1] == "later"


def test_runtime_metrics(eventhub):
    send(eventhub.connection_string, [f"m{i}" for i in range(4)], partition_id="1")
    from azure.eventhub import EventHubConsumerClient

    client = EventHubConsumerClient.from_connection_string(eventhub.connection_string, consumer_group="$Default")
    seen: list = []

    def on_event(ctx, event):
        if event is not None:
            seen.append(ctx.last_enqueued_event_properties)

    import threading

    t = threading.Thread(
        target=client.receive,
        kwargs={
            "on_event": on_event,
            "partition_id": "1",
            "starting_position": "-1",
            "track_last_enqueued_event_properties": True,
        },
        daemon=True,
    )
    t.start()
    wait_until(lambda: len(seen) >= 4, message="four events")
    client.close()
    t.join(10)
    last = seen[-1]
    assert last["sequence_number"] == 3
    assert isinstance(last["offset"], str)
    assert isinstance(last["enqueued_time"], dt.datetime)
    assert isinstance(last["retrieval_time"], dt.datetime)


# --- owner level (epochs) and receiver limits ------------------------------------------------------


def test_higher_owner_level_steals_and_lower_is_refused(eventhub):
    emu, name = eventhub.emulator, eventhub.name
    with Receiver(eventhub.connection_string, partition_id="0", owner_level=1, starting_position="-1") as first:
        wait_until(lambda: emu.receiver_count(name, 0) == 1, message="first receiver")
        with Receiver(eventhub.connection_string, partition_id="0", owner_level=2, starting_position="-1") as second:
            error = first.wait_for_error()
            assert "higher epoch of '2'" in str(error)
            wait_until(lambda: emu.receiver_count(name, 0) == 1, message="second receiver alone")
            with Receiver(eventhub.connection_string, partition_id="0", owner_level=1) as lower:
                assert "higher epoch '2' already exists" in str(lower.wait_for_error())
            with Receiver(eventhub.connection_string, partition_id="0") as plain:
                assert "non-epoch receiver is not allowed" in str(plain.wait_for_error())
            send(eventhub.connection_string, ["after"], partition_id="0")
            assert bodies(second.wait_for(1)) == ["after"]
            assert not second.result.errors


def test_at_most_five_non_epoch_receivers(eventhub):
    emu, name = eventhub.emulator, eventhub.name
    receivers = [Receiver(eventhub.connection_string, partition_id="2") for _ in range(5)]
    try:
        wait_until(lambda: emu.receiver_count(name, 2) == 5, message="five receivers")
        assert "maximum number of allowed receivers" in attach_error(eventhub.connection_string, "2")
        with Receiver(eventhub.connection_string, consumer_group="other", partition_id="2") as other_group:
            wait_until(lambda: emu.receiver_count(name, 2, "other") == 1, message="other group receiver")
            assert not other_group.result.errors
    finally:
        for r in receivers:
            r.close()


# --- retention -----------------------------------------------------------------------------------


def test_trim_moves_the_beginning_sequence_number(eventhub):
    send(eventhub.connection_string, [f"t{i}" for i in range(10)], partition_id="0")
    assert eventhub.emulator.trim(eventhub.name, 0, 6) == 6
    with EventHubProducerClient.from_connection_string(eventhub.connection_string) as producer:
        props = producer.get_partition_properties("0")
    assert props["beginning_sequence_number"] == 6
    assert props["last_enqueued_sequence_number"] == 9
    assert _read(eventhub, 4, starting_position="-1") == ["t6", "t7", "t8", "t9"]
    assert _read(eventhub, 4, starting_position=2) == ["t6", "t7", "t8", "t9"]  # below the beginning: the oldest


def test_time_based_retention(eventhub):
    send(eventhub.connection_string, ["expiring"], partition_id="1")
    eventhub.emulator.set_retention(eventhub.name, 0.5)
    wait_until(
        lambda: eventhub.emulator.partition_properties(eventhub.name, 1)["is_partition_empty"],
        message="retention",
    )
    props = eventhub.emulator.partition_properties(eventhub.name, 1)
    assert props["begin_sequence_number"] == 1 and props["last_enqueued_sequence_number"] == 0
    # Retention off again, so a slow (loaded) receive cannot race the 0.5 s expiry of the next event.
    eventhub.emulator.set_retention(eventhub.name, None)
    send(eventhub.connection_string, ["fresh"], partition_id="1")
    assert bodies(receive(eventhub.connection_string, 1, partition_id="1", starting_position="-1")) == ["fresh"]


# --- faults ----------------------------------------------------------------------------------------


def test_dropped_connections_are_recovered_without_loss(eventhub):
    with Receiver(eventhub.connection_string, partition_id="0", starting_position="-1", prefetch=10) as r:
        send(eventhub.connection_string, [f"d{i}" for i in range(50)], partition_id="0")
        r.wait_for(50)
        assert eventhub.emulator.drop_connections() >= 1
        send(eventhub.connection_string, [f"d{i}" for i in range(50, 100)], partition_id="0")
        got = bodies(r.wait_for(100))
    assert got == [f"d{i}" for i in range(100)]


def test_detached_receivers_reconnect_and_continue(eventhub):
    with Receiver(eventhub.connection_string, partition_id="1", starting_position="-1") as r:
        send(eventhub.connection_string, [f"x{i}" for i in range(20)], partition_id="1")
        r.wait_for(20)
        assert eventhub.emulator.detach_receivers(eventhub.name, 1) == 1
        send(eventhub.connection_string, [f"x{i}" for i in range(20, 40)], partition_id="1")
        got = bodies(r.wait_for(40))
    assert got == [f"x{i}" for i in range(40)]


def test_stalled_and_slow_partitions(eventhub):
    emu = eventhub.emulator
    emu.stall(eventhub.name, 2)
    send(eventhub.connection_string, [f"s{i}" for i in range(5)], partition_id="2")
    send(eventhub.connection_string, [f"o{i}" for i in range(5)], partition_id="3")
    with Receiver(eventhub.connection_string, partition_id="3", starting_position="-1") as other:
        assert len(other.wait_for(5)) == 5  # other partitions keep flowing
    with Receiver(eventhub.connection_string, partition_id="2", starting_position="-1") as r:
        assert r.wait_for(1, timeout=1.5) == []
        emu.slow(eventhub.name, 2, 0.2)
        emu.stall(eventhub.name, 2, False)
        started = time.monotonic()
        assert len(r.wait_for(5)) == 5
        assert time.monotonic() - started >= 0.6  # one event every 0.2 s
    emu.slow(eventhub.name, 2, 0)


# --- sizes, concurrency, async ---------------------------------------------------------------------


def test_large_events_span_several_frames(eventhub):
    big = [bytes([i]) * (600 * 1024) for i in range(3)]
    with EventHubProducerClient.from_connection_string(eventhub.connection_string) as producer:
        for body in big:
            producer.send_batch([EventData(body)], partition_id="0")
    events = receive(eventhub.connection_string, 3, partition_id="0", starting_position="-1")
    assert [b"".join(e.body) for e in events] == big


@pytest.mark.slow
def test_many_clients_and_hundreds_of_thousands_of_events(eventhub):
    import threading

    per_producer, producers = 25_000, 8
    payload = "x" * 100

    def produce(k: int) -> None:
        send(eventhub.connection_string, [f"{k}:{i}:{payload}" for i in range(per_producer)])

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(producers)]
    receivers = [
        Receiver(eventhub.connection_string, partition_id=str(p), starting_position="-1", prefetch=2000)
        for p in range(eventhub.partitions)
    ]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        total = per_producer * producers
        wait_until(lambda: sum(len(r.result.events) for r in receivers) >= total, timeout=240, message="all events")
        seen = [e.body_as_str() for r in receivers for e in r.result.events]
        assert len(seen) == total and len(set(seen)) == total
        for r in receivers:
            # every sequence number once, no gaps; the order the SDK's processor hands them out in is not
            # the emulator's to keep (see the next test): the emulator's own order is checked below
            seqs = [e.sequence_number for e in r.result.events]
            assert sorted(seqs) == list(range(len(seqs)))
    finally:
        for r in receivers:
            r.close()
    for p in range(eventhub.partitions):  # delivered in order: read by a client with a single reading thread
        count = eventhub.emulator.partition_properties(eventhub.name, p)["last_enqueued_sequence_number"] + 1
        seqs = [e.sequence_number for e in _receive_single_threaded(eventhub.connection_string, str(p), count)]
        assert seqs == list(range(count))


def _receive_single_threaded(conn: str, partition: str, count: int, keep_alive: int = 0) -> list:
    """The SDK's own consumer driven by hand on this thread; ``keep_alive`` (seconds): its keep-alive thread's
    interval (the SDK's processors use 30 and offer no way to change it), 0 for none."""
    client = EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default")
    got: list = []
    consumer = client._create_consumer("$Default", partition, "-1", lambda events: got.extend(events or []),
                                       prefetch=2000)  # fmt: skip
    consumer._keep_alive = keep_alive
    try:
        deadline = time.monotonic() + 120
        while len(got) < count and time.monotonic() < deadline:
            consumer.receive(batch=True, max_batch_size=2000, max_wait_time=0.5)
    finally:
        consumer.close()
        client.close()
    return got


@pytest.mark.slow
def test_the_sdks_keep_alive_thread_can_hand_out_events_out_of_order(eventhub, monkeypatch):
    """Why the SDK saw one event out of order once in CI: not the emulator. The SDK's consumer starts a
    keep-alive thread (every 30 s by default) that calls the connection's ``listen`` while the receiving
    thread does too; the transport's lock covers reading a frame, not processing it, so a transfer the
    keep-alive thread read can reach the consumer's buffer after the next one. Here the keep-alive runs
    every second and takes a little longer to process what it reads: events come out of order. Without
    the keep-alive thread (and through the connector, which reads each connection on one thread) they
    never do."""
    import threading

    from azure.eventhub._pyamqp._connection import Connection

    send(eventhub.connection_string, [f"k{i}" for i in range(15_000)], partition_id="0")
    original = Connection._process_incoming_frame
    receiving = threading.current_thread()

    def keep_alive_slower(self, channel, frame):
        if frame is not None and frame[0] == 0x14:  # a transfer
            # the receiving thread reads steadily for several seconds (several keep-alive rounds); a transfer the
            # keep-alive thread read takes it a little longer, and the receiving thread goes on meanwhile
            time.sleep(0.0002 if threading.current_thread() is receiving else 0.002)
        return original(self, channel, frame)

    monkeypatch.setattr(Connection, "_process_incoming_frame", keep_alive_slower)
    seqs = [e.sequence_number for e in _receive_single_threaded(eventhub.connection_string, "0", 15_000, 1)]
    assert sorted(seqs) == list(range(15_000)) and seqs != sorted(seqs)  # all there, not in order
    in_order = [e.sequence_number for e in _receive_single_threaded(eventhub.connection_string, "0", 15_000, 0)]
    assert in_order == list(range(15_000))


def test_async_clients(eventhub):
    from azure.eventhub.aio import EventHubConsumerClient as AsyncConsumer
    from azure.eventhub.aio import EventHubProducerClient as AsyncProducer

    async def main() -> list[str]:
        producer = AsyncProducer.from_connection_string(eventhub.connection_string)
        async with producer:
            batch = await producer.create_batch(partition_id="1")
            for i in range(20):
                batch.add(EventData(f"async{i}"))
            await producer.send_batch(batch)
            assert (await producer.get_partition_properties("1"))["last_enqueued_sequence_number"] == 19
        consumer = AsyncConsumer.from_connection_string(eventhub.connection_string, consumer_group="$Default")
        got: list[str] = []
        done = asyncio.Event()

        async def on_event(ctx, event):
            got.append(event.body_as_str())
            if len(got) == 20:
                done.set()

        async with consumer:
            task = asyncio.ensure_future(consumer.receive(on_event, partition_id="1", starting_position="-1"))
            await asyncio.wait_for(done.wait(), 30)
            await consumer.close()
            # The SDK's receive task sleeps out its load-balancing interval (30 s) after close().
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return got

    assert asyncio.run(main()) == [f"async{i}" for i in range(20)]


# --- authentication --------------------------------------------------------------------------------


def test_keys_are_checked_when_configured():
    with Emulator({"secure": 2}, keys={"listen-send": "correct-key"}) as emu:
        good = emu.connection_string("secure")
        assert "correct-key" in good
        send(good, ["ok"], partition_id="0")
        assert bodies(receive(good, 1, partition_id="0", starting_position="-1")) == ["ok"]
        bad = emu.connection_string("secure", key="wrong-key")
        with EventHubProducerClient.from_connection_string(bad, retry_total=0) as producer:
            with pytest.raises(AuthenticationError):
                producer.get_eventhub_properties()
            with pytest.raises((AuthenticationError, EventHubError)):
                producer.send_batch([EventData("no")], partition_id="0")
        unknown = emu.connection_string("secure", key_name="nobody", key="correct-key")
        with EventHubConsumerClient.from_connection_string(unknown, consumer_group="$Default", retry_total=0) as c:
            with pytest.raises(AuthenticationError):
                c.get_partition_ids()
        assert emu.partition_properties("secure", 0)["last_enqueued_sequence_number"] == 0
