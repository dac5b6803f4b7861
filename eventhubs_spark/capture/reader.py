"""Executor side: a task's range of a partition read from Capture files into the source's record batches.

The driver gives the task the files it found for the range, in sequence order. Each event is yielded once, in
sequence order, whichever file it came from: a file written twice, or files that overlap, give their events
once (an event below the next sequence number to read is one already read). A sequence number missing from
every file is a gap. Before calling it one, the reader lists the partition's files again, for up to
``eventhubs.capture.lateFileWait``, since Capture back-fills after a storage outage; a file that appears and
covers the gap is read in its place. A gap that stays fails the task (``failOnDataLoss=true``), naming the
partition, the missing range and the files on either side, or is logged with its count and passed over.

Rows have the live read's values for the same event: body, partition, offset, sequence number, enqueued time
(to the millisecond where the file has ``x-opt-enqueued-time``, else to the second), partition key, properties
and the system properties Capture kept, as text the way the live read makes it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from .. import segments
from ..arrow import ARROW_SCHEMA
from ..codec.columns import to_text
from ..errors import DataLossError
from ..ranges import RangeRequest
from .files import CapturedEvents, read_file
from .index import file_first, partition_files
from .names import NameFormat
from .store import CaptureRead, CaptureStore, open_store

_LOG = logging.getLogger("eventhubs_spark")
_OWN_COLUMNS = frozenset({"x-opt-sequence-number", "x-opt-offset", "x-opt-enqueued-time", "x-opt-partition-key"})
_MAP = ARROW_SCHEMA.field("properties").type
_TIME = ARROW_SCHEMA.field("enqueuedTime").type


def read_capture(request: RangeRequest, stats: dict[str, Any]) -> Iterator[pa.RecordBatch]:
    """``[request.start, request.end)`` of the partition from the Capture files ``request.capture`` names."""
    capture = request.capture
    assert capture is not None
    store = open_store(capture.source, request.settings)
    queue = list(capture.files)
    known = {name for name, _ in queue}
    last_of: dict[str, int] = {}  # files decoded: their last sequence number
    holes: dict[str, int] = {}  # files that stopped short of the range at a hole: the sequence number after it
    nxt, end = request.start, request.end
    lost = read = 0
    last_file: str | None = None
    waited_since: float | None = None
    stats["via"] = "capture"
    while nxt < end:
        # the files that may hold nxt, the one that begins nearest below it first
        candidates = sorted(((f, n) for n, f in queue if f is not None and f <= nxt and last_of.get(n, nxt) >= nxt),
                            reverse=True)  # fmt: skip
        moved = False
        for _first, name in candidates:
            events = _decoded(store, name)
            last_of[name] = events.sequence_numbers[-1] if len(events) else -1
            batch, after, hole = _batch(events, request.partition, nxt, end)
            if hole is not None:
                holes[name] = hole
            if batch is not None:
                read += batch.num_rows
                last_file, nxt, moved = name, after, True
                yield batch
                break
        if moved:
            waited_since = None
            continue
        # no file holds nxt: a gap up to the next event a file holds (or the range's end)
        later = sorted((f, n) for n, f in queue if f is not None and f > nxt)
        gap_end = min([end, *(f for f, _ in later[:1]), *(h for h in holes.values() if h > nxt)])
        found = _late_files(store, capture, request.partition, known, gap_end)
        if found:
            queue += found
            continue
        waited_since = waited_since if waited_since is not None else time.monotonic()
        if time.monotonic() - waited_since < capture.source.late_file_wait:
            time.sleep(min(1.0, capture.source.late_file_wait))
            continue
        inside = [name for name, h in holes.items() if h == gap_end]
        around = (f"after {last_file}" if last_file else "at the start of the range") + (
            f", a hole inside {inside[0]}"
            if inside
            else f", before {later[0][1]}"
            if later
            else ", with no file after it"
        )
        count = segments.count(nxt, gap_end)
        if request.fail_on_data_loss:
            raise DataLossError(
                f"hub {request.settings.hub!r} partition {request.partition}: sequence numbers [{nxt}, {gap_end}) "
                f"({count} events) are in no Capture file under {capture.source.location} ({around}; waited "
                f"{capture.source.late_file_wait:g} s for a file written late, eventhubs.capture.lateFileWait) and "
                "no longer in the hub. Set failOnDataLoss=false to skip them and continue."
            )
        _LOG.warning("hub %s partition %s: %d events [%d, %d) are in no Capture file (%s) and no longer in the hub; "
                     "continuing because failOnDataLoss=false", request.settings.hub, request.partition, count, nxt,
                     gap_end, around)  # fmt: skip
        lost += count
        nxt = gap_end
        waited_since = None
    stats.update(read=read, lost=lost, files=len(last_of))


_CACHE: OrderedDict[tuple[str, str], CapturedEvents] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_FILES = 4
_CACHE_MAX_BYTES = 64 << 20  # larger files are decoded for each task that reads them


def _decoded(store: CaptureStore, name: str) -> CapturedEvents:
    """A file's events: the process keeps the last few small files decoded, since a stream's next batches read on
    in the same file."""
    key = (store.where, name)
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    data = store.read(name)
    events = read_file(data, f"{store.where}/{name}")
    if len(data) <= _CACHE_MAX_BYTES:
        with _CACHE_LOCK:
            _CACHE[key] = events
            while len(_CACHE) > _CACHE_FILES:
                _CACHE.popitem(last=False)
    return events


def _late_files(store: CaptureStore, capture: CaptureRead, partition: str, known: set[str],
                end: int) -> list[tuple[str, int | None]]:  # fmt: skip
    """Files not known before that begin before ``end``: the partition listed again now."""
    source = capture.source
    found: list[tuple[str, int | None]] = []
    for f in partition_files(store, NameFormat(source.name_format), source, partition):
        if f.name in known:
            continue
        first = file_first(store, f.name)
        known.add(f.name)
        if first is not None and first < end:
            found.append((f.name, first))
    return found


def _batch(events: CapturedEvents, partition: str, start: int,
           end: int) -> tuple[pa.RecordBatch | None, int, int | None]:  # fmt: skip
    """The file's events in ``[start, end)`` that follow on from ``start`` without a hole, as a record batch; the
    next sequence number to read after them; and, where the file stops at a hole before ``end``, the sequence
    number after the hole."""
    seqs = events.sequence_numbers
    keep: list[int] = []
    nxt = start
    hole = None
    for i, seq in enumerate(seqs):
        if seq < nxt:
            continue  # read already (a file written twice, or files that overlap)
        if seq >= end:
            break
        if seq != nxt:
            hole = seq
            break
        keep.append(i)
        nxt += 1
    if not keep:
        return None, nxt, hole
    props = [_texts(events.properties[i]) for i in keep]
    system = [_texts({k: v for k, v in events.system_properties[i].items() if k not in _OWN_COLUMNS}) for i in keep]
    keys = [events.system_properties[i].get("x-opt-partition-key") for i in keep]
    columns = [
        pa.array([events.bodies[i] or b"" for i in keep], pa.binary()),
        pa.array([partition] * len(keep), pa.string()),
        pa.array([events.offsets[i] for i in keep], pa.string()),
        pa.array([seqs[i] for i in keep], pa.int64()),
        pa.array([events.enqueued_ms[i] * 1000 for i in keep], pa.int64()).cast(_TIME),
        pa.nulls(len(keep), pa.string()),
        pa.array([None if k is None else str(k) for k in keys], pa.string()),
        pa.array(props, _MAP),
        pa.array(system, _MAP),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA), nxt, hole


def _texts(values: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(key, to_text(value)) for key, value in values.items()]
