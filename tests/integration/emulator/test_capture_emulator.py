"""Issue 48, item 1: the emulator captures as the service does, its files read by fastavro (a reader no one here
wrote) and compared with what the official SDK receives for the same events."""

from __future__ import annotations

import datetime as dt
import io
import itertools
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from eventhubs_emulator import Emulator
from eventhubs_emulator.capture import WRITER_SCHEMA, CaptureSettings, dotnet_time
from tests.integration.sdk_helpers import receive, wait_until

fastavro = pytest.importorskip("fastavro")


def _records(data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    reader = fastavro.reader(io.BytesIO(data))
    return reader.metadata, list(reader)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.avro"))}


def _send(conn: str, events: list[dict[str, Any]]) -> None:
    from azure.eventhub import EventData, EventHubProducerClient

    with EventHubProducerClient.from_connection_string(conn) as producer:
        for e in events:
            batch = producer.create_batch(partition_id=e.get("partition"), partition_key=e.get("key"))
            data = EventData(e["body"])
            data.properties = e.get("properties") or {}
            if "content_type" in e:
                data.content_type = e["content_type"]
            if "message_id" in e:
                data.message_id = e["message_id"]
            batch.add(data)
            producer.send_batch(batch)


def test_capture_files_hold_what_the_sdk_receives_in_the_services_schema_and_names(tmp_path):
    events = [
        {"partition": "0", "body": b"\x00binary\xff", "properties": {"s": "text", "n": 7, "f": 2.5, "b": b"\x01\x02",
                                                                    "t": True}},
        {"partition": "0", "body": "second"},
        {"key": "k-1", "body": "keyed"},  # routed by the key: SystemProperties carries it
    ]  # fmt: skip
    with Emulator({"cap": 2}, capture={"destination": str(tmp_path), "window_seconds": 3600}) as emu:
        conn = emu.connection_string("cap")
        _send(conn, events)
        received = receive(conn, 3, starting_position="-1")
        written = emu.capture_flush()
        files = _files(tmp_path)  # (stopping writes the windows open then: empty files)
    assert {f.name for f in written} == set(files)
    by_partition = {f.partition: f for f in written}
    for partition, info in by_partition.items():
        start = dt.datetime.strptime("/".join(info.name.split("/")[3:])[:-5], "%Y/%m/%d/%H/%M/%S")
        assert info.name.startswith(f"emulator/cap/{partition}/") and start.year >= 2026  # the default format
    sdk = {e.body_as_str(encoding="latin-1"): e for e in received}  # every body differs
    got = []
    for name, data in files.items():
        metadata, records = _records(data)
        assert set(metadata) == {"avro.codec", "avro.schema"} and metadata["avro.codec"] == "null"
        assert metadata["avro.schema"] == WRITER_SCHEMA  # byte for byte, the fifth "null" branch too
        got += [(name, r) for r in records]
    assert len(got) == 3
    for _name, r in got:
        event = sdk[r["Body"].decode("latin-1")]
        key = event.partition_key.decode() if isinstance(event.partition_key, bytes) else event.partition_key
        assert r["SystemProperties"].get("x-opt-partition-key") == key
        assert (r["SequenceNumber"], r["Offset"]) == (event.sequence_number, event.offset)
        enqueued_ms = r["SystemProperties"]["x-opt-enqueued-time"]
        assert enqueued_ms == int(event.enqueued_time.timestamp() * 1000)
        assert r["EnqueuedTimeUtc"] == dotnet_time(enqueued_ms)  # e.g. 12/9/2022 4:51:25 PM
        assert dt.datetime.strptime(r["EnqueuedTimeUtc"], "%m/%d/%Y %I:%M:%S %p").replace(
            tzinfo=dt.timezone.utc) == event.enqueued_time.replace(microsecond=0)  # fmt: skip
        sent = next(
            e.get("properties") or {}
            for e in events
            if str(e["body"]).encode("latin-1") == r["Body"] or e["body"] == r["Body"]
        )  # the properties as the producer sent them (fmt: skip)
        expected = {k: ("True" if v is True else v) for k, v in sent.items()}  # booleans as .NET writes them
        assert r["Properties"] == expected
    assert {r["SequenceNumber"] for _, r in got if r["Body"] in (b"\x00binary\xff", b"second")} == {0, 1}


def test_an_empty_window_writes_an_empty_file_unless_told_to_skip_and_deflate_reads_the_same(tmp_path):
    with Emulator({"cap": 1}, capture={"destination": str(tmp_path / "a"), "window_seconds": 3600,
                                       "codec": "deflate"}) as emu:  # fmt: skip
        _send(emu.connection_string("cap"), [{"partition": "0", "body": "x" * 5000} for _ in range(3)])
        emu.capture_flush()
        time.sleep(1.1)  # the next window starts a second later: a name of its own
        empty = emu.capture_flush()
        files = _files(tmp_path / "a")
    assert len(files) == 2 and [f.count for f in empty] == [0]
    metadata, records = _records(files[empty[0].name])
    assert records == [] and metadata["avro.codec"] == "deflate"
    header_end = files[empty[0].name].index(files[empty[0].name][-16:])  # the sync marker ends the header
    assert files[empty[0].name][header_end + 16 :] == b"\x00\x00" + files[empty[0].name][-16:]  # one block of 0
    full = next(d for n, d in files.items() if n != empty[0].name)
    assert [r["Body"] for r in _records(full)[1]] == [b"x" * 5000] * 3 and len(full) < 5000  # deflated
    with Emulator({"cap": 1}, capture={"destination": str(tmp_path / "b"), "skip_empty": True}) as emu:
        assert emu.capture_flush() == []
    assert _files(tmp_path / "b") == {}


def test_windows_close_by_time_and_by_size_and_retention_leaves_events_only_in_capture(tmp_path):
    from eventhubs_emulator.config import HubConfig

    hubs = [HubConfig("timed", 1), HubConfig("sized", 1), HubConfig("kept", 1, retention_seconds=1.0)]
    settings = CaptureSettings(destination=str(tmp_path), window_seconds=1.0, window_bytes=10_000)
    with Emulator(hubs, capture=settings) as emu:
        _send(emu.connection_string("timed"), [{"partition": "0", "body": "a"}])
        wait_until(lambda: any(f.hub == "timed" and f.count == 1 for f in emu.captured_files), timeout=10,
                   message="the time window's file")  # fmt: skip
        _send(emu.connection_string("sized"), [{"partition": "0", "body": "y" * 3000} for _ in range(12)])
        _send(emu.connection_string("kept"), [{"partition": "0", "body": f"old-{i}"} for i in range(5)])
        wait_until(lambda: sum(f.count for f in emu.captured_files if f.hub == "sized") == 12, timeout=10,
                   message="the sized hub's events in files")  # fmt: skip
        wait_until(lambda: emu.partition_properties("kept", "0")["is_partition_empty"], timeout=10,
                   message="retention emptied the hub")  # fmt: skip
        wait_until(lambda: sum(f.count for f in emu.captured_files if f.hub == "kept") == 5, timeout=10,
                   message="the kept hub's events in files")  # fmt: skip
        sized = [f for f in emu.captured_files if f.hub == "sized" and f.count]
    assert len(sized) >= 3, "a size window of 10 kB closes after a few 3 kB events"
    ranges = sorted((f.first, f.last) for f in sized)
    assert ranges[0][0] == 0 and ranges[-1][1] == 11
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(ranges)), ranges  # contiguous, no overlap
    kept = [r["Body"] for n, d in _files(tmp_path).items() if "/kept/" in n for r in _records(d)[1]]
    assert kept == [f"old-{i}".encode() for i in range(5)]  # only Capture has them now


