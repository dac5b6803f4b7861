"""Unit tests of :mod:`eventhubs_spark.lag`."""

from __future__ import annotations

import json

import pytest

from eventhubs_spark.auth.storage import local_path
from eventhubs_spark.errors import OptionError
from eventhubs_spark.lag import KEEP_FILES, LagFiles, LagReport, PartitionLag
from eventhubs_spark.options import read_options
from eventhubs_spark.positions import geo_segments
from tests.unit.support.lag import CONN, at, info, micros, tracker


def test_lag_files_round_trip_and_keep_the_newest(tmp_path):
    lag, _ = tracker()
    files = LagFiles(f"file:{tmp_path}", "hub")
    report = lag.observe({"0": 5}, {"0": info("0", 8, at(3))}, True)
    files.write(report)
    assert files.directory == tmp_path / "eventhubs-lag" / "hub"
    (back,) = files.reports()
    assert back == report and back.to_json() == json.loads(json.dumps(report.to_json()))
    assert files.reads() == {}
    files.write_reads({"0": (5, micros(at(2))), "1": (geo_segments.pack(3, 7), micros(at(4)))})
    assert files.reads() == {"0": (5, micros(at(2))), "1": (geo_segments.pack(3, 7), micros(at(4)))}
    assert len(files.reports()) == 1  # reads.json is no trigger's file
    for i in range(KEEP_FILES + 5):
        files.write(LagReport("hub", at(i), report.partitions))
    kept = files.reports()
    assert len(kept) == KEEP_FILES and kept[-1].at == at(KEEP_FILES + 4)


def test_a_restarted_query_keeps_the_newest_files_counting_those_an_earlier_run_wrote(tmp_path):
    """The folder is listed once, at a writer's first file; after that it counts the files it writes."""
    lag, _ = tracker()
    report = lag.observe({"0": 5}, {"0": info("0", 8, at(3))}, True)
    earlier = LagFiles(str(tmp_path), "hub")
    for i in range(3):
        earlier.write(LagReport("hub", at(i), report.partitions))
    later = LagFiles(str(tmp_path), "hub")  # a restart: a new driver process, the same location
    for i in range(10, 10 + KEEP_FILES):
        later.write(LagReport("hub", at(i), report.partitions))
    kept = later.reports()
    assert len(kept) == KEEP_FILES and kept[0].at == at(10) and kept[-1].at == at(KEEP_FILES + 9)
    import pickle

    shipped = pickle.loads(pickle.dumps(later))  # as the stream reader goes to tasks: without the files written
    assert shipped._written is None and len(pickle.dumps(later)) < 1000
    shipped.write(LagReport("hub", at(500), report.partitions))
    assert len(shipped.reports()) == KEEP_FILES, "a copy lists the folder again before it trims"


def test_trigger_files_are_written_off_the_trigger_in_order_and_said_when_they_fail_or_fall_behind(
    tmp_path, monkeypatch, caplog
):
    """A trigger hands its file to a thread of its own (Spark waits on the trigger for the plan, not the file):
    the call returns while the location is still busy, the files land in trigger order, flush() waits for them,
    and a failing or slow location is said, never silently skipped."""
    import logging
    import pickle
    import threading

    from eventhubs_spark.lag import files as lag_module

    monkeypatch.setattr(lag_module, "WRITE_AFTER", 0.0)
    lag, _ = tracker()
    report = lag.observe({"0": 5}, {"0": info("0", 8, at(3))}, True)
    files = LagFiles(str(tmp_path), "hub")
    gate = threading.Event()
    write = LagFiles.write

    def slow_write(self, given):  # a mounted store that takes its time
        assert threading.current_thread() is not threading.main_thread()
        gate.wait(10)
        return write(self, given)

    monkeypatch.setattr(LagFiles, "write", slow_write)
    for i in range(3):
        files.write_later(LagReport("hub", at(i), report.partitions))  # returns while the first write waits
    assert not files.flush(0.2) and files.reports() == []
    gate.set()
    assert files.flush(10)
    assert [r.at for r in files.reports()] == [at(0), at(1), at(2)]

    gate.clear()  # the location falls behind: the oldest waiting files are left out, and said
    caplog.set_level(logging.WARNING, logger="eventhubs_spark")
    files.write_later(LagReport("hub", at(10), report.partitions))
    deadline = threading.Event()
    while not files._writing:  # the writer holds at(10) at the gate
        deadline.wait(0.01)
    for i in range(lag_module.WAITING_FILES + 3):
        files.write_later(LagReport("hub", at(20 + i), report.partitions))
    gate.set()
    assert files.flush(10)
    kept = [r.at for r in files.reports()]
    assert kept[-(lag_module.WAITING_FILES + 1) :] == [at(10)] + [at(23 + i) for i in range(lag_module.WAITING_FILES)]
    assert "3 triggers' lag files were left out" in caplog.text

    monkeypatch.setattr(LagFiles, "write", lambda self, given: (_ for _ in ()).throw(PermissionError("read-only")))
    files.write_later(LagReport("hub", at(99), report.partitions))
    assert files.flush(10)
    assert f"the lag figures could not be written under {files.directory}: read-only" in caplog.text
    shipped = pickle.loads(pickle.dumps(files))  # to the tasks: no thread, nothing waiting
    assert shipped._writer is None and not shipped._waiting and shipped.flush(0)


