"""Unit tests of :mod:`eventhubs_spark.planning.partition_placement`."""

from __future__ import annotations

import random

import pytest

from eventhubs_spark.planning.partition_placement import homes, loads

PARTS = [str(i) for i in range(16)]


def test_the_same_inputs_give_the_same_homes_in_any_order():
    executors = ["exec-a", "exec-b", "exec-c"]
    first = homes("telemetry", PARTS, executors)
    assert first == homes("telemetry", list(reversed(PARTS)), list(reversed(executors)))
    assert first == homes("TELEMETRY", PARTS, executors), "hub names are case-insensitive, as the service's"
    assert set(first) == set(PARTS) and set(first.values()) <= set(executors)
    assert first != homes("orders", PARTS, executors), "another hub spreads differently"


@pytest.mark.parametrize(
    ("partitions", "executors", "sizes"),
    [
        (16, 3, [6, 5, 5]),
        (16, 4, [4, 4, 4, 4]),
        (32, 3, [11, 11, 10]),
        (2, 3, [1, 1, 0]),
        (1, 1, [1]),
        (100, 7, [15, 15, 14, 14, 14, 14, 14]),
    ],
)
def test_no_executor_is_home_to_more_than_one_partition_above_another(partitions, executors, sizes):
    placement = homes("hub", [str(i) for i in range(partitions)], [f"e{i}" for i in range(executors)])
    counts = loads(placement)
    assert sorted([counts.get(f"e{i}", 0) for i in range(executors)], reverse=True) == sizes


def test_no_executors_no_homes():
    assert homes("hub", PARTS, []) == {}
    assert homes("hub", [], ["e1"]) == {}


def _moved(a: dict[str, str], b: dict[str, str]) -> int:
    return sum(1 for p in a if a[p] != b[p])


@pytest.mark.parametrize(("partitions", "executors"), [(16, 3), (32, 4), (100, 8)])
def test_an_executor_that_joins_or_leaves_moves_few_partitions(partitions, executors):
    """At the least, a leaving executor's own partitions move (P/E), and a joining one takes its share
    (P/(E+1)); averaged over many hubs, the placement moves at most 1.6 times that, and the partitions
    whose home stays alive mostly keep it."""
    rng = random.Random(7)
    parts = [str(i) for i in range(partitions)]
    leave = join = 0
    trials = 200
    for trial in range(trials):
        live = [
            f"10.0.{rng.randrange(256)}.{rng.randrange(256)}:{rng.randrange(40000, 41000)}" for _ in range(executors)
        ]
        before = homes(f"hub{trial}", parts, live)
        gone = live[trial % executors]
        after = homes(f"hub{trial}", parts, [e for e in live if e != gone])
        assert all(e != gone for e in after.values())
        leave += _moved(before, after)
        join += _moved(before, homes(f"hub{trial}", parts, [*live, "newcomer"]))
    assert leave / trials <= 1.6 * partitions / executors, leave / trials
    assert join / trials <= 1.6 * partitions / (executors + 1), join / trials
