"""Unit tests of :mod:`eventhubs_spark.planning.offset_ranges`."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from eventhubs_spark.errors import OptionError
from eventhubs_spark.planning.offset_ranges import Range, SourceOffset, plan_trigger, rate_limit, split_ranges
from eventhubs_spark.positions import geo_segments


def test_offset_json_is_the_old_connector_shape():
    offset = SourceOffset("hub", {"10": 5, "2": 7})
    assert offset.to_json() == {"hub": {"2": 7, "10": 5}}
    assert SourceOffset.from_json('{"hub": {"0": 12, "1": 3}}', "hub").positions == {"0": 12, "1": 3}
    assert SourceOffset.from_json({"HUB": {"0": 1}}, "hub").positions == {"0": 1}
    with pytest.raises(OptionError, match="new checkpoint location"):
        SourceOffset.from_json({"other": {"0": 1}}, "hub")
    with pytest.raises(OptionError):
        SourceOffset.from_json("[", "hub")


def test_rate_limit_is_proportional_to_backlog_and_starves_nobody():
    start = {"0": 0, "1": 0, "2": 0, "3": 10}
    latest = {"0": 900, "1": 90, "2": 10, "3": 10}
    end = rate_limit(start, latest, 100)
    taken = {p: end[p] - start[p] for p in end}
    assert sum(taken.values()) == 100
    assert taken["0"] > taken["1"] > 0 and taken["2"] >= 1 and taken["3"] == 0
    assert rate_limit(start, latest, None) == latest
    assert rate_limit(start, latest, 10_000) == latest


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 5000)), min_size=1, max_size=40),
    st.integers(1, 20_000),
)
@example([(0, 1), (0, 1), (0, 4)], 3)  # the one-event minimum once overshot a budget it could meet
def test_rate_limit_properties(pairs, budget):
    start = {str(i): s for i, (s, _) in enumerate(pairs)}
    latest = {str(i): s + n for i, (s, n) in enumerate(pairs)}
    end = rate_limit(start, latest, budget)
    with_data = sum(1 for s, n in pairs if n)
    total = sum(end[p] - start[p] for p in end)
    for p in end:
        assert start[p] <= end[p] <= latest[p]
        if latest[p] > start[p]:
            assert end[p] > start[p]  # at least one event for every partition with data
    assert total <= max(budget, with_data)
    assert total == min(budget, sum(n for _, n in pairs)) or total == with_data


def _shares(start: dict[str, int], latest: dict[str, int], budget: int) -> dict[str, int]:
    """The rule rate_limit follows, written plainly in exact arithmetic: each partition with a backlog gets its
    share's whole part (at least one event), the largest shares give back what the minimum overshot, and what is
    left goes one event each by the share's fraction, largest first, then by partition number."""
    backlog = {p: max(0, latest[p] - start[p]) for p in latest}
    total = sum(backlog.values())
    if total <= budget:
        return {p: max(start[p], latest[p]) for p in latest}
    exact = {p: Fraction(budget * n, total) for p, n in backlog.items()}
    quota = {p: min(n, max(1, math.floor(exact[p]))) if n else 0 for p, n in backlog.items()}
    with_data = [p for p in backlog if backlog[p]]
    for _ in range(sum(quota.values()) - max(budget, len(with_data))):
        quota[min((p for p in quota if quota[p] > 1), key=lambda p: (-quota[p], int(p)))] -= 1
    leftover = budget - sum(quota.values())
    for p in sorted(with_data, key=lambda p: (-(exact[p] - math.floor(exact[p])), int(p))):
        if leftover > 0 and quota[p] < backlog[p]:
            quota[p] += 1
            leftover -= 1
    return {p: start[p] + quota[p] for p in latest}


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(-3, 5000)), min_size=1, max_size=60),
    st.integers(1, 20_000),
    st.randoms(use_true_random=False),
)
@example([(0, 1), (0, 1), (0, 4)], 3, random.Random(0))
@example([(0, 50)] * 1024, 12_800, random.Random(0))  # a Dedicated hub's AvailableNow batch: every share x.5
def test_rate_limit_splits_as_the_plain_rule_says(pairs, budget, shuffle):
    """The list-based planning of rate_limit and plan_trigger gives what the plain rule does, whatever the
    order the partitions come in (a start past the end counts as no backlog)."""
    ids = [str(i) for i in range(len(pairs))]
    shuffle.shuffle(ids)
    start = {p: s for p, (s, _) in zip(ids, pairs, strict=True)}
    latest = {p: s + n for p, (s, n) in zip(ids, pairs, strict=True)}
    expected = _shares(start, latest, budget)
    assert rate_limit(start, latest, budget) == expected
    plan = plan_trigger(start, latest, max_events=budget)
    assert plan.end == expected
    assert plan.latest == {p: max(start[p], latest[p]) for p in latest}
    assert plan.backlog == sum(max(0, latest[p] - start[p]) for p in latest)


