"""Unit tests of :mod:`eventhubs_emulator.broker`."""

from __future__ import annotations

import pytest

from eventhubs_emulator.broker import Broker, parse_message
from tests.unit.support.emulator import message


def test_append_assigns_sequence_numbers_offsets_and_times():
    broker = Broker()
    hub = broker.add_hub("h", 2)
    p = hub.partitions[0]
    p.append([parse_message(message(b"a")), parse_message(message(b"bb"))], None)
    assert [e.sequence_number for e in p.events] == [0, 1]
    assert p.events[0].offset == 0 and p.events[1].offset == p.events[0].size
    assert p.events[0].enqueued_ms <= p.events[1].enqueued_ms
    props = p.properties()
    assert props["last_enqueued_sequence_number"] == 1
    assert props["last_enqueued_offset"] == str(p.events[1].offset)
    assert props["is_partition_empty"] is False


def test_routing_by_key_is_stable_and_round_robin_rotates():
    hub = Broker().add_hub("h", 8)
    assert {hub.route("device-7").id for _ in range(20)} == {hub.route("device-7").id}
    assert [hub.route(None).id for _ in range(9)] == ["0", "1", "2", "3", "4", "5", "6", "7", "0"]


def test_trim_retention_and_position_lookups():
    broker = Broker()
    hub = broker.add_hub("h", 1, retention_s=10)
    p = hub.partitions[0]
    for i in range(5):
        p.append([parse_message(message(bytes([i])))], None)
    assert p.trim_before(2) == 2
    assert p.beginning_sequence_number == 2
    assert p.index_of_sequence(0) == 0 and p.index_of_sequence(3) == 1 and p.index_of_sequence(99) == 3
    off = p.events[1].offset
    assert p.index_of_offset(off, inclusive=True) == 1
    assert p.index_of_offset(off, inclusive=False) == 2
    assert broker.apply_retention(now_ms=p.events[-1].enqueued_ms + 20_000) == 3
    props = p.properties()
    assert props["is_partition_empty"] is True
    assert props["begin_sequence_number"] == 5 and props["last_enqueued_sequence_number"] == 4


def test_bad_hubs_are_refused():
    broker = Broker()
    broker.add_hub("a", 1)
    with pytest.raises(ValueError, match="already exists"):
        broker.add_hub("A", 1)
    with pytest.raises(ValueError, match="between 1 and 1024"):
        broker.add_hub("b", 0)
