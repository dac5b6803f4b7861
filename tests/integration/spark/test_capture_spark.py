"""Issue 48 through Spark: a stream that reads a hub's history from Capture and goes on in the hub, each event once
across the seam, a late file and a file written twice, stopped mid-history and restarted; a batch read of both
sides, and a gap that fails naming where; and the same on local-cluster, where executors read the files."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventhubs_emulator import Emulator
from tests.integration.sdk_helpers import send, wait_until
from tests.integration.spark.test_reader_spark import output, stream

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[3]


class _Hub:
    def __init__(self, emu: Emulator, name: str, partitions: int) -> None:
        self.name, self.partitions = name, partitions
        self.connection_string = emu.connection_string(name)


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> Iterator[tuple[Emulator, str]]:
    folder = str(tmp_path_factory.mktemp("capture"))
    with Emulator({"warmup": 1}, capture={"destination": folder, "window_seconds": 3600}) as emu:
        yield emu, folder


_names = iter(range(1_000_000))


def new_hub(emu: Emulator, partitions: int) -> _Hub:
    name = f"spcap{next(_names)}"
    emu.add_hub(name, partitions)
    return _Hub(emu, name, partitions)


def bodies(prefix: str, first: int, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(first, first + n)]


def history(emu: Emulator, hub: _Hub) -> dict[tuple[str, int], str]:
    """Three partitions whose history lies partly or only in Capture; returns every event, by (partition, seq).
    0: three files (the second written twice) and events only in the hub, the hub beginning mid-file (an overlap);
    1: history in Capture only, the hub empty after it (an exact seam); 2: a file written late that alone holds
    events the hub no longer has."""
    conn = hub.connection_string
    sent: dict[tuple[str, int], str] = {}

    def put(partition: str, items: list[str]) -> None:
        first = emu.partition_properties(hub.name, partition)["last_enqueued_sequence_number"] + 1
        send(conn, items, partition_id=partition)
        sent.update({(partition, first + i): b for i, b in enumerate(items)})

    put("0", bodies("a", 0, 20))
    put("1", bodies("h", 0, 10))
    put("2", bodies("e", 0, 10))
    emu.capture_flush()
    put("0", bodies("a", 20, 20))
    emu.capture_duplicate_next(hub.name, "0")
    emu.capture_flush()
    put("0", bodies("a", 40, 20))
    put("2", bodies("e", 10, 10))
    emu.capture_delay_next(hub.name, "2", 6.0)  # back-filled 6 s later
    emu.capture_flush()
    put("0", bodies("a", 60, 20))  # in the hub only
    emu.trim(hub.name, "0", 45)
    emu.trim(hub.name, "1", 10)
    emu.trim(hub.name, "2", 20)
    return sent


def rows(spark, tmp: Path) -> list[tuple[str, int, str]]:
    """The sink's committed rows (none yet: an empty list)."""
    if not output(spark, tmp):
        return []
    return sorted((r.partition, r.sequenceNumber, r.body) for r in spark.read.parquet(str(tmp / "data")).collect())


def test_a_stream_reads_history_from_capture_then_the_hub_each_event_once_across_a_restart(spark, captured, tmp_path):
    emu, folder = captured
    hub = new_hub(emu, 3)
    sent = history(emu, hub)
    options = {"eventhubs__capture__location": folder, "eventhubs__capture__namespace": "emulator",
               "eventhubs__capture__lateFileWait": "60s", "eventhubs__startingPosition": '{"offset": "-1"}',
               "maxEventsPerTrigger": "10"}  # fmt: skip
    trigger = {"processingTime": "500 milliseconds"}
    first = stream(spark, hub, tmp_path, trigger=trigger, **options)
    try:  # stopped after its first batch: ten more (5 s at least) before the history ends, for a busy machine's polls
        wait_until(lambda: len(rows(spark, tmp_path)) >= 10, timeout=120, message="a first batch, from Capture")
    finally:
        first.stop()
    assert first.exception() is None, first.exception()
    stopped_at = len(rows(spark, tmp_path))
    assert stopped_at < len(sent), "stopped inside the history"
    second = stream(spark, hub, tmp_path, trigger=trigger, **options)
    try:
        live = {("1", 10 + i): b for i, b in enumerate(bodies("live", 0, 5))}
        send(hub.connection_string, list(live.values()), partition_id="1")  # after the seam, while it runs
        sent.update(live)
        wait_until(lambda: len(rows(spark, tmp_path)) >= len(sent), timeout=180, message="every event")
    finally:
        second.stop()
    assert second.exception() is None, second.exception()
    got = rows(spark, tmp_path)
    assert len(got) == len(set(got)) == len(sent), "each event once, the duplicated file's too"
    assert {(p, s): b for p, s, b in got} == sent


def test_a_batch_read_spans_both_sides_and_a_gap_fails_naming_where(spark, captured):
    emu, folder = captured
    hub = new_hub(emu, 1)
    send(hub.connection_string, bodies("x", 0, 10), partition_id="0")
    emu.capture_flush()
    send(hub.connection_string, bodies("x", 10, 10), partition_id="0")
    emu.trim(hub.name, "0", 5)

    def read(**extra: str):
        reader = (spark.read.format("eventhubs").option("eventhubs.connectionString", hub.connection_string)
                  .option("eventhubs.capture.location", folder).option("eventhubs.capture.namespace", "emulator")
                  .option("eventhubs.capture.lateFileWait", "0s"))  # fmt: skip
        for key, value in extra.items():
            reader = reader.option(key, value)
        return reader.load().selectExpr("sequenceNumber", "cast(body as string) as body").collect()

    got = read(**{"eventhubs.startingPosition": '{"seqNo": 2}'})
    assert sorted((r.sequenceNumber, r.body) for r in got) == [(i, f"x{i}") for i in range(2, 20)]
    emu.trim(hub.name, "0", 15)  # 10..14 are in no file: Capture's window for them is still open
    with pytest.raises(Exception, match=r"sequence numbers \[10, 15\) \(5 events\) are in no Capture file"):
        read(**{"eventhubs.startingPosition": '{"seqNo": 0}'})
    kept = read(**{"eventhubs.startingPosition": '{"seqNo": 0}', "failOnDataLoss": "false"})
    assert sorted(r.sequenceNumber for r in kept) == [*range(10), *range(15, 20)]


def test_on_local_cluster_executors_read_the_files_and_the_stream_is_exact(captured, tmp_path):
    emu, folder = captured
    hub = new_hub(emu, 3)
    sent = history(emu, hub)
    options = {"eventhubs.capture.location": folder, "eventhubs.capture.namespace": "emulator",
               "eventhubs.capture.lateFileWait": "60s"}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "tests.integration.spark_app", "local-cluster", hub.connection_string, str(tmp_path),
         "40"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env={**__import__("os").environ,
                                                                    "SPARK_APP_OPTIONS": json.dumps(options)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert sorted(result["rows"]) == sorted(sent.values()) and len(result["rows"]) == len(sent)
    assert result["batches"] >= 3
