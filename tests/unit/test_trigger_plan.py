"""The decision inside latestOffset, rule by rule, with the clock passed in (issue 17, item 1)."""

from __future__ import annotations

import pytest

from eventhubs_spark.planning.offset_ranges import plan_trigger

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

    quiet = [Range(str(p), 10, 25) for p in range(32)]  # 15 events per partition
    tasks = pack_ranges(quiet, 100)
    assert [sum(r.size for r in t) for t in tasks] == [105, 105, 105, 105, 60]
    assert [r for t in tasks for r in t] == sorted(quiet, key=lambda r: int(r.partition)), "each range once, in order"
    busy = [Range(str(p), 0, 1000) for p in range(4)] + [Range("7", 0, 3)]
    assert pack_ranges(busy, 100) == [[busy[0]], [busy[1]], [busy[2]], [busy[3]], [busy[4]]]
    assert pack_ranges(quiet, 0) == [[r] for r in quiet], "0: one task per range"
    assert pack_ranges([], 100) == []
    split = [Range("0", s, s + 250) for s in range(0, 1000, 250)]  # maxEventsPerPartition=300 split these
    assert pack_ranges(split, 500, 300) == [[r] for r in split], "what maxEventsPerPartition split stays split"
