"""Unit tests of :mod:`eventhubs_spark.sink.writers` and :mod:`eventhubs_spark.sink.layout`."""

from __future__ import annotations

from typing import Any

import pytest

from eventhubs_spark.errors import SinkError


def test_writing_avro_takes_a_value_struct_instead_of_a_body_and_says_so():
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    from eventhubs_spark.sink import layout_for

    value = StructField("value", StructType([StructField("id", LongType())]))
    layout = layout_for(StructType([StructField("partitionKey", StringType()), value]), value="Avro")
    assert (layout.body, layout.partition_key, layout.body_is_text) == (1, 0, False)
    with pytest.raises(SinkError, match="column 'body' is not written when writing Avro"):
        layout_for(StructType([value, StructField("body", BinaryType())]), value="Avro")
    with pytest.raises(SinkError, match="column 'value' must be a struct"):
        layout_for(StructType([StructField("value", StringType())]), value="Avro")
    with pytest.raises(SinkError, match="no 'value' column"):
        layout_for(StructType([StructField("partitionKey", StringType())]), value="Avro")


def test_a_sink_task_counts_as_a_task_of_the_worker(monkeypatch, in_spark_task):
    from eventhubs_spark import sink
    from eventhubs_spark.process import runtime

    started: list[bool] = []
    monkeypatch.setattr(runtime, "task_started", lambda: started.append(True))

    class Sender:
        report = sink.SendReport()

        def __init__(self, *args: object) -> None:
            pass

        def flush(self) -> None:
            pass

    monkeypatch.setattr(sink.sender, "EventSender", Sender)
    assert sink.write_task(None, None, 1.0, iter(()), arrow=True) is Sender.report  # type: ignore[arg-type]
    assert started == [True]


def test_a_writes_commit_sums_its_tasks_reports_into_one_summary_and_its_warnings(caplog) -> None:
    import logging
    import types

    from eventhubs_spark import sink

    writer = sink.EventHubsStreamRowWriter.__new__(sink.EventHubsStreamRowWriter)
    writer.settings = types.SimpleNamespace(hub="orders")  # type: ignore[assignment]
    reports = [
        sink.SendReport(by_partition={"0": 5, "10": 2}, by_key=1, batches=2, throttled=1, throttled_wait=0.5),
        None,  # a task that sent nothing reports nothing
        sink.SendReport(by_partition={"0": 3, "2": 4}, batches=1, throttled=2, throttled_wait=1.25, resent=3),
    ]
    with caplog.at_level(logging.INFO, logger=sink.writers._LOG.name):
        writer.commit(reports, 7)
    said = [r.getMessage() for r in caplog.records]
    assert [m for m in said if "sent again" in m] == [
        "eventhubs sink hub=orders batch=7: 3 events were sent again after a send of theirs went unanswered (for "
        "eventhubs.connectionIdleTimeout, or until eventhubs.operationTimeout); the first send may have been stored "
        "all the same, so the hub may hold them twice (delivery is at least once)"
    ]
    (throttling,) = [m for m in said if "throttling" in m]
    assert "refused 3 sends as busy, and the tasks waited 1.8 s in all" in throttling
    assert (
        "eventhubs sink hub=orders batch=7 sent 15 events (per partition: 0:8, 2:4, 10:2; routed by partition key: 1)"
        in said
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=sink.writers._LOG.name):
        writer.abort(reports, 8)
    assert [r.getMessage() for r in caplog.records] == [
        "eventhubs sink hub=orders batch=8 aborted after 15 events were sent; Spark re-runs it (at least once)"
    ]


@pytest.mark.parametrize(
    ("partitions", "events", "expected"),
    [
        (1024, 12_800, [256] * 50),  # a Dedicated hub: runs of DEAL_RUN over 50 partitions, not 12 events over 1,024
        (4, 5_000, [1_250] * 4),  # runs as even as the partitions allow
        (4, 100, [100]),  # fewer than DEAL_RUN: one batch, as a partition-less send of the SDKs
    ],
)
def test_unaddressed_events_are_dealt_over_the_partitions_in_runs(monkeypatch, partitions, events, expected) -> None:
    from eventhubs_spark import sink
    from eventhubs_spark.options import write_options
    from tests.unit.sink.test_exactly_once import Hub, _Client

    hub = Hub(partitions)
    client = _Client(hub, unanswered=set())

    class Pool:
        def get(self, settings: Any) -> _Client:
            return client

    class Runtime:
        producers = Pool()

    monkeypatch.setattr(sink.sender.runtime, "current", lambda: Runtime())
    conn = "Endpoint=sb://localhost/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub"
    sender = sink.EventSender(
        write_options({"eventhubs.connectionString": conn}).settings, sink.SinkLayout(0, True), 30.0
    )
    sender.add_columns([[f"b{i}" for i in range(events)]])
    sender.flush()
    used = [int(p) for p, stored in hub.events.items() if stored]
    assert sorted(len(hub.events[str(p)]) for p in used) == expected
    first = next((p for p in used if (p - 1) % partitions not in used), 0)  # the runs go round from a random one
    assert sorted(used) == sorted((first + i) % partitions for i in range(len(used)))
    assert sum(sender.report.by_partition.values()) == events
