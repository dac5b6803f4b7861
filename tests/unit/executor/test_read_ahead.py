"""Unit tests of :mod:`eventhubs_spark.executor.read_ahead`."""

from __future__ import annotations

from eventhubs_spark.amqp.messages import RawEvents
from eventhubs_spark.executor.read_ahead import HeldEvents


def _events(*seqs: int) -> RawEvents:
    events = RawEvents()
    for seq in seqs:
        events.append(seq, f"m{seq}".encode())
    return events


def test_held_events_come_out_oldest_first_each_once():
    held = HeldEvents()
    assert held.take(5) is None, "nothing held"
    held.hold(_events(5, 6, 7))
    held.hold(_events(3, 4))  # held again after a range that read less: they come before what was held
    first = held.take(2)
    assert first is not None and first.seqs == [3, 4]
    rest = held.take(10)
    assert rest is not None and rest.seqs == [5, 6, 7]
    assert held.take(1) is None
    held.hold(RawEvents())
    assert held.take(1) is None, "an empty chunk holds nothing"


def test_drain_empties_what_is_held_and_replace_holds_exactly_what_it_is_given():
    held = HeldEvents()
    held.hold(_events(1, 2))
    assert held.drain(None).seqs == [1, 2] and held.take(1) is None
    held.replace(_events(9))
    taken = held.take(3)
    assert taken is not None and taken.seqs == [9]
    held.replace(_events(4))
    held.clear()
    assert held.take(1) is None
    held.replace(None)
    assert held.take(1) is None
