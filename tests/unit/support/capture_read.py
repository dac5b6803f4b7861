"""Helpers shared by the unit tests that came from test_capture_read.py."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from eventhubs_emulator import capture as writer
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.capture.reader import read_capture
from eventhubs_spark.capture.store import CaptureRead, CaptureSource, LocalStore
from tests.unit.support.capture_files import _Event, _file

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=a;SharedAccessKey=TOPSECRET;EntityPath=hub"


SETTINGS = parse_connection_string(CONN)


T0 = dt.datetime(2026, 1, 2, 3, 0, 0, tzinfo=dt.timezone.utc)


MS0 = int(T0.timestamp() * 1000)


def twice(root: Path, name: str) -> str:
    """The file ``name`` written again under the next second's name, as a retried write would."""
    start = dt.datetime.strptime(name[-24:-5], "%Y/%m/%d/%H/%M/%S").replace(tzinfo=dt.timezone.utc)
    again = name[:-24] + (start + dt.timedelta(seconds=1)).strftime("%Y/%m/%d/%H/%M/%S") + ".avro"
    (root / again).parent.mkdir(parents=True, exist_ok=True)
    (root / again).write_bytes((root / name).read_bytes())
    return again


def write(root: Path, partition: str, minute: int, seqs: list[int], second: int = 0, codec: str = "null") -> str:
    """A Capture file of ``seqs`` (enqueued a second apart from the window's start) for the window at ``minute``."""
    start = T0 + dt.timedelta(minutes=minute, seconds=second)
    name = writer.file_name(writer.DEFAULT_NAME_FORMAT, "ns", "hub", partition, start)
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    ms = int(start.timestamp() * 1000)
    data = _file([_Event(s, ms + 1000 * i + 1, f"e{s}".encode(), key=f"k{s % 3}", props={"n": s})
                  for i, s in enumerate(seqs)], codec)  # fmt: skip
    # whole or not at all, as Capture's blobs appear (a reader polling for a late file never sees half of it)
    partial = root.parent / f".{root.name}-{partition}-{minute}-{second}.partial"
    partial.write_bytes(data)
    os.replace(partial, path)
    return name


class CountingStore(LocalStore):
    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.reads: list[tuple[str, int | None]] = []
        self.ranges: list[tuple[str, int, int | None]] = []

    def read(self, name: str, length: int | None = None, offset: int = 0) -> bytes:
        self.reads.append((name, length))
        self.ranges.append((name, offset, length))
        return super().read(name, length, offset)


def source(root: Path, wait: float = 0.0) -> CaptureSource:
    return CaptureSource(str(root), namespace="ns", hub="hub", late_file_wait=wait)


def read(root: Path, files, start: int, end: int, stats: dict | None = None, fail: bool = True, wait: float = 0.0):
    """The batches of partition 0's ``[start, end)`` read from ``files`` (name, first sequence number)."""
    return read_capture(CaptureRead(source(root, wait), tuple(files)), SETTINGS, "0", start, end, fail,
                        {} if stats is None else stats)  # fmt: skip


def seqs_of(batches) -> list[int]:
    return [s for b in batches for s in b.column("sequenceNumber").to_pylist()]
