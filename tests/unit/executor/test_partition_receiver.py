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