def test_faults_a_paused_capture_leaves_a_gap_a_late_file_and_a_file_written_twice(tmp_path):
    with Emulator({"cap": 1}, capture={"destination": str(tmp_path), "window_seconds": 3600}) as emu:
        conn = emu.connection_string("cap")
        _send(conn, [{"partition": "0", "body": "0"}])
        emu.capture_pause("cap")
        _send(conn, [{"partition": "0", "body": "1"}, {"partition": "0", "body": "2"}])  # never captured
        emu.capture_resume("cap")
        _send(conn, [{"partition": "0", "body": "3"}])
        emu.capture_duplicate_next("cap", "0")
        twice = emu.capture_flush()
        assert [(f.first, f.last) for f in twice] == [(0, 3), (0, 3)] and twice[0].name != twice[1].name
        assert [[r["SequenceNumber"] for r in _records((tmp_path / f.name).read_bytes())[1]] for f in twice] == [
            [0, 3], [0, 3]]  # fmt: skip
        time.sleep(1.1)
        _send(conn, [{"partition": "0", "body": "4"}])
        emu.capture_delay_next("cap", "0", 2.0)
        assert emu.capture_flush() == []  # its window closed; its file comes later
        assert not any(f.first == 4 for f in emu.captured_files)
        wait_until(lambda: any(f.first == 4 for f in emu.captured_files), timeout=10, message="the late file")
        late = next(f for f in emu.captured_files if f.first == 4)
    assert (tmp_path / late.name).exists()


@pytest.mark.azurite
def test_capture_into_a_blob_container_and_from_the_command_line(azurite, tmp_path):
    from azure.storage.blob import ContainerClient

    with Emulator({"cap": 2}, capture={"destination": "blob", "connection_string": azurite.connection_string,
                                       "container": "capture-test", "window_seconds": 3600}) as emu:  # fmt: skip
        _send(emu.connection_string("cap"), [{"partition": "1", "body": "to a blob"}])
        written = emu.capture_flush()
        container = ContainerClient.from_connection_string(azurite.connection_string, "capture-test")
        names = sorted(b.name for b in container.list_blobs())
    assert names == sorted(f.name for f in written) and len(names) == 2
    one = next(f for f in written if f.partition == "1")
    assert [r["Body"] for r in _records(container.download_blob(one.name).readall())[1]] == [b"to a blob"]

    proc = subprocess.Popen([sys.executable, "-m", "eventhubs_emulator", "--port", "0", "--hub", "cli:1",
                             "--capture", str(tmp_path / "cli"), "--capture-window", "1",
                             "--capture-name-format", "{Namespace}/{EventHub}/p{PartitionId}--{Year}-{Month}-{Day}--"
                             "{Hour}-{Minute}-{Second}"], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
        assert "Capture into" in lines[2] and "every 1 s" in lines[2], lines
        wait_until(lambda: list((tmp_path / "cli").rglob("*.avro")), timeout=10, message="a file by the CLI")
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
    name = next((tmp_path / "cli").rglob("*.avro")).relative_to(tmp_path / "cli").as_posix()
    assert name.startswith("emulator/cli/p0--") and name.count("--") == 2
    bad = subprocess.run([sys.executable, "-m", "eventhubs_emulator", "--port", "0", "--hub", "x:1", "--capture",
                          str(tmp_path), "--capture-name-format", "{EventHub}/{PartitionId}"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 2 and "lacks {Namespace}, {Year}" in bad.stderr, bad.stderr
