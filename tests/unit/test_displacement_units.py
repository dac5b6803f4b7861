"""How a pooled receiver answers displacement (another owner-level receiver taking its link), and when
the pool lets idle receivers go. Scripted links: nothing runs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from eventhubs_spark.amqp.frame_reader import LinkSink
from eventhubs_spark.amqp.messages import RawEvents
from eventhubs_spark.amqp.receive_connections import Connections
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.errors import ReceiverDisconnectedError
from eventhubs_spark.executor.partition_receiver import PartitionReceiver
from eventhubs_spark.executor.receiver_pool import ReceiverPool
from eventhubs_spark.interprocess.task_ranges import RangeResult, ReceiverConfig

from .test_reader_units import Clock, FakeReceiver

SETTINGS = parse_connection_string(
    "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=a;SharedAccessKey=b;EntityPath=hub;UseDevelopmentEmulator=true"
)
STOLEN = (
    "Error condition: amqp:link:stolen\n Error Description: New receiver 'x' with higher epoch of '0' is created "
    "hence current receiver 'y' with epoch '0' is getting disconnected."
)


def columns(seqs: range) -> RawEvents:
    events = RawEvents()
    for seq in seqs:
        events.append(seq, b"")
    return events


class ScriptedReceiver(PartitionReceiver):
    """A partition of events 0..999 behind scripted links.

    ``steals[i]``: how many events the i-th link opened hands out before it reports ``link:stolen``
    (``None``: never). ``taken_while_idle``: the current link was taken while the receiver sat idle.
    """

    def __init__(self, steals: list[int | None]) -> None:
        super().__init__(SETTINGS, ReceiverConfig("$Default", 4, 5.0, True), "0", Connections())
        self.steals = list(steals)
        self.links = 0
        self.taken_while_idle = False
        self.closed_by_service: str | None = None
        self._next = 0
        self._left: int | None = None
        self._stolen = False

    def open_at(self, sequence_number: int, keep: RawEvents | None = None) -> None:
        self._link = SimpleNamespace(sink=LinkSink())  # nothing arrives there: the script hands events out
        self.held.replace(keep)
        if keep is None:
            self.position = sequence_number
        self.opens += 1
        self._next = sequence_number
        self._left = self.steals[self.links] if self.links < len(self.steals) else None
        self.links += 1
        self._stolen = False
        self.taken_while_idle = False
        self.closed_by_service = None

    def _closed_while_idle(self) -> str | None:
        return STOLEN if self.taken_while_idle else self.closed_by_service

    def _from_link(self, wanted: int) -> RawEvents | None:
        if self._stolen:
            return None
        count = min(wanted, 3)
        if self._left is not None:
            if self._left == 0:
                self._stolen = True
                return None
            count = min(count, self._left)
            self._left -= count
        events = columns(range(self._next, self._next + count))
        self._next += count
        return events

    def _link_error(self) -> str | None:
        return STOLEN if self._stolen else None

    def _link_exception(self) -> BaseException | None:
        """What the SDK reports for each: a stolen link carries its condition, the service's idle closes theirs."""
        from azure.eventhub._pyamqp.error import AMQPLinkError

        if self._stolen or self.taken_while_idle:
            return AMQPLinkError(condition=b"amqp:link:stolen", description=STOLEN)
        if self.closed_by_service:
            return AMQPLinkError(condition=b"amqp:link:detach-forced", description=self.closed_by_service)
        return None


def read(receiver: PartitionReceiver, start: int, end: int) -> list[int]:
    result = RangeResult()
    seqs = [seq for chunk in receiver.read_range(start, end, True, result) for seq in chunk.seqs]
    assert result.read == len(seqs)
    return seqs


def test_displaced_while_idle_reopens_at_its_position_and_reads_every_event_once():
    receiver = ScriptedReceiver([None, None])
    assert read(receiver, 0, 10) == list(range(10))
    receiver.taken_while_idle = True  # e.g. the driver's offset lookup between micro-batches
    assert read(receiver, 10, 25) == list(range(10, 25))
    assert (receiver.opens, receiver.displaced_idle, receiver.displaced_reading) == (2, 1, 0)


def test_a_link_the_service_closed_while_idle_reopens_at_its_position_too():
    receiver = ScriptedReceiver([None, None])
    assert read(receiver, 0, 10) == list(range(10))
    receiver.closed_by_service = "amqp:link:detach-forced: AmqpMessageConsumer.IdleTimerExpired: Idle timeout"
    assert read(receiver, 10, 20) == list(range(10, 20))
    assert (receiver.opens, receiver.closed_idle, receiver.displaced_idle) == (2, 1, 0)


def test_displaced_while_reading_reopens_once_and_goes_on():
    receiver = ScriptedReceiver([5, None])
    assert read(receiver, 0, 20) == list(range(20))
    assert (receiver.opens, receiver.displaced_reading) == (2, 1)


def test_an_idle_displacement_does_not_use_up_the_one_reopen_of_a_read():
    receiver = ScriptedReceiver([None, 4, None])
    assert read(receiver, 0, 6) == list(range(6))
    receiver.taken_while_idle = True
    assert read(receiver, 6, 30) == list(range(6, 30))
    assert (receiver.displaced_idle, receiver.displaced_reading) == (1, 1)


def test_displaced_twice_in_one_read_fails_and_names_the_partition_and_the_fix():
    receiver = ScriptedReceiver([5, 3])
    seen: list[int] = []
    with pytest.raises(ReceiverDisconnectedError) as info:
        for chunk in receiver.read_range(0, 20, True, RangeResult()):
            seen += chunk.seqs
    assert seen == list(range(8)), "nothing read twice, nothing skipped before the failure"
    text = str(info.value)
    assert "partition 0" in text and "[8, 20)" in text and "consumer group" in text and "link:stolen" in text


def test_the_next_task_reads_on_after_a_read_that_was_displaced_once():
    receiver = ScriptedReceiver([5, None, None])
    assert read(receiver, 0, 10) == list(range(10))
    assert read(receiver, 10, 15) == list(range(10, 15)), "a new task gets its own reopen"


# --- the pool lets idle receivers go -----------------------------------------------------------------


def test_idle_receivers_close_after_the_time_their_task_gave_even_without_another_task():
    clock = Clock()
    pool = ReceiverPool(idle_timeout=300, clock=clock, factory=FakeReceiver)
    config = ReceiverConfig()
    short = pool.acquire(SETTINGS, config, "0", 0, idle_timeout=5)
    long = pool.acquire(SETTINGS, config, "1", 0, idle_timeout=60)
    busy = pool.acquire(SETTINGS, config, "2", 0, idle_timeout=1)
    pool.release(short, True)
    pool.release(long, True)
    clock.now = 5.5
    assert pool.reap() == 1 and short.closed and not long.closed
    clock.now = 1000
    assert pool.reap() == 1 and long.closed
    assert not busy.closed, "a receiver in use is never closed"
    pool.release(busy, True)
    assert pool.reap() == 0, "idle time counts from the release"
    clock.now = 1001.5
    assert pool.reap() == 1 and busy.closed and len(pool) == 0


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


def test_the_process_pool_reaps_on_a_thread():
    from eventhubs_spark.process.runtime import Runtime

    assert Runtime().pool.reap_every > 0  # a process's runtime closes idle receivers even when no task comes
