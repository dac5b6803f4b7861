"""Executor side: a task's range of a partition read from Capture files into the source's record batches.

Each event once, in sequence order, whichever file it came from; a sequence number missing from every file is looked
for again for up to ``eventhubs.capture.lateFileWait`` (Capture back-fills), then fails the task or is logged, as
``failOnDataLoss`` says. Rows carry the live read's values for the same event.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa

from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.capture.columnar import decode
from eventhubs_spark.capture.files import BlockMap, streamed_block_map
from eventhubs_spark.capture.index import file_first, partition_files
from eventhubs_spark.capture.names import NameFormat
from eventhubs_spark.capture.store import CaptureRead, CaptureStore, open_store
from eventhubs_spark.codec import arrays
from eventhubs_spark.errors import CaptureFileError, DataLossError
from eventhubs_spark.positions import geo_segments

_LOG = logging.getLogger(__name__)


def read_capture(capture: CaptureRead, settings: ConnectionSettings, partition: str, start: int, end: int,
                 fail_on_data_loss: bool, stats: dict[str, Any]) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """``[start, end)`` of ``partition`` from the Capture files ``capture`` names (``settings``: the hub's, for
    its name and the Entra identity a store may sign in with)."""
    store = open_store(capture.source, settings)
    queue = list(capture.files)
    known = {name for name, _ in queue}
    stats["via"] = "capture"
    ahead = _ReadAhead(store)
    try:
        yield from _read(store, capture, ahead, settings.hub, partition, start, end, fail_on_data_loss, stats, queue,
                         known)  # fmt: skip
    finally:
        ahead.close()


def _read(store: CaptureStore, capture: CaptureRead, ahead: _ReadAhead, hub: str, partition: str, start: int,
          end: int, fail_on_data_loss: bool, stats: dict[str, Any], queue: list[tuple[str, int | None]],
          known: set[str]) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """read_capture's walk over the files, each event once, gaps waited on and called."""
    last_of: dict[str, int] = {}  # files decoded: their last sequence number
    holes: dict[str, int] = {}  # files that stopped short of the range at a hole: the sequence number after it
    nxt = start
    lost = read = 0
    last_file: str | None = None
    waited_since: float | None = None
    while nxt < end:
        # the files that may hold nxt, the one that begins nearest below it first
        candidates = sorted(((f, n) for n, f in queue if f is not None and f <= nxt and last_of.get(n, nxt) >= nxt),
                            reverse=True)  # fmt: skip
        moved = False
        for _first, name in candidates:
            # the next file in sequence order is fetched while this one is decoded
            later_files = sorted((f, n) for n, f in queue if f is not None and f > nxt and n not in last_of)
            ahead.fetch(later_files[0][1] if later_files else None)
            seqs, decoded, more = _decoded(store, name, partition, nxt, end, ahead)
            # what the file holds ends there, unless this was a piece of it (then it is read on from there)
            last_of[name] = _UNKNOWN if more else int(seqs[-1]) if len(seqs) else -1
            batch, after, hole = _batch(seqs, decoded, nxt, end)
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
        found = _late_files(store, capture, partition, known, gap_end)
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
        count = geo_segments.count(nxt, gap_end)
        if fail_on_data_loss:
            raise DataLossError(
                f"hub {hub!r} partition {partition}: sequence numbers [{nxt}, {gap_end}) "
                f"({count} events) are in no Capture file under {capture.source.location} ({around}; waited "
                f"{capture.source.late_file_wait:g} s for a file written late, eventhubs.capture.lateFileWait) and "
                "no longer in the hub. Set failOnDataLoss=false to skip them and continue."
            )
        _LOG.warning("hub %s partition %s: %d events [%d, %d) are in no Capture file (%s) and no longer in the hub; "
                     "continuing because failOnDataLoss=false", hub, partition, count, nxt,
                     gap_end, around)  # fmt: skip
        lost += count
        nxt = gap_end
        waited_since = None
    stats.update(read=read, lost=lost, files=len(last_of))


_CACHE: OrderedDict[tuple[str, str], tuple[np.ndarray, pa.RecordBatch]] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_FILES = 4
_CACHE_MAX_BYTES = 64 << 20  # larger files: each task fetches and decodes only the blocks of its range (_MAPS)
# Where the blocks of the large files read here lie (a few numbers per block), found by reading each once a window at
# a time (_MAP_WINDOW bytes): a task then fetches the file's header and the blocks of its range alone
_MAPS: OrderedDict[tuple[str, str], BlockMap] = OrderedDict()
_MAPS_FILES = 256
_MAP_WINDOW = 4 << 20
# A task decodes a large file's blocks of its range this many bytes of them at a time (a batch read of a whole file
# holds a piece of it and its events, not the file's)
_PIECE_BYTES = 32 << 20
_UNKNOWN = 1 << 63  # a file's last sequence number, while only a piece of it was decoded


