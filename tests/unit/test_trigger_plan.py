"""The decision inside latestOffset, rule by rule, with the clock passed in (issue 17, item 1)."""

from __future__ import annotations

import pytest

from eventhubs_spark.offsets import plan_trigger

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
