"""Lag figures, worked out by the stream's driver at each trigger (planning/lag.py), and where they are shown."""

from __future__ import annotations

import datetime as dt
import json
import logging

import pytest

from eventhubs_spark.errors import OptionError
from eventhubs_spark.options import STREAM, read_options
from eventhubs_spark.planning.lag import KEEP_FILES, LagFiles, LagReport, LagTracker, local_path
from eventhubs_spark.positions import geo_segments
from eventhubs_spark.positions.partition_catalog import PartitionInfo
from eventhubs_spark.source import LAG_KEY, EventHubsStreamReader

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=n;SharedAccessKey=k;EntityPath=hub"
T0 = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.timezone.utc)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def micros(when: dt.datetime) -> int:
    return int((when - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)).total_seconds() * 1_000_000)


def info(pid: str, end: int, last_time: dt.datetime | None, begin: int = 0) -> PartitionInfo:
    """A partition whose next sequence number is ``end`` (0: empty), its last event enqueued at ``last_time``."""
    return PartitionInfo(pid, begin, end - 1, str(end), last_time, end <= begin)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def tracker(**kwargs) -> tuple[LagTracker, Clock]:
    clock = Clock()
    return LagTracker("hub", clock=clock, wall=lambda: T0, **kwargs), clock


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


def test_geo_replicated_positions_count_across_a_new_segment():
    lag, _ = tracker()
    committed = geo_segments.pack(1, 40)
    latest_info = PartitionInfo("0", geo_segments.pack(2, 0), geo_segments.pack(2, 44), "2:900", at(9), False)
    lag.read("0", committed, micros(at(5)))
    p = lag.observe({"0": committed}, {"0": latest_info}, True).partitions["0"]
    assert p.events == geo_segments.count(committed, geo_segments.pack(2, 45)) == 5
    assert p.seconds == 4.0
    assert p.to_json()["committed"] == "1:40" and p.to_json()["latest"] == "2:45"


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


class Table:
    """Partition id -> (next sequence number, last enqueued time)."""

    def __init__(self, partitions: dict[str, tuple[int, dt.datetime]]) -> None:
        self.partitions = partitions

    def partition_ids(self) -> list[str]:
        return sorted(self.partitions, key=int)

    def partition_properties(self, ids: list[str]) -> dict[str, PartitionInfo]:
        return {p: info(p, *self.partitions[p]) for p in ids}


def test_the_stream_reader_logs_shows_and_writes_each_triggers_lag_and_names_a_stalled_partition(tmp_path, caplog):
    table = Table({"0": (100, at(10)), "1": (20, at(20))})
    options = {
        "eventhubs.connectionString": CONN,
        "eventhubs.startingPosition": '{"seqNo": 0}',
        "maxEventsPerTrigger": "60",
        "eventhubs.checkpointLocation": str(tmp_path),
        "eventhubs.lag.stalledAfterBatches": "2",
    }
    reader = EventHubsStreamReader(options, metadata=lambda: table)
    start = reader.initialOffset()
    caplog.set_level(logging.INFO, logger="eventhubs_spark")
    end = reader.latestOffset(start, None)  # before any batch: the whole backlog is behind
    assert end == {"hub": {"0": 50, "1": 10}}  # 60 split by backlog
    shown = reader.reportLatestOffset()[LAG_KEY]
    assert shown["eventsBehindLatest"] == {"0": 100, "1": 20} and shown["maxOffsetsBehindLatest"] == 100
    assert shown["secondsBehindLatest"] == {"0": None, "1": None}  # nothing read yet: no time to go by
    assert "behind latest: events total=120 max=100" in caplog.text
    # the batch's tasks tell the driver the last event each read (0: event 49, enqueued at +6 s)
    reader._lag.read("0", 50, micros(at(6)))
    reader._lag.read("1", 10, micros(at(15)))
    later = reader.latestOffset(end, None)
    assert later == {"hub": {"0": 100, "1": 20}}
    shown = reader.reportLatestOffset()[LAG_KEY]
    assert shown["eventsBehindLatest"] == {"0": 50, "1": 10}
    assert shown["secondsBehindLatest"] == {"0": 4.0, "1": 5.0}
    assert not shown["stalledPartitions"]
    # Spark runs the next batches, but partition 1 never gets past 10 (as when its tasks cannot read)
    stuck = {"hub": {"0": 100, "1": 10}}
    reader.latestOffset(stuck, None)
    assert not reader.reportLatestOffset()[LAG_KEY]["stalledPartitions"]
    assert "is stalled" not in caplog.text
    reader.latestOffset(stuck, None)  # the second batch in a row that left it
    shown = reader.reportLatestOffset()[LAG_KEY]
    assert shown["stalledPartitions"] == ["1"] and shown["eventsBehindLatest"] == {"0": 0, "1": 10}
    assert "hub hub partition 1 is stalled: 10 events waiting, no progress for 2 batches" in caplog.text
    written = LagFiles(str(tmp_path), "hub").reports()
    assert [r.partitions["0"].events for r in written] == [100, 50, 0, 0]
    assert written[-1].partitions["1"].stalled and not written[-2].partitions["1"].stalled


