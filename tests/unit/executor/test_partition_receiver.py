"""Unit tests of :mod:`eventhubs_spark.executor.partition_receiver`."""

from __future__ import annotations

import pytest

from eventhubs_spark.errors import ReceiverDisconnectedError
from eventhubs_spark.executor.receiver_pool import ReceiverPool
from eventhubs_spark.interprocess.task_ranges import RangeResult, ReceiverConfig
from tests.unit.executor.test_receiver_pool import Clock, FakeReceiver
from tests.unit.support.displacement import SETTINGS, ScriptedReceiver


def test_displaced_twice_in_one_read_fails_and_names_the_partition_and_the_fix():
    receiver = ScriptedReceiver([5, 3])
    seen: list[int] = []
    with pytest.raises(ReceiverDisconnectedError) as info:
        for chunk in receiver.read_range(0, 20, True, RangeResult()):
            seen += chunk.seqs
    assert seen == list(range(8)), "nothing read twice, nothing skipped before the failure"
    text = str(info.value)
    assert "partition 0" in text and "[8, 20)" in text and "consumer group" in text and "link:stolen" in text


def test_ownership_closes_idle_receivers_of_partitions_the_owner_gave_up():
    clock = Clock()
    pool = ReceiverPool(clock=clock, factory=FakeReceiver)
    config = ReceiverConfig()
    mine = {p: pool.acquire(SETTINGS, config, p, 0, scope="a", owned=frozenset("0123")) for p in "0123"}
    theirs = pool.acquire(SETTINGS, config, "7", 0, scope="b", owned=frozenset("7"))
    for r in (*mine.values(), theirs):
        pool.release(r, True)
    in_use = pool.acquire(SETTINGS, config, "3", 0, scope="a", owned=frozenset("0123"))
    # owner a lost partitions 1 and 3: the idle one closes at a's next task, the busy one stays
    pool.acquire(SETTINGS, config, "0", 0, scope="a", owned=frozenset("02"))
    assert mine["1"].closed and not mine["2"].closed and not in_use.closed
    assert not theirs.closed, "another owner's receivers are its own business"
    other_group = pool.acquire(SETTINGS, ReceiverConfig(consumer_group="other"), "1", 0, scope="a",
                               owned=frozenset("0"))  # fmt: skip
    assert not mine["2"].closed, "another consumer group's ownership says nothing of this one's"
    pool.release(other_group, True)


def test_a_receiver_vouches_for_its_partitions_end_only_while_its_open_link_may_read_on():
    """What its service tells a driver (interprocess.partition_ends): the position after the newest event its
    link brought, while that link is open, has not failed and has credit; nothing otherwise."""
    from types import SimpleNamespace

    import numpy as np

    from eventhubs_spark.amqp.frame_reader import NEWEST_HEAD, LinkSink
    from eventhubs_spark.amqp.messages import RawEvents
    from eventhubs_spark.amqp.receive_connections import Connections
    from eventhubs_spark.executor.partition_receiver import PartitionReceiver

    receiver = PartitionReceiver(SETTINGS, ReceiverConfig(), "4", Connections())
    assert receiver.newest_end() is None, "no link"
    sink = LinkSink()
    receiver._link = SimpleNamespace(state="opening", sink=sink)  # type: ignore[assignment]
    for seq in (7, 8):
        sink.incoming.append(seq, b"m%d" % seq)
    sink.publish()
    assert sink.newest == (8, b"m8"), "the newest event and its message, kept as the reading thread hands it over"
    assert receiver.newest_end() is None, "a link still opening"
    receiver._link.state = "open"
    assert receiver.newest_end() == (9, b"m8")
    run = RawEvents()
    run.add_run(b"..m9..m10", np.array([2, 6]), np.array([4, 9]), [9, 10])
    sink.incoming.extend(run)
    sink.publish()
    assert receiver.newest_end() == (11, b"m10"), "a run's last message, cut from its buffer"
    big = b"h" * 100 + b"b" * (1 << 20)  # a 1 MB event: only its head is kept (the annotations are there)
    sink.incoming.append(12, big)
    sink.publish()
    assert receiver.newest_end() == (13, big[:NEWEST_HEAD])
    sink.starved = True  # its reading thread held credit back: what it holds reached its bounds
    assert receiver.newest_end() is None, "a full link has stopped bringing events"
    sink.starved = False
    sink.fail("amqp:link:stolen")
    assert receiver.newest_end() is None, "a failed link"
    receiver._link = SimpleNamespace(state="open", sink=LinkSink())  # type: ignore[assignment]
    assert receiver.newest_end() is None, "a new link that has brought nothing yet"


def test_a_pool_vouches_for_its_idle_receivers_of_one_hub_the_furthest_where_two_groups_read_a_partition():
    from eventhubs_spark.auth.settings import parse_connection_string

    other_hub = parse_connection_string(
        "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=a;SharedAccessKey=b;EntityPath=other;UseDevelopmentEmulator=true"
    )
    ends = {("$Default", "0"): (5, b"a"), ("g2", "0"): (9, b"b"), ("$Default", "1"): (3, b"c"),
            ("$Default", "2"): None}  # fmt: skip

    class Vouching(FakeReceiver):
        def newest_end(self):
            if self.settings.hub == "other":
                return (100, b"other hub")
            return ends[(self.config.consumer_group, self.partition)]

    pool = ReceiverPool(factory=Vouching, clock=Clock())
    for group, partition in ends:
        pool.release(pool.acquire(SETTINGS, ReceiverConfig(consumer_group=group), partition, 0), True)
    pool.release(pool.acquire(other_hub, ReceiverConfig(), "0", 0), True)
    busy = pool.acquire(SETTINGS, ReceiverConfig(), "3", 0)
    assert pool.newest_ends(SETTINGS) == {"0": (9, b"b"), "1": (3, b"c")}
    assert pool.newest_ends(other_hub) == {"0": (100, b"other hub")}
    pool.release(busy, True)