def test_a_trigger_file_says_each_time_in_the_zone_it_was_given():
    from datetime import timedelta, timezone

    lag, _ = tracker()
    report = lag.observe({"0": 5}, {"0": info("0", 8, at(3))}, True)
    (figures,) = report.partitions.values()
    utc, plus_one = at(3), at(3).astimezone(timezone(timedelta(hours=1)))
    assert utc == plus_one
    for when in (utc, plus_one, utc):  # equal times, two texts: each said as given
        figures.last_enqueued = when
        assert figures.to_json()["lastEnqueuedTime"] == when.isoformat()


def test_checkpoint_locations_in_azure_storage_name_their_container_and_path():
    from eventhubs_spark.checkpoints.blob import blob_location

    assert blob_location("abfss://cp@acct.dfs.core.windows.net/queries/q1") == ("cp", "queries/q1")
    assert blob_location("wasbs://cp@acct.blob.core.windows.net/q1/") == ("cp", "q1")
    assert blob_location("https://acct.blob.core.windows.net/cp/queries/q1") == ("cp", "queries/q1")
    assert blob_location("http://127.0.0.1:10000/devstoreaccount1/cp/q1") == ("cp", "q1")  # Azurite: path-style
    with pytest.raises(ValueError, match=r"e.g. abfss://checkpoints@ACCOUNT"):
        blob_location("s3://bucket/q1")


def test_checkpoint_locations_the_driver_can_write_and_a_clear_error_for_others():
    assert local_path("/tmp/cp") == "/tmp/cp"
    assert local_path("file:///tmp/cp") == "/tmp/cp"
    assert local_path("dbfs:/checkpoints/q") == "/dbfs/checkpoints/q"
    with pytest.raises(OptionError, match=r"eventhubs.checkpointLocation: 'abfss://c@a.dfs.core.windows.net/q'.*"
                       r"Example: .*/dbfs/checkpoints"):  # fmt: skip
        read_options({"eventhubs.connectionString": CONN,
                      "eventhubs.checkpointLocation": "abfss://c@a.dfs.core.windows.net/q"}, "stream")  # fmt: skip


def _lagging(pid: str, events: int, seconds: float | None, stalled: str | None = None) -> PartitionLag:
    return PartitionLag(pid, 0, events, events, seconds, at(0), None, stalled)


def test_a_progress_report_past_its_bound_shows_the_partitions_furthest_behind_and_says_so():
    """eventhubs.lag.progressPartitions: a 1,024-partition hub's two maps were 26 KB in every progress event.
    Past the bound the stalled partitions come first, then the most events behind, then the most seconds (unknown
    last), then the lower number; shown in partition order; the summary still counts every partition."""
    figures = {
        "0": _lagging("0", 5, 1.0),
        "1": _lagging("1", 50, 2.0),
        "2": _lagging("2", 1, 0.5, stalled="no home executor"),
        "3": _lagging("3", 50, None),
        "4": _lagging("4", 50, 9.0),
        "10": _lagging("10", 7, 3.0),
    }
    report = LagReport("hub", at(0), figures)
    whole = report.progress()
    assert list(whole["eventsBehindLatest"]) == ["0", "1", "2", "3", "4", "10"] and "partitionsShown" not in whole
    assert report.progress(6) == whole
    shown = report.progress(3)  # 3 is as far behind as 1 and 4, but its seconds are unknown
    assert shown["eventsBehindLatest"] == {"1": 50, "2": 1, "4": 50}  # stalled 2; then 4 (9 s) and 1 (2 s) over 3
    assert shown["secondsBehindLatest"] == {"1": 2.0, "2": 0.5, "4": 9.0}
    assert shown["partitionsShown"].startswith("the 3 of 6 partitions furthest behind")
    assert "eventhubs.lag.progressPartitions" in shown["partitionsShown"]
    summary = {k: v for k, v in whole.items() if not k.endswith("BehindLatest") or k.startswith(("avg", "max", "min"))}
    assert {k: shown[k] for k in summary} == summary  # the summary and the stalled list are the whole hub's
    assert list(report.progress(5)["eventsBehindLatest"]) == ["1", "2", "3", "4", "10"]  # 0: fewest events
    assert list(report.progress(1)["eventsBehindLatest"]) == ["2"]


def test_the_progress_bound_is_an_option_checked_with_an_example():
    assert read_options({"eventhubs.connectionString": CONN}, "stream").lag_progress_partitions == 100
    typed = read_options({"eventhubs.connectionString": CONN, "eventhubs.lag.progressPartitions": "1024"}, "stream")
    assert typed.lag_progress_partitions == 1024
    with pytest.raises(OptionError, match=r"eventhubs.lag.progressPartitions: expected a whole number >= 1, got '0'"):
        read_options({"eventhubs.connectionString": CONN, "eventhubs.lag.progressPartitions": "0"}, "stream")
