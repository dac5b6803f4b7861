"""Unit tests of :mod:`eventhubs_spark.positions.geo_segments`."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventhubs_emulator import amqp
from eventhubs_spark.amqp import frame_reader, messages
from eventhubs_spark.amqp.management import _partition_info
from eventhubs_spark.checkpoints import Checkpoint
from eventhubs_spark.checkpoints.query_ownership import checkpoint_position
from eventhubs_spark.executor.partition_receiver import _first_gap
from eventhubs_spark.planning.offset_ranges import Range, plan_trigger, rate_limit, split_ranges
from eventhubs_spark.positions import geo_segments
from eventhubs_spark.positions.event_positions import Earliest, SequenceNumber
from eventhubs_spark.positions.partition_catalog import PartitionInfo
from tests.unit.support.lag import at, micros, tracker


def test_geo_replicated_positions_count_across_a_new_segment():
    lag, _ = tracker()
    committed = geo_segments.pack(1, 40)
    latest_info = PartitionInfo("0", geo_segments.pack(2, 0), geo_segments.pack(2, 44), "2:900", at(9), False)
    lag.read("0", committed, micros(at(5)))
    p = lag.observe({"0": committed}, {"0": latest_info}, True).partitions["0"]
    assert p.events == geo_segments.count(committed, geo_segments.pack(2, 45)) == 5
    assert p.seconds == 4.0
    assert p.to_json()["committed"] == "1:40" and p.to_json()["latest"] == "2:45"


@given(st.integers(-1, 1000), st.integers(0, geo_segments.SEQ_MASK))
def test_a_position_keeps_its_segment_and_sequence_number(segment, seq):
    position = geo_segments.pack(segment, seq)
    assert (geo_segments.segment_of(position), geo_segments.seq_of(position)) == (segment, seq)
    assert geo_segments.parse(geo_segments.show(position)) == position
    if segment < 0:
        assert position == seq and geo_segments.show(position) == str(seq)  # hubs without segments: unchanged


@given(st.tuples(st.integers(0, 50), st.integers(0, 10**6)), st.tuples(st.integers(0, 50), st.integers(0, 10**6)))
def test_positions_order_as_events_do(a, b):
    assert (geo_segments.pack(*a) < geo_segments.pack(*b)) == (a < b)


def test_a_sequence_number_past_what_a_position_holds_is_refused_in_words():
    with pytest.raises(ValueError, match="past what a position holds"):
        geo_segments.pack(2, 1 << geo_segments.SEQ_BITS)


def test_counting_and_advancing_across_a_promotion():
    old, new = geo_segments.pack(1, 30), geo_segments.pack(2, 40)
    assert geo_segments.count(geo_segments.pack(1, 10), old) == 20
    assert geo_segments.count(old, new) == 10  # the new segment's events up to 40, as if it began after 30
    assert geo_segments.count(new, old) == 0
    assert geo_segments.advance(geo_segments.pack(1, 10), 5, old) == geo_segments.pack(1, 15)
    assert geo_segments.advance(old, 5, new) == new  # start + 5 would be a place the partition never reaches
    assert geo_segments.advance(new, 5, old) == new and geo_segments.advance(old, 0, new) == old  # never backwards


def test_the_rate_limit_and_splits_never_plan_a_range_that_ends_in_a_finished_segment():
    start = {"0": geo_segments.pack(1, 30), "1": geo_segments.pack(2, 0)}
    latest = {"0": geo_segments.pack(2, 40), "1": geo_segments.pack(2, 100)}
    ends = rate_limit(start, latest, 20)
    assert ends["0"] == latest["0"]  # across the promotion: the whole way
    assert geo_segments.segment_of(ends["1"]) == 2 and geo_segments.count(start["1"], ends["1"]) >= 1
    plan = plan_trigger(start, latest, max_events=None)
    assert plan.end == latest and plan.backlog == 10 + 100
    across = Range("0", start["0"], latest["0"])
    assert split_ranges([across], 3) == [across]
    within = split_ranges([Range("1", geo_segments.pack(2, 0), geo_segments.pack(2, 9))], 3)
    assert [(geo_segments.show(r.start), geo_segments.show(r.end)) for r in within] == [("2:0", "2:3"), ("2:3", "2:6"),
                                                                               ("2:6", "2:9")]  # fmt: skip


def test_a_new_segment_is_no_gap_and_a_gap_in_one_segment_is():
    assert (
        _first_gap(
            [geo_segments.pack(1, 28), geo_segments.pack(1, 29), geo_segments.pack(2, 26), geo_segments.pack(2, 27)]
        )
        is None
    )
    assert _first_gap([geo_segments.pack(2, 1), geo_segments.pack(2, 3)]) == 1
    assert _first_gap([5, 6, 8]) == 2


def test_the_slow_path_finds_a_segment_after_the_sequence_number_and_as_an_int():
    sym = amqp.encode_value
    entries = [sym(amqp.Symbol("x-opt-sequence-number")) + b"\x81" + struct.pack(">q", 41),
               sym(amqp.Symbol("x-opt-sequence-number-epoch")) + b"\x71" + struct.pack(">i", 300)]  # fmt: skip
    message = b"\x00\x53\x72" + amqp.map_from_raw(entries) + b"\x00\x53\x75\xa0\x01x"
    assert messages.sequence_number(message, 0, len(message)) == geo_segments.pack(300, 41)
    assert frame_reader._position(message, 0, len(message)) == geo_segments.pack(300, 41)


def test_partition_properties_give_positions_with_their_segments():
    reply = {b"begin_sequence_number": 0, b"last_enqueued_sequence_number": 35, b"last_enqueued_offset": b"2:887",
             b"is_partition_empty": False, b"begin_replication_segment": 1,
             b"last_enqueued_replication_segment": 2}  # fmt: skip
    info = _partition_info("0", reply)
    assert (info.beginning_sequence_number, info.end) == (geo_segments.pack(1, 0), geo_segments.pack(2, 36))
    del reply[b"begin_replication_segment"], reply[b"last_enqueued_replication_segment"]
    info = _partition_info("0", reply)  # the segment from the offset alone
    assert (info.beginning_sequence_number, info.end) == (geo_segments.pack(2, 0), geo_segments.pack(2, 36))
    plain = _partition_info("0", {**reply, b"last_enqueued_offset": b"887"})
    assert (plain.beginning_sequence_number, plain.end) == (0, 36)


def test_a_geo_checkpoint_resumes_in_its_segment_and_the_sdk_filters_with_it():
    from azure.eventhub._utils import event_position_selector

    checkpoint = Checkpoint("ns", "hub", "$default", "0", 35, "2:887")
    assert checkpoint_position(checkpoint, Earliest()) == SequenceNumber(geo_segments.pack(2, 36))
    assert checkpoint_position(Checkpoint("ns", "hub", "$default", "0", 35, "4410"), Earliest()) == SequenceNumber(36)
    wrapped = geo_segments.sdk_position(geo_segments.pack(2, 36))
    assert event_position_selector(wrapped, True) == b"amqp.annotation.x-opt-sequence-number >= '2:36'"
    assert (
        event_position_selector(geo_segments.sdk_position(36), False) == b"amqp.annotation.x-opt-sequence-number > '36'"
    )
