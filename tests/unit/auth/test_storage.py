"""Unit tests of :mod:`eventhubs_spark.auth.storage`."""

from __future__ import annotations

import time

from tests.unit.support.lag import at, info, micros, tracker


def test_events_behind_are_exact_and_seconds_come_from_the_last_event_an_executor_read():
    lag, _ = tracker()
    lag.read("0", 70, micros(at(7)))  # a task read [.., 70): event 69 was enqueued at +7 s
    report = lag.observe({"0": 70, "1": 5, "2": 0}, {"0": info("0", 100, at(10)), "1": info("1", 5, at(3)),
                                                     "2": info("2", 0, None)}, batch_planned=True)  # fmt: skip
    p = report.partitions
    assert (p["0"].events, p["0"].seconds) == (30, 3.0)
    assert (p["1"].events, p["1"].seconds) == (0, 0.0)  # read to the end: nothing behind, in events or time
    assert (p["2"].events, p["2"].seconds) == (0, 0.0)  # empty: lag 0, not an error
    assert report.summary() == {
        "avgOffsetsBehindLatest": 10.0, "maxOffsetsBehindLatest": 30, "minOffsetsBehindLatest": 0,
        "avgSecondsBehindLatest": 1.0, "maxSecondsBehindLatest": 3.0, "minSecondsBehindLatest": 0.0,
        "stalledPartitions": [],
    }  # fmt: skip


def test_seconds_are_unknown_until_a_read_ends_where_the_query_stands_then_exact():
    lag, _ = tracker()
    infos = {"0": info("0", 100, at(10))}
    unknown = lag.observe({"0": 40, "1": 5}, {**infos, "1": info("1", 5, at(3))}, True)
    assert unknown.partitions["0"].seconds is None  # restarted from a checkpoint: no read seen yet
    assert unknown.summary()["maxSecondsBehindLatest"] is None  # not 0 s: partition 1's figure alone says too little
    lag.read("0", 30, micros(at(1)))  # an older range's report says nothing of position 40
    assert lag.observe({"0": 40}, infos, True).partitions["0"].seconds is None
    lag.read("0", 40, micros(at(4)))
    assert lag.observe({"0": 40}, infos, True).partitions["0"].seconds == 6.0
    lag.read("0", 30, micros(at(1)))  # a late report of an older range does not take its place
    assert lag.observe({"0": 40}, infos, True).partitions["0"].seconds == 6.0


def test_a_batch_planned_to_a_partitions_end_knows_its_last_events_time_from_the_properties():
    lag, _ = tracker()
    lag.planned({"0": 100, "1": 50}, {"0": info("0", 100, at(10)), "1": info("1", 80, at(12))})
    after = lag.observe({"0": 100, "1": 50}, {"0": info("0", 130, at(25)), "1": info("1", 80, at(12))}, True)
    assert (after.partitions["0"].events, after.partitions["0"].seconds) == (30, 15.0)
    assert after.partitions["1"].seconds is None  # planned short of its end: the event's time comes from a task


def test_a_partition_that_does_not_move_while_events_wait_is_stalled_after_n_batches_or_m_seconds():
    lag, clock = tracker(stalled_batches=3, stalled_after=60.0)
    infos = {"0": info("0", 100, at(10)), "1": info("1", 100, at(10))}

    def cause(p: str) -> str | None:
        return "no home executor" if p == "0" else None

    for _ in range(3):  # partition 1 moves every batch; 0 stays
        clock.now += 1
        report = lag.observe({"0": 10, "1": 10 + int(clock.now)}, infos, True, cause)
        assert not report.summary()["stalledPartitions"]
    clock.now += 1
    report = lag.observe({"0": 10, "1": 20}, infos, True, cause)
    assert report.summary()["stalledPartitions"] == ["0"]
    assert (
        "90 events waiting" in report.partitions["0"].stalled and "no home executor" in report.partitions["0"].stalled
    )
    assert [p.partition for p in lag.newly_stalled(report)] == ["0"]
    assert lag.newly_stalled(lag.observe({"0": 10, "1": 21}, infos, True, cause)) == []  # said once
    assert lag.observe({"0": 11, "1": 22}, infos, True, cause).partitions["0"].stalled is None  # it moved
    # by time alone, with no batch planned meanwhile (skipped triggers)
    clock.now += 61
    quiet = lag.observe({"0": 11, "1": 22}, infos, False, cause)
    assert quiet.partitions["0"].stalled and "cause unknown" in quiet.partitions["1"].stalled
    # nothing waiting is never a stall
    assert lag.observe({"0": 100, "1": 100}, infos, True).summary()["stalledPartitions"] == []


def test_a_trigger_awaits_the_last_batchs_reports_still_on_their_way_and_stops_waiting_once_one_never_came():
    """Tasks tell the driver what they read without waiting for it (issue 87): the next trigger waits for the
    reports of the batch before that are not here yet, so its figures and mirrored checkpoints use them; a wait that
    runs out is not repeated until a batch's reports are all here again."""
    import threading

    lag, _ = tracker()
    assert lag.await_reports(0.0), "no batch ran: nothing to wait for"
    lag.running({"0": (10, 20), "1": (5, 9), "2": (7, 7)})  # an empty range is not awaited
    lag.read("1", 9, micros(at(1)))
    late = threading.Timer(0.2, lag.read, ("0", 20, None))  # a range with no event left says its end alone
    late.start()
    try:
        assert lag.await_reports(10.0), "the report on its way was awaited"
    finally:
        late.cancel()
    assert lag.known_reads() == {"1": (9, micros(at(1)))}
    lag.running({"0": (20, 30), "1": (9, 12)})
    lag.read("1", 12, micros(at(2)))
    assert not lag.await_reports(0.05), "partition 0's report never came"
    lag.running({"0": (30, 40)})
    started = time.monotonic()
    assert not lag.await_reports(30.0), "after a wait that ran out, a trigger does not wait"
    assert time.monotonic() - started < 5.0
    lag.read("0", 40, micros(at(3)))
    assert lag.await_reports(0.0)  # all here again: the next batch's are awaited again
    lag.running({"0": (40, 50)})
    threading.Timer(0.1, lag.read, ("0", 50, micros(at(4)))).start()
    assert lag.await_reports(10.0)


def test_a_running_batch_whose_range_is_not_read_in_time_is_named_once():
    lag, clock = tracker(stalled_after=30.0)
    lag.running({"0": (10, 20), "1": (5, 9), "2": (7, 7)})
    clock.now = 29.0
    assert lag.overdue() == []
    lag.read("1", 9, micros(at(1)))  # partition 1's task is done; 0's is not
    clock.now = 31.0
    assert lag.overdue() == [("0", 10, 20, 31.0)]
    assert lag.overdue() == []  # said once
    lag.running({"0": (20, 30)})
    lag.observe({"0": 30}, {"0": info("0", 30, at(1))}, True)  # the next trigger: that batch completed
    clock.now = 100.0
    assert lag.overdue() == []