def _load(store: CaptureStore, name: str) -> bytes | BlockMap:
    """A small file's bytes (up to _CACHE_MAX_BYTES), or a large one's block map: a large file is never held whole
    in a worker unless its map cannot serve (blocks out of order, a file changed under its map)."""
    size = store.size(name)
    if size <= _CACHE_MAX_BYTES:
        return store.read(name)
    try:
        return streamed_block_map(lambda offset, length: store.read(name, length, offset), size,
                                  f"{store.where}/{name}", _MAP_WINDOW)  # fmt: skip
    except CaptureFileError:  # read whole instead: a file that changed while mapped, or one corrupt (named there)
        return store.read(name)


class _ReadAhead:
    """One file fetched on a thread of its own while the task decodes another (the download waits on the network
    and storage, the decoding on the CPU): a range over several files reads them back to back."""

    def __init__(self, store: CaptureStore) -> None:
        self.store = store
        self._pool: ThreadPoolExecutor | None = None
        self._pending: tuple[str, Future[bytes | BlockMap]] | None = None

    def fetch(self, name: str | None) -> None:
        if name is None or (self._pending is not None and self._pending[0] == name):
            return
        with _CACHE_LOCK:
            if (self.store.where, name) in _CACHE or (self.store.where, name) in _MAPS:
                return  # decoded already, or a large file read before: only its range's blocks will be fetched
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="eventhubs-capture-ahead")
        self._pending = (name, self._pool.submit(_load, self.store, name))

    def take(self, name: str) -> bytes | BlockMap:
        pending = self._pending
        if pending is not None and pending[0] == name:
            self._pending = None
            return pending[1].result()
        return _load(self.store, name)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _decoded(store: CaptureStore, name: str, partition: str, start: int, end: int,
             ahead: _ReadAhead | None = None) -> tuple[np.ndarray, pa.RecordBatch, bool]:  # fmt: skip
    """A file's events that can fall in ``[start, end)`` as the source's record batch, in sequence order, with their
    sequence numbers, and whether the file has more of the range after them: a small file whole (the process keeps
    the last few decoded, since a stream's next batches read on in the same file), a large one only the blocks of
    the range, up to _PIECE_BYTES of them (its :class:`BlockMap` kept, so the next task fetches only those)."""
    key = (store.where, name)
    where = f"{store.where}/{name}"
    data: bytes | None = None
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return (*_CACHE[key], False)
        known = _MAPS.get(key)
        if known is not None:
            _MAPS.move_to_end(key)
    if known is None:
        loaded = ahead.take(name) if ahead is not None else _load(store, name)
        if isinstance(loaded, BlockMap):
            if loaded.ordered:
                known = loaded
                with _CACHE_LOCK:
                    _MAPS[key] = known
                    while len(_MAPS) > _MAPS_FILES:
                        _MAPS.popitem(last=False)
        else:
            data = loaded
    if known is not None:
        piece = known.piece(start, end, _PIECE_BYTES)
        part = store.read(name, known.head) + (store.read(name, piece[1] - piece[0], piece[0]) if piece else b"")
        found = _partial(part, where, partition)
        if found is not None:
            return (*found, piece is not None and piece[2])
        with _CACHE_LOCK:
            _MAPS.pop(key, None)
    if data is None:  # what a map cannot vouch for is read whole (and not kept: see _CACHE_MAX_BYTES)
        data = store.read(name)
    seqs, batch = decode(data, where, partition)
    if len(seqs) > 1 and not bool(np.all(seqs[1:] > seqs[:-1])):  # not the service's order: made so, once each
        seqs, first = np.unique(seqs, return_index=True)
        batch = batch.take(arrays.indices(first))
    if len(data) <= _CACHE_MAX_BYTES:
        with _CACHE_LOCK:
            _CACHE[key] = (seqs, batch)
            while len(_CACHE) > _CACHE_FILES:
                _CACHE.popitem(last=False)
    return seqs, batch, False


def _partial(part: bytes, where: str, partition: str) -> tuple[np.ndarray, pa.RecordBatch] | None:
    """A file's header and the blocks its map chose, decoded; None when the file is to be decoded whole instead:
    their events are not in ascending order (as the service writes them; the other blocks could then hold events
    of the range too), or they do not decode (the file is not the one its map was made from, or a block is
    corrupt: decoded whole, the error names its block and byte in the file)."""
    try:
        seqs, batch = decode(part, where, partition)
    except CaptureFileError:
        return None
    return (seqs, batch) if len(seqs) < 2 or bool(np.all(seqs[1:] > seqs[:-1])) else None


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


def _batch(seqs: np.ndarray, batch: pa.RecordBatch, start: int,
           end: int) -> tuple[pa.RecordBatch | None, int, int | None]:  # fmt: skip
    """The file's events in ``[start, end)`` that follow on from ``start`` without a hole (a slice of its batch);
    the next sequence number to read after them; and, where the file stops at a hole before ``end``, the
    sequence number after the hole."""
    i = int(np.searchsorted(seqs, start))  # events below start were read already (a file twice, an overlap)
    most = min(len(seqs) - i, end - start)
    if most <= 0:
        return None, start, None
    run = seqs[i : i + most] == np.arange(start, start + most, dtype=np.int64)
    take = most if bool(run.all()) else int(np.argmin(run))
    after = i + take
    hole = int(seqs[after]) if after < len(seqs) and take < most and seqs[after] < end else None
    if take == 0:
        return None, start, hole
    return batch.slice(i, take), start + take, hole
