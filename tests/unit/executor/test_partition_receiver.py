"""Unit tests of :mod:`eventhubs_spark.executor.partition_receiver`."""

from __future__ import annotations

import json

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


def _message(offset: str | None, millis: int, body: bytes = b"body", key: str = "") -> bytes:
    """A message as Event Hubs stamps it (its annotations before its body; ``key``: a partition key first)."""
    from eventhubs_emulator import amqp
    from eventhubs_emulator.amqp import Symbol, Timestamp
    from tests.unit.support.decode import section

    annotations: dict = {Symbol("x-opt-partition-key"): key} if key else {}
    annotations[Symbol("x-opt-sequence-number")] = 1
    annotations[Symbol("x-opt-enqueued-time")] = Timestamp(millis)
    if offset is not None:
        annotations[Symbol("x-opt-offset")] = offset
    return section(amqp.MESSAGE_ANNOTATIONS, annotations) + section(amqp.DATA, body)


def test_a_receiver_vouches_for_its_partitions_end_only_while_its_open_link_may_read_on():
    """What its service tells a driver (interprocess.partition_ends): the position after the newest event its
    link brought, and that event's offset and enqueued time (read when the reading thread hands the event over),
    while that link is open, has not failed and has credit; nothing otherwise."""
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
        sink.incoming.append(seq, _message(f"{seq}00", 1000 + seq))
    sink.publish()
    assert sink.newest == (8, "800", 1008), "its offset and time, read as the reading thread hands it over"
    assert receiver.newest_end() is None, "a link still opening"
    receiver._link.state = "open"
    assert receiver.newest_end() == (9, "800", 1008)
    m9, m10 = _message("900", 1009), _message("1000", 1010)
    run = RawEvents()
    buffer = b".." + m9 + b".." + m10 + b".."
    run.add_run(buffer, np.array([2, 4 + len(m9)]), np.array([2 + len(m9), 4 + len(m9) + len(m10)]), [9, 10])
    sink.incoming.extend(run)
    sink.publish()
    assert receiver.newest_end() == (11, "1000", 1010), "a run's last message, read in its buffer"
    big = _message("1100", 1011, b"b" * (1 << 20))  # a 1 MB event: only its head is read (the annotations are there)
    sink.incoming.append(12, big)
    sink.publish()
    assert receiver.newest_end() == (13, "1100", 1011)
    sink.incoming.append(13, _message("1200", 1012, key="k" * NEWEST_HEAD))
    sink.publish()
    assert receiver.newest_end() is None, "annotations that run past the head read: nothing vouched"
    sink.incoming.append(13, _message("1250", 1012))
    sink.publish()
    sink.starved = True  # its reading thread held credit back: what it holds reached its bounds
    assert receiver.newest_end() is None, "a full link has stopped bringing events"
    sink.starved = False
    sink.incoming.append(14, _message(None, 1013))
    sink.publish()
    assert receiver.newest_end() is None, "the newest event's message does not show its offset: nothing vouched"
    sink.incoming.append(15, _message("1400", 1014))
    sink.publish()
    assert receiver.newest_end() == (16, "1400", 1014)
    sink.fail("amqp:link:stolen")
    assert receiver.newest_end() is None, "a failed link"
    receiver._link = SimpleNamespace(state="open", sink=LinkSink())  # type: ignore[assignment]
    assert receiver.newest_end() is None, "a new link that has brought nothing yet"


def plain(ends):
    """The pool's vouches without their encoded rows; each row checked to be its vouch's."""
    for partition, vouch in ends.items():
        assert json.loads(vouch.row) == [partition, *vouch[:3]], vouch
    return {partition: vouch[:3] for partition, vouch in ends.items()}


def test_a_pool_keeps_what_its_receivers_vouch_for_the_furthest_where_two_groups_read_a_partition():
    """What a service tells a driver (interprocess.partition_ends) is what the pool keeps as receivers tell it of
    changes; its version moves only when that changes (a question asked while it stands is not looked at)."""
    from eventhubs_spark.auth.settings import parse_connection_string

    other_hub = parse_connection_string(
        "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=a;SharedAccessKey=b;EntityPath=other;UseDevelopmentEmulator=true"
    )
    ends = {("$Default", "0"): (5, "a", 1), ("g2", "0"): (9, "b", 2), ("$Default", "1"): (3, "c", None),
            ("$Default", "2"): None, ("$Default", "3"): (50, "d", 4)}  # fmt: skip

    class Vouching(FakeReceiver):
        def newest_end(self):
            if self.settings.hub == "other":
                return (100, "other hub", 3)
            return ends[(self.config.consumer_group, self.partition)]

    pool = ReceiverPool(factory=Vouching, clock=Clock())
    mine = {}
    for group, partition in ends:
        mine[group, partition] = pool.acquire(SETTINGS, ReceiverConfig(consumer_group=group), partition, 0)
        pool.release(mine[group, partition], True)
    pool.release(pool.acquire(other_hub, ReceiverConfig(), "0", 0), True)
    version = pool.vouch_version
    busy = pool.acquire(SETTINGS, ReceiverConfig(), "3", 0)
    expected = {"0": (9, "b", 2), "1": (3, "c", None), "3": (50, "d", 4)}
    assert plain(pool.newest_ends(SETTINGS)) == expected, "one in a task's use vouches as an idle one"
    assert plain(pool.newest_ends(other_hub)) == {"0": (100, "other hub", 3)}
    pool.release(busy, True)
    busy.on_vouch()  # told, nothing changed
    assert pool.vouch_version == version, "taken, given back, told: what it vouches for did not change"

    # what a receiver vouches for changes (its link's reading thread brought an event): told, it is kept
    ends["$Default", "1"] = (4, "e", 5)
    mine["$Default", "1"].on_vouch()
    assert pool.newest_ends(SETTINGS)["1"][:3] == (4, "e", 5) and pool.vouch_version > version
    version = pool.vouch_version
    ends["$Default", "3"] = None  # its link failed
    mine["$Default", "3"].on_vouch()
    assert "3" not in pool.newest_ends(SETTINGS) and pool.vouch_version > version
    # a change nobody told the pool of: the reaper's look at every receiver finds it
    version = pool.vouch_version
    ends["$Default", "2"] = (7, "f", 6)
    assert "2" not in pool.newest_ends(SETTINGS)
    pool.reap()
    assert pool.newest_ends(SETTINGS)["2"][:3] == (7, "f", 6) and pool.vouch_version > version
    version = pool.vouch_version
    pool.reap()
    assert pool.vouch_version == version, "nothing changed: the reaper's look moves nothing"
    again = pool.acquire(SETTINGS, ReceiverConfig(), "1", 0, retry=True)  # a retry: a new receiver, no link yet
    assert "1" not in pool.newest_ends(SETTINGS), "the discarded receiver's vouch went with it"
    pool.release(again, True)
    assert pool.newest_ends(SETTINGS)["1"][:3] == (4, "e", 5), "given back, the new one's link vouches"
    pool.close_all()
    assert pool.newest_ends(SETTINGS) == {}
