"""Lag on every Spark: a real stream on the emulator, its driver's figures checked to the event and to the
microsecond against the events in its sink, then the command against its checkpoint location."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from tests.integration.sdk_helpers import send, wait_until
from tests.integration.spark.test_reader_spark import fill, output, stream

pytestmark = pytest.mark.spark


@pytest.mark.azurite
def test_each_triggers_lag_is_exact_and_the_command_reads_it_from_the_checkpoint(
    spark, eventhub, azurite, tmp_path, capsys, monkeypatch
):
    from eventhubs_spark.cli import main
    from eventhubs_spark.lag import LagFiles
    from eventhubs_spark.source import HAS_ADMISSION_CONTROL, LAG_KEY

    fill(eventhub, {0: 60, 1: 30})  # partitions 2 and 3 stay empty
    checkpoint = tmp_path / "checkpoint"
    query = stream(spark, eventhub, tmp_path, trigger={"processingTime": "400 milliseconds"},
                   eventhubs__startingPosition='{"seqNo": 0}', maxEventsPerTrigger="30",
                   eventhubs__checkpointLocation=str(checkpoint))  # fmt: skip
    files = LagFiles(str(checkpoint), eventhub.name)
    try:
        wait_until(lambda: len(output(spark, tmp_path)) == 90, timeout=120, message="all events")
        caught_up = lambda: any(r.partitions["0"].events == 0 and r.partitions["1"].events == 0  # noqa: E731
                                for r in files.reports())  # fmt: skip
        wait_until(caught_up, timeout=30, message="a trigger after the last batch")
    finally:
        query.stop()
    rows = spark.read.parquet(str(tmp_path / "data")).collect()
    enqueued = {(r.partition, r.sequenceNumber): r.enqueuedTime.replace(tzinfo=dt.timezone.utc) for r in rows}
    last = {"0": enqueued[("0", 59)], "1": enqueued[("1", 29)]}
    reports = files.reports()
    first = reports[0].partitions
    assert {p: (v.committed, v.events, v.seconds) for p, v in first.items()} == {
        "0": (0, 60, None),
        "1": (0, 30, None),
        "2": (0, 0, 0.0),
        "3": (0, 0, 0.0),
    }  # before any batch: the whole backlog, and no time yet (nothing was read)
    middle = [r for r in reports if 0 < r.partitions["0"].committed < 60 and r.partitions["1"].committed < 30]
    assert middle, [r.to_json() for r in reports]
    for report in [*middle, reports[-1]]:
        for p, end in (("0", 60), ("1", 30)):
            lag = report.partitions[p]
            assert lag.events == end - lag.committed  # exact to the event
            read_up_to = enqueued.get((p, lag.committed - 1))
            if read_up_to is not None:  # the last event the query had read: its time came from the task
                assert lag.seconds == pytest.approx((last[p] - read_up_to).total_seconds(), abs=1e-6)
            assert lag.last_enqueued == last[p]
    assert reports[-1].summary()["maxOffsetsBehindLatest"] == 0 and reports[-1].summary()["maxSecondsBehindLatest"] == 0
    if HAS_ADMISSION_CONTROL:  # Spark 4.2+: the same figures in the query's progress
        shown = [p["sources"][0]["latestOffset"] for p in query.recentProgress if p["numInputRows"] > 0]
        shown = [json.loads(s) if isinstance(s, str) else s for s in shown]
        assert all(LAG_KEY in s for s in shown)
        start = [p["sources"][0]["startOffset"] for p in query.recentProgress if p["numInputRows"] > 0]
        for s, begin in zip(shown, start, strict=True):
            latest = s[eventhub.name]
            begin = json.loads(begin) if isinstance(begin, str) else begin
            # the first batch has no start offset: it starts at the starting position, seqNo 0
            begin = {p: 0 for p in latest} if begin is None else begin[eventhub.name]
            assert s[LAG_KEY]["eventsBehindLatest"] == {p: latest[p] - begin[p] for p in latest}

    # the command, against the stopped query's checkpoint location: nothing behind
    assert main(["lag", "--checkpoint-location", str(checkpoint), "--connection-string", eventhub.connection_string,
                 "--json"]) == 0  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert report["maxOffsetsBehindLatest"] == 0 and report["stalledPartitions"] == []
    # the query stored its options, less the key, beside its lag files: the hub and namespace come from there, the
    # key from a namespace's connection string (no EntityPath), or the command says it is missing and why
    source = (files.directory / "source.json").read_text()
    key = next(p.split("=", 1)[1] for p in eventhub.connection_string.split(";") if p.startswith("SharedAccessKey="))
    assert key not in source and json.loads(source)["eventhubs.name"] == eventhub.name
    namespace_only = ";".join(p for p in eventhub.connection_string.split(";") if not p.startswith("EntityPath="))
    assert main(["lag", "--checkpoint-location", str(checkpoint), "--connection-string", namespace_only,
                 "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["partitions"] == report["partitions"]
    monkeypatch.delenv("EVENTHUBS_CONNECTION_STRING", raising=False)
    with pytest.raises(SystemExit, match=f"its hub '{eventhub.name}' is known from .*; its key is not stored"):
        main(["lag", "--checkpoint-location", str(checkpoint)])
    assert {p: v["committed"] for p, v in report["partitions"].items()} == {"0": "60", "1": "30", "2": "0", "3": "0"}
    # five more events in partition 1, and the query does not run: behind by five, by their time, and stalled
    send(eventhub.connection_string, [f"late-{i}" for i in range(5)], partition_id="1")
    from azure.eventhub import EventHubConsumerClient

    with EventHubConsumerClient.from_connection_string(eventhub.connection_string, "$Default") as client:
        newest = client.get_partition_properties("1")["last_enqueued_time_utc"]
    assert main(["lag", "--checkpoint-location", str(checkpoint), "--connection-string", eventhub.connection_string,
                 "--option", "eventhubs.lag.stalledAfter=0s"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "STALLED partition 1: 5 events waiting, no batch committed for" in text
    assert main(["lag", "--checkpoint-location", str(checkpoint), "--connection-string", eventhub.connection_string,
                 "--json", "--watch", "0.1", "--iterations", "2"]) == 0  # fmt: skip
    watched = [json.loads(chunk) for chunk in capsys.readouterr().out.replace("}\n{", "}\n\x00{").split("\x00")]
    assert len(watched) == 2
    one = watched[-1]["partitions"]["1"]
    assert one["eventsBehind"] == 5
    assert one["secondsBehind"] == pytest.approx((newest - last["1"]).total_seconds(), abs=1e-6)

    # the same checkpoint location in Azure Storage (Azurite): Spark here cannot write there itself (the
    # hadoop-azure jar is not to be had), so its files are copied blob for blob, as they lie under abfss://
    from azure.storage.blob import ContainerClient

    container = ContainerClient.from_connection_string(azurite.connection_string, f"lag{eventhub.name}")
    container.create_container()
    for path in checkpoint.rglob("*"):
        if path.is_file():
            with path.open("rb") as f:
                container.upload_blob(f"queries/q1/{path.relative_to(checkpoint)}", f)
    remote = f"{azurite.account_url}/lag{eventhub.name}/queries/q1"
    from eventhubs_spark.cli import reports

    opened: list[str] = []

    def opening(location, storage=None, real=reports.checkpoint_folder):
        opened.append(location)
        return real(location, storage)

    monkeypatch.setattr(reports, "checkpoint_folder", opening)
    assert main(["lag", "--checkpoint-location", remote, "--connection-string", eventhub.connection_string,
                 "--storage-connection-string", azurite.connection_string, "--json", "--watch", "0.1",
                 "--iterations", "2"]) == 0  # fmt: skip
    assert opened == [remote], "the watch opens the container once, not once per refresh"
    stored = json.loads(capsys.readouterr().out.split("}\n{")[0] + "}")
    assert stored["batch"] == watched[-1]["batch"] and stored["partitions"]["1"]["eventsBehind"] == 5
    assert stored["partitions"]["1"]["secondsBehind"] == one["secondsBehind"]
    assert main(["lag", "--checkpoint-location", remote, "--connection-string", namespace_only,
                 "--storage-connection-string", azurite.connection_string, "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["partitions"] == stored["partitions"]  # the hub from its blob
    assert main(["lag", "--checkpoint-location", remote, "--connection-string", eventhub.connection_string]) == 2
    assert "pass --storage-connection-string" in capsys.readouterr().err


def test_a_partition_whose_read_hangs_past_the_stall_limit_is_named_while_its_batch_runs(spark, eventhub, tmp_path):
    from eventhubs_spark.lag import LagFiles

    fill(eventhub, {1: 5})
    for _ in range(3):  # 12 MB
        send(eventhub.connection_string, [b"x" * 200_000 for _ in range(20)], partition_id="0")
    checkpoint = tmp_path / "checkpoint"
    eventhub.emulator.set_throughput_units(1)  # egress 2 MB/s: partition 0's range takes seconds to deliver
    try:
        query = stream(spark, eventhub, tmp_path, trigger={"processingTime": "1 second"},
                       eventhubs__startingPosition='{"seqNo": 0}', eventhubs__checkpointLocation=str(checkpoint),
                       eventhubs__lag__stalledAfter="500ms")  # fmt: skip
        files = LagFiles(str(checkpoint), eventhub.name)
        try:
            wait_until(lambda: len(output(spark, tmp_path)) == 65, timeout=120, message="all events")
        finally:
            query.stop()
    finally:
        eventhub.emulator.set_throughput_units(None)
    stalled = [r for r in files.reports() if r.summary()["stalledPartitions"]]
    assert stalled, "the slow range was named while its batch ran"
    why = stalled[0].partitions["0"].stalled
    assert why.startswith("the batch reading [0, 60) began") and "no task has read that range" in why
