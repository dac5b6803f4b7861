"""A rate-limited stream through one large Capture file: each batch's task reads a slice of the same file.

Capture writes up to 500 MB a window, and a stream that backfills with ``maxEventsPerTrigger`` (or
``Trigger.AvailableNow``, which Spark splits by it) reads each file a slice per batch. Before, a task read and
decoded a file over 64 MiB whole for every slice; now the first task keeps the file's block map and every task
decodes only its range's blocks, the later ones fetching only those. This measures both ways on the same file,
in one process (no Spark: the task's own reading, ``capture.reader``): CPU and bytes fetched per slice.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import tempfile
import time
from typing import Any
from unittest import mock

from eventhubs_emulator import capture as writer
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.capture import reader as capture_reader
from eventhubs_spark.capture.columnar import decode
from eventhubs_spark.capture.store import CaptureRead, CaptureSource, LocalStore

from .results import record

EVENTS = 1_000_000
SIZE = 200
SLICE = 25_000  # maxEventsPerTrigger 100,000 over 4 partitions
BEFORE_SLICES = 3  # the old way costs the whole file per slice: a few are enough for its median
CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=a;SharedAccessKey=k;EntityPath=hub"


class _Event:
    """What the emulator's Capture writer reads of a stored event."""

    def __init__(self, seq: int, ms: int, sections: bytes) -> None:
        self.sequence_number, self.segment, self.offset, self.enqueued_ms = seq, -1, seq * (SIZE + 80), ms
        self.partition_key = None
        self.body, self.size = sections, len(sections)


class _Counting(LocalStore):
    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.fetched = 0
        self.largest = 0  # the most bytes one read returned: what a slice held of the file at once

    def read(self, name: str, length: int | None = None, offset: int = 0) -> bytes:
        data = super().read(name, length, offset)
        self.fetched += len(data)
        self.largest = max(self.largest, len(data))
        return data


def _write(root: str) -> str:
    from eventhubs_emulator import amqp

    sections = b"\x00\x53\x72" + amqp.encode_map({}) + amqp.encode_section(amqp.DATA, b"x" * SIZE)
    start = dt.datetime(2026, 1, 2, 3, 0, 0, tzinfo=dt.timezone.utc)
    ms = int(start.timestamp() * 1000)
    name = writer.file_name(writer.DEFAULT_NAME_FORMAT, "ns", "hub", "0", start)
    records = [writer.event_record(_Event(s, ms + s // 100, sections), str(s * (SIZE + 80))) for s in range(EVENTS)]
    path = os.path.join(root, *name.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(writer.container_file(records, "null"))
    return name


def _slice_now(store: _Counting, name: str, lo: int) -> tuple[float, int, int, int]:
    """One task's slice as the reader reads it now: (CPU s, bytes fetched, rows, largest read)."""
    capture = CaptureRead(CaptureSource(store.root, namespace="ns", hub="hub"), ((name, 0),))
    fetched, cpu, store.largest = store.fetched, time.process_time(), 0
    with mock.patch.object(capture_reader, "open_store", lambda *_: store):  # the counting store, as the task's
        batches = list(capture_reader.read_capture(capture, parse_connection_string(CONN), "0", lo,
                                                   min(lo + SLICE, EVENTS), True, {}))  # fmt: skip
    return time.process_time() - cpu, store.fetched - fetched, sum(b.num_rows for b in batches), store.largest


def _slice_before(store: _Counting, name: str, lo: int) -> tuple[float, int, int, int]:
    """The same slice as a task read it before: the whole file fetched and decoded, then sliced."""
    fetched, cpu = store.fetched, time.process_time()
    seqs, batch = decode(store.read(name), name, "0")
    part, _, _ = capture_reader._batch(seqs, batch, lo, min(lo + SLICE, EVENTS))
    rows = part.num_rows if part is not None else 0
    return time.process_time() - cpu, store.fetched - fetched, rows, store.fetched - fetched


def run() -> None:
    with tempfile.TemporaryDirectory() as root:
        name = _write(root)
        size = os.path.getsize(os.path.join(root, *name.split("/")))
        store = _Counting(root)
        capture_reader._MAPS.clear()
        capture_reader._CACHE.clear()
        before = [_slice_before(store, name, i * SLICE) for i in range(BEFORE_SLICES)]
        now = [_slice_now(store, name, lo) for lo in range(0, EVENTS, SLICE)]
    if any(r[2] != SLICE for r in before + now):
        raise RuntimeError("a slice read other than its events")

    def row(way: str, runs: list[tuple[float, int, int, int]]) -> dict[str, Any]:
        return {"way": way, "slices": len(runs),
                "CPU per slice (ms), median": round(statistics.median(r[0] for r in runs) * 1000, 1),
                "MB fetched per slice, median": round(statistics.median(r[1] for r in runs) / 1e6, 2),
                "largest read (MB), most": round(max(r[3] for r in runs) / 1e6, 2)}  # fmt: skip

    rows = [row("before: the whole file fetched and decoded for each slice", before),
            row("now: the first slice (its blocks mapped a window at a time, then its own fetched)", now[:1]),
            row("now: every later slice (its blocks fetched and decoded)", now[1:])]  # fmt: skip
    whole_before = statistics.median(r[0] for r in before) * len(now)
    whole_now = sum(r[0] for r in now)
    summary = {
        "file (MB)": round(size / 1e6, 1),
        "events": EVENTS,
        "slices of the stream": len(now),
        "CPU for the whole stream, before / now (s)": f"{whole_before:.1f} / {whole_now:.1f}",
        "bytes fetched for the whole stream, before / now (MB)": (
            f"{size * len(now) / 1e6:.0f} / {sum(r[1] for r in now) / 1e6:.0f}"
        ),
    }
    notes = (f"One Capture file of {EVENTS:,} events of {SIZE} bytes (null codec, the emulator's writer: blocks of "
             f"{writer.BLOCK_EVENTS} events) in a local folder, read as a stream rate-limited to {SLICE:,} events a "
             "batch for the partition reads it: each slice as the task's reader reads it now (capture.reader), and "
             f"{BEFORE_SLICES} slices as a task read them before (the whole file fetched and decoded per slice, "
             "what the reader did with files over 64 MiB); 'before' for the whole stream is its median slice times "
             "the slices. CPU is the process's (the read-ahead thread included). 'Largest read': the most bytes "
             "one read of the file returned, what a slice held of it at once (a whole file, or a window of the "
             "map).")  # fmt: skip
    record("capture_slices", summary, rows, notes)
    print(json.dumps(summary, indent=2))