def test_split_ranges():
    pieces = split_ranges([Range("0", 0, 10), Range("1", 5, 6)], 4)
    assert [(r.partition, r.start, r.end) for r in pieces] == [("0", 0, 4), ("0", 4, 8), ("0", 8, 10), ("1", 5, 6)]
    assert split_ranges([Range("0", 0, 10)], None) == [Range("0", 0, 10)]


def test_the_spark_offset_shows_segments_and_reads_back_both_forms():
    offset = SourceOffset("telemetry", {"0": geo_segments.pack(2, 36), "1": 7})
    doc = offset.to_json()
    assert doc == {"telemetry": {"0": "2:36", "1": 7}}
    assert SourceOffset.from_json(doc, "telemetry") == offset
    with pytest.raises(OptionError, match="geo-replicated hub"):
        SourceOffset.from_json({"telemetry": {"0": "two:36"}}, "telemetry")


BEGIN = {"0": 100, "1": 100}


@pytest.mark.parametrize(
    ("case", "latest", "kwargs", "end", "skipped"),
    [
        ("no limit reads everything", {"0": 400, "1": 150}, {}, {"0": 400, "1": 150}, False),
        (
            "the admission limit is split by backlog",
            {"0": 400, "1": 200},
            {"max_events": 100},
            {"0": 175, "1": 125},
            False,
        ),
        ("nothing new: an empty batch", {"0": 100, "1": 100}, {"max_events": 10}, BEGIN, False),
        (
            "AvailableNow caps each partition at its end when the run began",
            {"0": 900, "1": 900},
            {"target": {"0": 300, "1": 120}},
            {"0": 300, "1": 120},
            False,
        ),
        (
            "a partition the run did not know stays where it is",
            {"0": 900, "1": 900},
            {"target": {"0": 300}},
            {"0": 300, "1": 100},
            False,
        ),
        (
            "latest never lies behind begin",
            {"0": 50, "1": 120},
            {},
            {"0": 100, "1": 120},
            False,
        ),
        (
            "below minEventsPerTrigger the trigger is skipped",
            {"0": 110, "1": 105},
            {"min_events": 50, "now": 10.0, "last_batch_at": 0.0, "max_trigger_delay": 60.0},
            BEGIN,
            True,
        ),
        (
            "until maxTriggerDelay has passed since the last batch",
            {"0": 110, "1": 105},
            {"min_events": 50, "now": 61.0, "last_batch_at": 0.0, "max_trigger_delay": 60.0},
            {"0": 110, "1": 105},
            False,
        ),
        (
            "enough events: no skip",
            {"0": 140, "1": 120},
            {"min_events": 50, "now": 1.0, "last_batch_at": 0.0},
            {"0": 140, "1": 120},
            False,
        ),
        (
            "no events at all is an empty batch, not a skip",
            {"0": 100, "1": 100},
            {"min_events": 50, "now": 1.0, "last_batch_at": 0.0},
            BEGIN,
            False,
        ),
        (
            "AvailableNow never waits for minEventsPerTrigger",
            {"0": 110, "1": 100},
            {"min_events": 50, "target": {"0": 110, "1": 100}, "now": 1.0, "last_batch_at": 0.0},
            {"0": 110, "1": 100},
            False,
        ),
    ],
)
def test_trigger_rules(case, latest, kwargs, end, skipped):
    plan = plan_trigger(BEGIN, latest, **{"max_events": None, **kwargs})
    assert (plan.end, plan.skipped) == (end, skipped), case
    assert all(plan.latest[p] >= BEGIN[p] for p in plan.latest), "latest is never behind begin"
    assert all(BEGIN[p] <= plan.end[p] <= plan.latest[p] for p in plan.end), "a range stays within what exists"


