"""Owner-level receivers on the emulator with the real SDK: the service's epoch rules, and the pooled
receiver's answer when the driver's own lookup (or anyone) displaces it."""

from __future__ import annotations

import pytest

from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.errors import ReceiverDisconnectedError
from eventhubs_spark.executor.partition_receiver import PartitionReceiver
from eventhubs_spark.interprocess.task_ranges import RangeResult, ReceiverConfig
from eventhubs_spark.planning.position_lookup import offset_of
from eventhubs_spark.process.runtime import current
from tests.integration.sdk_helpers import Receiver, attach_error, send, wait_until


def read(receiver: PartitionReceiver, start: int, end: int) -> list[int]:
    return [seq for chunk in receiver.read_range(start, end, True, RangeResult()) for seq in chunk.seqs]


# --- the service's rules, as the emulator keeps them ---------------------------------------------------


def test_an_epoch_receiver_displaces_non_epoch_ones(eventhub):
    send(eventhub.connection_string, ["a"], partition_id="0")
    with Receiver(eventhub.connection_string, partition_id="0", starting_position="-1") as plain:
        plain.wait_for(1)
        with Receiver(eventhub.connection_string, partition_id="0", owner_level=0, starting_position="-1") as owner:
            assert len(owner.wait_for(1)) == 1
            error = plain.wait_for_error()
            assert "link:stolen" in str(error) or "epoch" in str(error)


def test_a_non_epoch_attach_is_refused_while_an_epoch_receiver_holds_the_partition(eventhub):
    with Receiver(eventhub.connection_string, partition_id="1", owner_level=0, starting_position="-1") as owner:
        assert owner.result.started.wait(20), "the epoch receiver attached"
        error = attach_error(eventhub.connection_string, "1")
        assert "non-epoch receiver is not allowed" in error
        assert owner.result.errors == []


def test_an_equal_epoch_displaces_the_older_holder(eventhub):
    send(eventhub.connection_string, ["a"], partition_id="2")
    with Receiver(eventhub.connection_string, partition_id="2", owner_level=5, starting_position="-1") as older:
        older.wait_for(1)
        with Receiver(eventhub.connection_string, partition_id="2", owner_level=5, starting_position="-1") as newer:
            assert len(newer.wait_for(1)) == 1
            assert "higher epoch of '5'" in str(older.wait_for_error())
            assert newer.result.errors == []


# --- the connector's receivers ------------------------------------------------------------------------


def test_a_receiver_displaced_while_idle_by_a_lookup_reopens_and_reads_on(eventhub):
    send(eventhub.connection_string, [f"e{i}" for i in range(300)], partition_id="0")
    settings = parse_connection_string(eventhub.connection_string)
    config = ReceiverConfig("$Default", 100, 10.0, True)
    receiver = PartitionReceiver(settings, config, "0", current().connections)
    try:
        assert read(receiver, 0, 50) == list(range(50))  # it now holds prefetched events beyond 50
        # the driver mirrors a checkpoint between micro-batches: an owner-level lookup of an event's offset
        assert offset_of(settings, config, "0", 120, 10.0)
        wait_until(lambda: receiver._closed_while_idle() is not None, 10, "the connection's reader seeing the detach")
        assert read(receiver, 50, 300) == list(range(50, 300))
        assert receiver.displaced_idle == 1 and receiver.displaced_reading == 0
    finally:
        receiver.close()


def test_a_reader_that_keeps_taking_the_partition_fails_the_read_after_one_reopen(eventhub):
    send(eventhub.connection_string, [f"e{i}" for i in range(50)], partition_id="3")
    settings = parse_connection_string(eventhub.connection_string)
    receiver = PartitionReceiver(settings, ReceiverConfig("$Default", 10, 10.0, True), "3", current().connections)
    try:
        assert read(receiver, 0, 5) == list(range(5))
        # an SDK reader at a higher owner level holds the partition: reopening cannot get it back
        with Receiver(eventhub.connection_string, partition_id="3", owner_level=100, starting_position="-1") as sdk:
            sdk.wait_for(50)
            seen: list[int] = []
            with pytest.raises(ReceiverDisconnectedError, match="partition 3"):
                for chunk in receiver.read_range(5, 10_000, True, RangeResult()):
                    seen += chunk.seqs
            assert seen == sorted(set(seen)) and (not seen or seen[0] == 5), "in order, nothing twice"
    finally:
        receiver.close()


def test_an_idle_receiver_closed_by_the_pool_lets_an_sdk_processor_in(eventhub):
    """The failure behind a locked-out processor: an idle owner-level receiver left open."""
    from eventhubs_spark.executor.receiver_pool import ReceiverPool

    send(eventhub.connection_string, [f"e{i}" for i in range(10)], partition_id="1")
    settings = parse_connection_string(eventhub.connection_string)
    config = ReceiverConfig("$Default", 10, 10.0, True)
    pool = ReceiverPool(current().connections, reap_every=0.2)
    receiver = pool.acquire(settings, config, "1", 0, idle_timeout=1.0)
    assert read(receiver, 0, 10) == list(range(10))
    pool.release(receiver, True)
    assert "non-epoch receiver is not allowed" in attach_error(eventhub.connection_string, "1")
    wait_until(lambda: len(pool) == 0, timeout=10, message="the reaper closing the idle receiver")
    send(eventhub.connection_string, ["after"], partition_id="1")
    with Receiver(eventhub.connection_string, partition_id="1", starting_position="-1") as plain:
        assert len(plain.wait_for(11, timeout=30)) == 11
        assert plain.result.errors == []
