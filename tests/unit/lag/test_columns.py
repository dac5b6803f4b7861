"""The array paths of planning (issue 64) give what the loops they replaced give, trigger after trigger.

:class:`LagTracker` works a trigger's lag figures out over arrays where every position is a plain sequence number,
and one partition after another otherwise (a geo-replicated hub); the rate limit likewise. Here one tracker takes
the array path and another, forced onto the loop, is the oracle, over random sequences of triggers: properties
that move or stay the same objects, tasks that report reads, planned ends, partitions that come and go, clocks
that pass stall limits.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventhubs_spark.lag import LagTracker
from eventhubs_spark.lag import tracker as lag_module
from eventhubs_spark.planning import offset_ranges
from eventhubs_spark.planning.executor_ends import KnownEnds
from eventhubs_spark.planning.offset_ranges import _rate_limit_each, _rate_limit_plain, plan_trigger
from eventhubs_spark.positions.partition_catalog import PartitionInfo, quick_info

T0 = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.timezone.utc)


@pytest.fixture(autouse=True)
def _arrays_at_any_size(monkeypatch):
    """Planning takes the arrays from ARRAYS_FROM partitions; these tests compare the paths on a few."""
    monkeypatch.setattr(offset_ranges, "ARRAYS_FROM", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _loop_only(tracker: LagTracker) -> LagTracker:
    """A tracker that never takes the array path: the oracle."""
    tracker._observe_columns = lambda *args, **kwargs: None  # type: ignore[method-assign]
    return tracker


def _info(pid: str, begin: int, end: int, when: dt.datetime | None) -> PartitionInfo:
    return PartitionInfo(pid, begin, end - 1, str(end), when, end <= begin)


step = st.fixed_dictionaries(
    {
        "grow": st.lists(st.integers(0, 40), min_size=6, max_size=6),  # events enqueued per partition
        "read": st.lists(st.integers(0, 50), min_size=6, max_size=6),  # events read per partition
        "report": st.lists(st.booleans(), min_size=6, max_size=6),  # a task said it read its range
        "skew": st.lists(st.integers(-3_000_000, 3_000_000), min_size=6, max_size=6),  # µs, the read event's time
        "present": st.integers(3, 6),  # partitions this trigger plans (ownership mode and added ones change it)
        "no_time": st.booleans(),  # a partition's properties without a last enqueued time
        "same_objects": st.booleans(),  # the properties handed over again (Trigger.AvailableNow)
        "planned": st.booleans(),
        "seconds": st.sampled_from([0.0, 0.5, 3.0, 400.0]),
        "cause": st.booleans(),
    }
)


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=14), stalled_batches=st.integers(1, 4))
def test_the_array_path_gives_the_figures_stalls_and_reads_the_loop_gives(steps, stalled_batches):
    clocks = (Clock(), Clock())
    columns = LagTracker("hub", stalled_batches, 300.0, clock=clocks[0], wall=lambda: T0)
    loop = _loop_only(LagTracker("hub", stalled_batches, 300.0, clock=clocks[1], wall=lambda: T0))
    ends = [10] * 6
    read_to = [0] * 6
    infos: dict[str, PartitionInfo] = {}
    for s in steps:
        for clock in clocks:
            clock.now += s["seconds"]
        if not s["same_objects"] or not infos:
            ends = [e + g for e, g in zip(ends, s["grow"], strict=True)]
            times = [T0 + dt.timedelta(seconds=e) for e in ends]
            if s["no_time"]:
                times[1] = None
            infos = {str(i): _info(str(i), 0, ends[i], times[i]) for i in range(6)}
        committed = {str(i): read_to[i] for i in range(s["present"])}
        cause = (lambda p: f"why {p}") if s["cause"] else (lambda _p: None)
        got = columns.observe(committed, infos, s["planned"], cause)
        want = loop.observe(committed, infos, s["planned"], cause)
        assert got._partitions is None, "the array path was not taken"
        assert got.progress() == want.progress()
        assert got.progress(2) == want.progress(2)  # eventhubs.lag.progressPartitions: the same ones picked
        assert got.summary() == want.summary()
        assert got.partitions == want.partitions
        assert [v.partition for v in columns.newly_stalled(got)] == [v.partition for v in loop.newly_stalled(want)]
        end = {p: min(read_to[int(p)] + s["read"][int(p)], infos[p].end) for p in committed}
        columns.planned(end, infos)
        loop.planned(end, infos)
        for p, e in end.items():
            i = int(p)
            if s["report"][i] and e > read_to[i]:
                micros = lag_module.exact_micros(T0 + dt.timedelta(seconds=e - 1)) + s["skew"][i]
                columns.read(p, e, micros)
                loop.read(p, e, micros)
            read_to[i] = e
        assert columns.known_reads() == loop.known_reads()
    # a copy for the executors carries the stall state, not the arrays
    state = columns.__getstate__()  # what pickle takes
    assert state["_infos_columns"] is None and state["_moving_columns"] is None and "_lock" not in state
    assert {p: vars(m) for p, m in state["_moving"].items()} == {p: vars(m) for p, m in loop._moving.items()}
    assert columns._moving_columns is not None  # the driver's own tracker keeps its arrays


def test_reads_said_after_a_trigger_change_the_next_triggers_figures_not_that_ones():
    """Tasks' reads go into the arrays as they are said (no rebuild a trigger); a trigger's report keeps what it
    found, while the reads of the batch it planned arrive."""
    tracker = LagTracker("hub", 5, 300.0, clock=Clock(), wall=lambda: T0)
    infos = {p: _info(p, 0, 10, T0 + dt.timedelta(seconds=9)) for p in ("0", "1", "2")}
    tracker.read("2", 4, lag_module.exact_micros(T0 + dt.timedelta(seconds=1)))
    before = tracker.observe({"0": 4, "1": 4, "2": 4}, infos, False)
    arrays = tracker._read_columns
    assert before.progress()["secondsBehindLatest"] == {"0": None, "1": None, "2": 8.0}
    tracker.read("0", 4, lag_module.exact_micros(T0 + dt.timedelta(seconds=3)))
    tracker.read("1", 7, lag_module.exact_micros(T0 + dt.timedelta(seconds=6)))
    tracker.read("2", 9, lag_module.exact_micros(T0 + dt.timedelta(seconds=8)))
    # its per-partition figures are made when asked (a lag file, the INFO line): from what the trigger found
    assert before.partition("2").last_read == T0 + dt.timedelta(seconds=1), "a report changed with later reads"
    after = tracker.observe({"0": 4, "1": 7, "2": 9}, infos, True)
    assert tracker._read_columns is arrays, "the arrays were made again for reads of the same partitions"
    assert after.progress()["secondsBehindLatest"] == {"0": 6.0, "1": 3.0, "2": 1.0}
    tracker.read("3", 2, lag_module.exact_micros(T0))  # a partition the arrays do not hold: made again
    more = dict(infos, **{"3": _info("3", 0, 10, T0 + dt.timedelta(seconds=9))})
    again = tracker.observe({"0": 4, "1": 7, "2": 9, "3": 2}, more, True)
    assert again.progress()["secondsBehindLatest"] == {"0": 6.0, "1": 3.0, "2": 1.0, "3": 9.0}


def test_a_geo_replicated_hub_keeps_the_loop_and_the_state_passes_between_the_paths():
    clock = Clock()
    tracker = LagTracker("hub", 2, 300.0, clock=clock, wall=lambda: T0)
    plain = {"0": _info("0", 0, 10, T0), "1": _info("1", 0, 10, T0)}
    assert tracker.observe({"0": 5, "1": 5}, plain, True)._partitions is None
    assert tracker.observe({"0": 5, "1": 5}, plain, True)._partitions is None  # one batch without moving
    tracker.read("0", 5, lag_module.exact_micros(T0) - 2_000_000)  # a task's read, said before the loop's trigger
    # a partition without properties this trigger: the loop, which goes on counting the same stall
    report = tracker.observe({"0": 5, "1": 5, "2": 0}, plain, True)
    assert report._partitions is not None and report.partitions["0"].stalled
    assert [v.partition for v in tracker.newly_stalled(report)] == ["0", "1"]
    back = tracker.observe({"0": 5, "1": 5}, plain, True)  # the arrays again, the stalls said once
    assert back._partitions is None and sorted(back.stalled()) == ["0", "1"]
    assert back.partition("0").seconds == 2.0 and back.partition("1").seconds is None  # the read the loop saw
    assert tracker.newly_stalled(back) == []


@settings(max_examples=300, deadline=None)
@given(
    backlog=st.lists(st.integers(0, 5_000), min_size=1, max_size=40),
    base=st.integers(0, 10**9),
    max_events=st.one_of(st.none(), st.integers(1, 20_000)),
    shuffle=st.randoms(use_true_random=False),
)
def test_the_array_rate_limit_splits_as_the_loop_does(backlog, base, max_events, shuffle):
    keys = [str(i) for i in range(len(backlog))]
    shuffle.shuffle(keys)
    starts = [base + i for i in range(len(keys))]
    ends = [s + b for s, b in zip(starts, backlog, strict=True)]
    got = _rate_limit_plain(keys, np.array(starts, np.int64), np.array(ends, np.int64), max_events)
    want = _rate_limit_each(keys, starts, ends, max_events)
    if got is not None:  # None: the one-event minimum overshoots, which the loop handles
        assert got.tolist() == want
    begin = dict(zip(keys, starts, strict=True))
    latest = dict(zip(keys, ends, strict=True))
    plan = plan_trigger(begin, latest, max_events=max_events)
    assert list(plan.end.values()) == want and list(plan.end) == keys
    assert plan.planned == sum(want) - sum(starts) and plan.backlog == sum(backlog)


@settings(max_examples=200, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(0, 10**6), st.integers(-20, 500)), min_size=1, max_size=30),
    cap=st.lists(st.integers(-30, 30), min_size=30, max_size=30),
    max_events=st.one_of(st.none(), st.integers(1, 5_000)),
)
def test_a_target_that_is_the_latest_ends_plans_as_a_copy_of_them_and_the_loop_do(pairs, cap, max_events):
    """A Trigger.AvailableNow run hands its ends over as both ``latest`` and ``target`` (the same object): the
    array path then skips the cap, and copies ``latest`` where nothing changed an end; a start past its end, or a
    target below an end, must still change them as the loop does."""
    keys = [str(i) for i in range(len(pairs))]
    begin = {k: s for k, (s, _) in zip(keys, pairs, strict=True)}
    latest = {k: s + n for k, (s, n) in zip(keys, pairs, strict=True)}
    target = {k: latest[k] + c for k, c in zip(keys, cap, strict=False)}  # cap: as many as the most partitions

    def both(target_of: dict[str, int] | None) -> tuple[object, object]:
        arrays = plan_trigger(begin, latest, max_events=max_events, target=target_of, min_events=10**9)
        offset_ranges.ARRAYS_FROM = 10**6  # the autouse fixture puts it back after the test
        try:
            loop = plan_trigger(begin, latest, max_events=max_events, target=target_of, min_events=10**9)
        finally:
            offset_ranges.ARRAYS_FROM = 1
        return arrays, loop

    same, same_loop = both(latest)
    assert same == same_loop == both(dict(latest))[0]
    assert not same.skipped  # a run with a target is never skipped for minEventsPerTrigger
    assert same.latest is not latest  # the plan's copy: the run's ends stay as they are
    capped, capped_loop = both(target)
    assert capped == capped_loop


def test_known_ends_make_the_properties_the_constructor_makes():
    made = quick_info("3", 5, 41, "4100", T0, False)
    assert made == PartitionInfo("3", 5, 41, "4100", T0, False) and made.end == 42
    assert hash(made) == hash(PartitionInfo("3", 5, 41, "4100", T0, False))
    known = KnownEnds(clock=lambda: 0.0)
    before = {"0": _info("0", 0, 10, T0)}
    known.asked_all(before)
    from eventhubs_spark.interprocess.partition_ends import Vouch

    ms = lag_module.exact_micros(T0) // 1000
    after = known.infos(["0"], {"0": Vouch(15, "1500", ms)}, lambda ids: {})
    assert after["0"] == PartitionInfo("0", 0, 14, "1500", T0, False)


def test_a_lag_file_is_written_again_when_the_array_figures_change_and_not_otherwise():
    clock = Clock()
    tracker = LagTracker("hub", clock=clock, wall=lambda: T0)
    infos = {"0": _info("0", 0, 10, T0), "1": _info("1", 0, 10, T0)}
    first = tracker.observe({"0": 5, "1": 10}, infos, False).figures()
    assert tracker.observe({"0": 5, "1": 10}, infos, False).figures() == first
    assert tracker.observe({"0": 6, "1": 10}, infos, False).figures() != first


def test_below_the_threshold_planning_keeps_the_loops(monkeypatch):
    monkeypatch.setattr(offset_ranges, "ARRAYS_FROM", 4)
    tracker = LagTracker("hub", clock=Clock(), wall=lambda: T0)
    infos = {str(i): _info(str(i), 0, 10, T0) for i in range(4)}
    assert tracker.observe({str(i): 5 for i in range(3)}, infos, False)._partitions is not None
    assert tracker.observe({str(i): 5 for i in range(4)}, infos, False)._partitions is None