def test_the_lag_commands_text_gives_a_floor_for_the_max_when_a_partitions_time_is_unknown():
    """The summary's maxSecondsBehindLatest is None while a partition has no time (nothing read from it yet), as
    the figures over the others would say less than is true; the text shows the others' max as a floor, naming
    the partitions without a time, rather than "max -" beside a partition 62.7 s behind."""
    from eventhubs_spark.cli.reports import lag_text

    def row(seconds: float | None, events: int) -> dict:
        return {"committed": 10, "latest": 10 + events, "eventsBehind": events, "secondsBehind": seconds,
                "lastReadEnqueuedTime": None, "stalled": None}  # fmt: skip

    report = {"hub": "h", "batch": 3, "commitAgeSeconds": 1.5, "maxOffsetsBehindLatest": 40,
              "maxSecondsBehindLatest": None, "partitions": {"0": row(62.7, 40), "1": row(None, 5)}}  # fmt: skip
    head = lag_text(report).splitlines()[0]
    assert "max at least 62.7 s (no time yet for partition 1)" in head, head
    report["maxSecondsBehindLatest"], report["partitions"]["1"] = 62.7, row(3.0, 5)
    assert lag_text(report).splitlines()[0].endswith("max 40 events, max 62.7 s")


def test_a_query_stores_its_options_without_secrets_and_the_lag_command_takes_them_back(tmp_path):
    """`eventhubs-spark lag` given only the checkpoint location: the hub, namespace and options come from the
    query's source.json (secrets left out); the key, never stored, from the user, or a message saying so."""
    from eventhubs_spark.cli.reports import with_stored_options
    from eventhubs_spark.options import shareable_options
    from eventhubs_spark.planning.lag import LocalFolder, stored_sources

    key = "k3y-TOPSECRET"
    raw = {"eventhubs.connectionString": f"Endpoint=sb://ns.example:5672;SharedAccessKeyName=a;SharedAccessKey={key}",
           "eventhubs.name": "orders", "eventhubs.consumerGroup": "spark", "eventhubs.entra.clientSecret": "s3cret",
           "maxEventsPerTrigger": "100", "path": "/not/an/option"}  # fmt: skip
    kept = shareable_options(raw, "ns.example:5672", "orders", True, "connectionString")
    assert kept == {"eventhubs.name": "orders", "eventhubs.consumerGroup": "spark", "maxEventsPerTrigger": "100",
                    "eventhubs.namespace": "ns.example:5672", "eventhubs.useDevelopmentEmulator": "true",
                    "_signIn": "connectionString"}  # fmt: skip
    LagFiles(str(tmp_path), "orders").write_source(kept)
    LagFiles(str(tmp_path), "other").write_source({**kept, "eventhubs.name": "other", "_signIn": "managedIdentity"})
    stored = stored_sources(LocalFolder(str(tmp_path)))
    assert set(stored) == {"orders", "other"} and key not in json.dumps(stored)

    namespace_key = f"Endpoint=sb://ns.example:5672;SharedAccessKeyName=a;SharedAccessKey={key}"
    with pytest.raises(SystemExit, match="holds the lag of hubs orders, other: name one, e.g. --option eventhubs.name"):
        with_stored_options({}, stored, namespace_key, "LOC")
    options = with_stored_options({"eventhubs.name": "orders"}, stored, namespace_key, "LOC")
    assert options == {"eventhubs.name": "orders", "eventhubs.consumerGroup": "spark", "maxEventsPerTrigger": "100",
                       "eventhubs.connectionString": namespace_key}  # fmt: skip
    read_options(options, STREAM)  # a valid set: the namespace from the key's connection string, the hub stored
    with_path = f"{namespace_key};EntityPath=orders"  # the hub by the connection string; the stored name gives way
    assert "eventhubs.name" not in with_stored_options({}, {"orders": stored["orders"]}, with_path, "LOC")
    with pytest.raises(SystemExit, match="pass --connection-string or set EVENTHUBS_CONNECTION_STRING \\(its hub "
                       "'orders' is known from LOC; its key is not stored\\)"):  # fmt: skip
        with_stored_options({"eventhubs.name": "orders"}, stored, None, "LOC")
    # a query that signed in with Entra needs no key: its stored options are the whole sign-in
    entra = with_stored_options({"eventhubs.name": "other"}, stored, None, "LOC")
    assert "eventhubs.connectionString" not in entra and entra["eventhubs.namespace"] == "ns.example:5672"
    with pytest.raises(SystemExit, match="pass --connection-string or set EVENTHUBS_CONNECTION_STRING$"):
        with_stored_options({}, {}, None, "LOC")  # nothing stored, nothing given
