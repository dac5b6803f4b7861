"""Issue 48: one read across Capture and the hub, in process (the readers' own planning and reading, no Spark):
rows from files equal the live read's rows for the same events, the seam is exact, and the namespace sends
nothing for what came from files; from a local folder and from a blob container in Azurite."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from eventhubs_emulator import Emulator
from eventhubs_emulator import capture as writer
from eventhubs_spark.capture import reader as capture_reader
from eventhubs_spark.capture.store import BlobStore
from tests.integration.emulator.test_capture_emulator import _send


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> Iterator[tuple[Emulator, str]]:
    folder = str(tmp_path_factory.mktemp("capture"))
    with Emulator({"warmup": 1}, capture={"destination": folder, "window_seconds": 3600}) as emu:
        yield emu, folder


_hubs = iter(range(1_000_000))


def hub(emu: Emulator, partitions: int = 2) -> tuple[str, str]:
    name = f"cap{next(_hubs)}"
    emu.add_hub(name, partitions)
    return name, emu.connection_string(name)


def batch_read(options: dict[str, str]) -> list[dict[str, Any]]:
    from eventhubs_spark.source import EventHubsBatchReader

    reader = EventHubsBatchReader(options)
    rows = [row for split in reader.partitions() for b in reader.read(split) for row in b.to_pylist()]
    return sorted(rows, key=lambda r: (int(r["partition"]), r["sequenceNumber"]))


def test_rows_from_capture_are_the_rows_the_live_read_gives(captured):
    emu, folder = captured
    name, conn = hub(emu)
    events = [{"partition": "0", "body": b"\x00\xffbinary", "properties": {"s": "text", "n": 7, "f": 2.5,
                                                                           "b": b"\x01\x02", "u": "caf\u00e9"}},
              {"partition": "1", "body": "plain", "content_type": "avro/binary+0f5e", "message_id": "m-1"},
              {"key": "device-7", "body": "keyed"},
              {"partition": "0", "body": "flag", "properties": {"ok": True}}]  # fmt: skip
    _send(conn, events)
    live = batch_read({"eventhubs.connectionString": conn})
    emu.capture_flush()
    for p in ("0", "1"):
        emu.trim(name, p, emu.partition_properties(name, p)["last_enqueued_sequence_number"] + 1)  # all gone
    options = {"eventhubs.connectionString": conn, "eventhubs.capture.location": folder,
               "eventhubs.capture.namespace": "emulator", "eventhubs.startingPosition": '{"offset": "-1"}'}  # fmt: skip
    sent = emu.events_sent(name)
    from_files = batch_read(options)
    assert emu.events_sent(name) == sent, "the namespace sent nothing for events read from files"
    assert len(from_files) == len(live) == 4
    for old, new in zip(live, from_files, strict=True):
        flag = dict(old["properties"]).get("ok")
        for column in ("body", "partition", "offset", "sequenceNumber", "enqueuedTime", "publisher", "partitionKey"):
            assert new[column] == old[column], (column, old, new)
        if flag is None:
            assert new["properties"] == old["properties"]
        else:  # Capture writes a boolean as .NET's text (README: what Capture keeps less of)
            assert (flag, dict(new["properties"])["ok"]) == ("true", "True")
        kept = [(k, v) for k, v in old["systemProperties"] if k != "x-opt-sequence-number-epoch"]
        assert new["systemProperties"] == kept, "Capture keeps all but the replication segment"


def test_a_read_starts_in_capture_and_goes_on_in_the_hub_each_event_once(captured):
    emu, folder = captured
    name, conn = hub(emu)
    _send(conn, [{"partition": "0", "body": f"a{i}"} for i in range(20)])
    emu.capture_flush()
    _send(conn, [{"partition": "0", "body": f"b{i}"} for i in range(20)])
    emu.capture_flush()
    _send(conn, [{"partition": "0", "body": f"c{i}"} for i in range(20)])  # in the hub only (its window is open)
    emu.trim(name, "0", 30)  # the hub now begins at 30: mid-file
    options = {"eventhubs.connectionString": conn, "eventhubs.capture.location": f"file:{folder}",
               "eventhubs.capture.namespace": "emulator"}  # fmt: skip
    sent = emu.events_sent(name)
    rows = batch_read({**options, "eventhubs.startingPosition": '{"offset": "-1"}'})
    assert [r["sequenceNumber"] for r in rows] == list(range(60))
    assert [r["body"] for r in rows] == [f"{k}{i}".encode() for k in "abc" for i in range(20)]
    assert 30 <= emu.events_sent(name) - sent <= 30 + 300, "only [30, 60) came from the hub (with its prefetch)"
    # starting positions that reach back past the hub's first event: a sequence number, an enqueued time
    seqs = [r["sequenceNumber"] for r in batch_read({**options, "eventhubs.startingPosition": '{"seqNo": 12}'})]
    assert seqs == list(range(12, 60))
    when = rows[4]["enqueuedTime"].isoformat().replace("+00:00", "Z")
    position = json.dumps({"enqueuedTime": when})
    got = batch_read({**options, "eventhubs.startingPosition": position})
    assert got[0]["enqueuedTime"] > rows[4]["enqueuedTime"] and got[-1]["sequenceNumber"] == 59
    assert [r["sequenceNumber"] for r in got] == list(range(got[0]["sequenceNumber"], 60))
    # an ending position inside Capture: a bounded read of history alone
    bounded = batch_read({**options, "eventhubs.startingPosition": '{"seqNo": 3}',
                          "eventhubs.endingPosition": '{"seqNo": 25}'})  # fmt: skip
    assert [r["sequenceNumber"] for r in bounded] == list(range(3, 25))


def test_without_capture_the_same_read_is_data_loss_and_with_it_a_gap_is(captured):
    from eventhubs_spark.errors import DataLossError

    emu, folder = captured
    name, conn = hub(emu)
    _send(conn, [{"partition": "0", "body": f"a{i}"} for i in range(5)])
    emu.capture_pause(name)
    _send(conn, [{"partition": "0", "body": f"lost{i}"} for i in range(3)])  # never captured
    emu.capture_resume(name)
    _send(conn, [{"partition": "0", "body": f"b{i}"} for i in range(5)])
    emu.capture_flush()
    emu.trim(name, "0", 10)
    start = {"eventhubs.connectionString": conn, "eventhubs.startingPosition": '{"seqNo": 0}'}
    with pytest.raises(DataLossError, match=r"\[0, 10\) are no longer in the hub"):
        batch_read(start)
    options = {**start, "eventhubs.capture.location": folder, "eventhubs.capture.namespace": "emulator",
               "eventhubs.capture.lateFileWait": "0s"}  # fmt: skip
    with pytest.raises(
        DataLossError, match=r"partition 0: sequence numbers \[5, 8\) \(3 events\) are in no Capture.*a hole"
    ):
        batch_read(options)
    rows = batch_read({**options, "failOnDataLoss": "false"})
    assert [r["sequenceNumber"] for r in rows] == [0, 1, 2, 3, 4, 8, 9, 10, 11, 12]


@pytest.mark.azurite
def test_capture_in_a_blob_container_signed_in_with_a_connection_string(azurite, monkeypatch):
    # the file counts as large (its blocks of 4 events fetched a range at a time, once its block map is known)
    monkeypatch.setattr(writer, "BLOCK_EVENTS", 4)
    monkeypatch.setattr(capture_reader, "_CACHE_MAX_BYTES", 100)
    monkeypatch.setattr(capture_reader, "_MAP_WINDOW", 64)  # mapped by many ranged reads of the blob, to its end
    monkeypatch.setattr(capture_reader, "_PIECE_BYTES", 1)  # and decoded two blocks at a time
    ranges: list[tuple[int, int | None]] = []
    real_read = BlobStore.read

    def read(self, name, length=None, offset=0):
        ranges.append((offset, length))
        return real_read(self, name, length, offset)

    monkeypatch.setattr(BlobStore, "read", read)
    with Emulator({"blobcap": 2}, capture={"destination": "blob", "connection_string": azurite.connection_string,
                                           "container": "capture-read", "window_seconds": 3600}) as emu:  # fmt: skip
        conn = emu.connection_string("blobcap")
        _send(conn, [{"partition": "1", "body": f"x{i}"} for i in range(15)])
        emu.capture_flush()
        _send(conn, [{"partition": "1", "body": f"y{i}"} for i in range(5)])
        emu.trim("blobcap", "1", 15)  # the seam exactly where Capture ends
        location = f"{azurite.account_url}/capture-read"
        options = {
            "eventhubs.connectionString": conn,
            "eventhubs.capture.location": location,
            "eventhubs.capture.connectionString": azurite.connection_string,
            "eventhubs.capture.namespace": "emulator",
            "eventhubs.startingPosition": '{"offset": "-1"}',
        }
        rows = batch_read(options)
        assert any(where.startswith(location) for where, _ in capture_reader._MAPS), "its blocks mapped"
        assert (0, None) not in ranges and sum(1 for _, n in ranges if n and n <= 256) >= 3, ranges
        ranges.clear()
        again = batch_read({**options, "eventhubs.startingPositions": '{"1": {"seqNo": 6}}'})  # by ranges of blocks
        assert any(offset > 0 and length for offset, length in ranges) and (0, None) not in ranges, ranges
    assert [(r["partition"], r["sequenceNumber"]) for r in rows] == [("1", i) for i in range(20)]
    assert [r["body"] for r in rows] == [f"x{i}".encode() for i in range(15)] + [f"y{i}".encode() for i in range(5)]
    assert [r for r in again if r["partition"] == "1"] == [r for r in rows if r["sequenceNumber"] >= 6]


def test_a_long_history_is_read_by_a_task_per_run_of_files(captured, monkeypatch):
    from eventhubs_spark.source import EventHubsBatchReader, planner

    emu, folder = captured
    name, conn = hub(emu, 1)
    for i in range(5):
        _send(conn, [{"partition": "0", "body": f"f{i}-{j}"} for j in range(10)])
        emu.capture_flush()
    emu.trim(name, "0", 50)
    monkeypatch.setattr(planner, "CAPTURE_TASK_EVENTS", 20)
    options = {"eventhubs.connectionString": conn, "eventhubs.capture.location": folder,
               "eventhubs.capture.namespace": "emulator", "eventhubs.startingPosition": '{"seqNo": 5}'}  # fmt: skip
    splits = EventHubsBatchReader(options).partitions()
    got = [(r.start, r.end, len(s.capture.files)) for s in splits if s.capture is not None for r in s.requests]
    assert got == [(5, 30, 3), (30, 50, 2)], got  # cut where files begin, each run of files >= 20 events
    rows = batch_read(options)
    assert [r["sequenceNumber"] for r in rows] == list(range(5, 50))