def test_small_ranges_share_tasks_and_large_ones_keep_their_own():
    from eventhubs_spark.planning.offset_ranges import Range, pack_ranges

    quiet = [Range(str(p), 10, 25) for p in range(32)]  # 15 events per partition, 480 in all
    tasks = pack_ranges(quiet, 100)
    assert [sum(r.size for r in t) for t in tasks] == [120, 120, 120, 120], "as few as hold 100 each, evened out"
    assert [r for t in tasks for r in t] == sorted(quiet, key=lambda r: int(r.partition)), "each range once, in order"
    busy = [Range(str(p), 0, 1000) for p in range(4)] + [Range("7", 0, 3)]
    assert pack_ranges(busy, 100) == [[busy[0]], [busy[1]], [busy[2]], [busy[3]], [busy[4]]]
    assert pack_ranges(quiet, 0) == [[r] for r in quiet], "0: one task per range"
    assert pack_ranges([], 100) == []
    assert pack_ranges(quiet[:3], 1000) == [quiet[:3]], "fewer events than a task's worth: one task"
    split = [Range("0", s, s + 250) for s in range(0, 1000, 250)]  # maxEventsPerPartition=300 split these
    assert pack_ranges(split, 500, 300) == [[r] for r in split], "what maxEventsPerPartition split stays split"


def test_a_big_quiet_hub_shares_few_tasks_at_most_max_partitions_per_task_each():
    """1,024 partitions with a dozen events each (a Dedicated hub's quiet micro-batch) share as few tasks as hold a
    task's worth of events, never more than eventhubs.maxPartitionsPerTask in one, each range once and in order."""
    from eventhubs_spark.planning.offset_ranges import Range, pack_ranges

    quiet = [Range(str(p), 100, 112) for p in range(1024)]  # 12,288 events
    assert [len(t) for t in pack_ranges(quiet, 5_000)] == [512, 512]
    tasks = pack_ranges(quiet, 5_000, None, 256)
    assert [len(t) for t in tasks] == [256] * 4, "the partitions bound comes first"
    assert [r for t in tasks for r in t] == quiet
    assert pack_ranges(quiet[:3], 500, None, 1) == [[r] for r in quiet[:3]]


def test_small_ranges_share_tasks_of_one_home_at_least_one_a_home():
    """Issue 87: given each partition's home, small ranges share tasks only with ranges of the same home, and every
    home with small ranges gets a task (a quiet batch runs on every home); a partition without a home is packed
    with the others without one."""
    from eventhubs_spark.planning.offset_ranges import Range, pack_ranges

    quiet = [Range(str(p), 0, 10) for p in range(9)]
    home_of = {str(p): "ab"[p % 2] for p in range(8)}  # partition 8: no home
    tasks = pack_ranges(quiet, 5_000, home_of=home_of)
    assert [[r.partition for r in t] for t in tasks] == [["8"], ["0", "2", "4", "6"], ["1", "3", "5", "7"]]
    busy = [Range("0", 0, 6_000), *quiet[1:4]]
    assert [[r.partition for r in t] for t in pack_ranges(busy, 5_000, home_of=home_of)] == [["0"], ["2"], ["1", "3"]]


@given(
    sizes=st.lists(st.integers(0, 3_000), min_size=0, max_size=200),
    min_events=st.integers(0, 5_000),
    max_events=st.none() | st.integers(1, 10_000),
    max_ranges=st.none() | st.integers(1, 64),
    homes=st.integers(0, 5),
)
def test_any_packing_reads_each_range_once_in_order_within_its_bounds(sizes, min_events, max_events, max_ranges,
                                                                      homes):  # fmt: skip
    """Whatever the ranges and their homes: each once; a task's ranges in partition order and of one home; a range of
    min_events or more alone; a shared task within maxEventsPerPartition (unless one range alone passes it) and
    maxPartitionsPerTask; and the same plan every time for the same ranges (a batch run again is packed as its first
    run was)."""
    from eventhubs_spark.planning.offset_ranges import Range, pack_ranges

    ranges = [Range(str(p), 0, n) for p, n in enumerate(sizes)]
    home_of = {str(p): str(p * 7 % homes) for p in range(len(sizes))} if homes else None
    tasks = pack_ranges(list(reversed(ranges)), min_events, max_events, max_ranges, home_of)
    if home_of is not None:
        assert all(len({home_of[r.partition] for r in t}) == 1 for t in tasks)
    assert sorted((r for t in tasks for r in t), key=lambda r: int(r.partition)) == ranges
    assert all(t and [int(r.partition) for r in t] == sorted(int(r.partition) for r in t) for t in tasks)
    for t in tasks:
        if len(t) > 1:
            assert min_events > 0 and all(r.size < min_events for r in t)
            assert max_events is None or sum(r.size for r in t) <= max_events
            assert max_ranges is None or len(t) <= max_ranges
    assert pack_ranges(ranges, min_events, max_events, max_ranges, home_of) == tasks
