"""Unit tests of :mod:`eventhubs_spark.positions.event_positions`."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from eventhubs_spark.checkpoints import Checkpoint
from eventhubs_spark.errors import OptionError
from eventhubs_spark.positions.event_positions import (
    Earliest,
    EnqueuedTime,
    Latest,
    Offset,
    SequenceNumber,
    parse_position,
    parse_positions,
    selector,
)
from tests.unit.support.position_fidelity import FakePartition, fill

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=8,
)


_POSITION_KEYS = st.sampled_from(["offset", "seqNo", "enqueuedTime", "isInclusive", "Offset", "SEQNO", "other"])


_POSITION = st.dictionaries(_POSITION_KEYS, _JSON, max_size=3)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_POSITION.map(json.dumps), _JSON.map(json.dumps), st.text(max_size=30)))
def test_any_position_is_accepted_or_refused_naming_the_option(text):
    try:
        parse_position(text, "eventhubs.startingPosition")
    except OptionError as exc:
        assert "eventhubs.startingPosition" in str(exc)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.one_of(st.from_regex(r"[0-9]{1,3}", fullmatch=True), st.text(max_size=8)), _POSITION,
                       max_size=3).map(json.dumps))  # fmt: skip
@example('{"\u00b2": {"seqNo": 1}}')  # "²".isdigit() is True, int("²") fails
def test_any_per_partition_positions_are_accepted_or_refused_naming_the_option(text):
    try:
        parse_positions(text, "eventhubs.startingPositions")
    except OptionError as exc:
        assert "eventhubs.startingPositions" in str(exc)


def test_takeover_waits_for_the_hand_over_or_the_expiry():
    from eventhubs_spark.checkpoints.balancer import Tenure
    from eventhubs_spark.checkpoints.query_ownership import takeover_start
    from eventhubs_spark.positions.event_positions import Earliest, Offset, SequenceNumber

    stolen = Tenure(since=1000.0, taken_from="a")
    plain = Checkpoint("ns", "hub", "$default", "0", 41, "4100", last_modified_time=1001.0)
    marked = Checkpoint("ns", "hub", "$default", "0", 41, "4100", released_by="a", last_modified_time=1001.0)
    old_mark = Checkpoint("ns", "hub", "$default", "0", 41, "4100", released_by="a", last_modified_time=999.0)
    other = Checkpoint("ns", "hub", "$default", "0", 41, "4100", released_by="c", last_modified_time=1001.0)
    for checkpoint in (None, plain, old_mark, other):
        assert takeover_start(stolen, checkpoint, Earliest(), now=1010.0, expiry=60) is None
    assert takeover_start(stolen, marked, Earliest(), now=1001.0, expiry=60) == SequenceNumber(42)
    assert takeover_start(stolen, plain, Earliest(), now=1060.0, expiry=60) == SequenceNumber(42), "owner expired"
    unowned = Tenure(since=1000.0)
    assert takeover_start(unowned, None, Earliest(), now=1000.0, expiry=60) == Earliest()
    by_offset = Checkpoint("ns", "hub", "$default", "0", None, "4100")
    assert takeover_start(unowned, by_offset, Earliest(), now=1000.0, expiry=60) == Offset("4100", inclusive=False)


def test_equal_enqueued_times_are_skipped_together_as_the_java_client_did():
    partition = FakePartition()
    partition.times[6] = partition.times[5]
    position = parse_position(fill('{"enqueuedTime": "T5"}', partition.offsets, partition.times), "x")
    assert partition.first(*selector(position)) == 7


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"offset": "-1"}', Earliest()),
        ('{"offset": "@latest"}', Latest()),
        ('{"offset": "1234", "isInclusive": true}', Offset("1234", True)),
        ('{"seqNo": 42}', SequenceNumber(42, True)),
        ('{"seqNo": 0, "isInclusive": true}', SequenceNumber(0, True)),
        ('{"enqueuedTime": "2024-05-01T00:00:00Z"}', EnqueuedTime(dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc))),
        # the old connector wrote every field, unused ones null (seqNo -1)
        ('{"offset": null, "seqNo": 7, "enqueuedTime": null, "isInclusive": false}', SequenceNumber(7, False)),
        ('{"offset": "-1", "seqNo": -1, "enqueuedTime": null, "isInclusive": true}', Earliest()),
        ('{"Offset": "-1"}', Earliest()),
    ],
)
def test_positions(text, expected):
    assert parse_position(text, "eventhubs.startingPosition") == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not valid JSON"),
        ("[1]", "expected a JSON object"),
        ("{}", "set exactly one of"),
        ('{"offset": "-1", "seqNo": 4}', "set exactly one of"),
        ('{"seqNo": -5}', "seqNo must be a whole number"),
        ('{"seqNo": "ten"}', "seqNo must be a whole number"),
        ('{"offset": "abc"}', "offset must be"),
        ('{"enqueuedTime": "yesterday"}', "ISO-8601"),
        ('{"seqNo": 1, "isInclusive": "yes"}', "isInclusive must be"),
        ('{"sequence": 1}', "unknown field"),
    ],
)
def test_bad_positions_name_the_option_and_show_an_example(text, message):
    with pytest.raises(OptionError, match=message) as info:
        parse_position(text, "eventhubs.startingPosition")
    assert "eventhubs.startingPosition" in str(info.value)
    assert "{" in str(info.value)  # an example


def test_per_partition_positions_accept_old_connector_keys():
    parsed = parse_positions(
        '{"0": {"seqNo": 1}, "{\\"ehName\\": \\"hub\\", \\"partitionId\\": 3}": {"offset": "-1"}}', "o"
    )
    assert parsed == {"0": SequenceNumber(1), "3": Earliest()}
    with pytest.raises(OptionError, match="partition ids"):
        parse_positions('{"zero": {"seqNo": 1}}', "o")


@given(st.integers(min_value=0, max_value=2**62), st.booleans())
def test_sequence_positions_round_trip(seq, inclusive):
    pos = SequenceNumber(seq, inclusive)
    assert parse_position(pos.to_json(), "o") == pos
