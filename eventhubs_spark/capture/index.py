"""The driver's view of a hub's Capture files: which files hold a partition's range of sequence numbers.

Also where a partition's captured history begins, and where an enqueued time falls in it.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import bisect
import datetime as dt
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.capture.columnar import decode
from eventhubs_spark.capture.files import NeedMore, first_sequence
from eventhubs_spark.capture.names import FileName, NameFormat
from eventhubs_spark.capture.store import CaptureSource, CaptureStore, open_store
from eventhubs_spark.codec import arrays

_LOG = logging.getLogger(__name__)
HEAD = 4096  # bytes read of a file to find its first sequence number (a header is about 600)


def partition_files(store: CaptureStore, names: NameFormat, source: CaptureSource, partition: str) -> list[FileName]:
    """A partition's Capture files, by window start (then name), as listed now."""
    prefix = names.prefix(source.namespace, source.hub, partition if names.lists_by_partition else None)
    out = []
    for name in store.names(prefix):
        parsed = names.parse(name)
        if (parsed is not None and parsed.partition == partition and parsed.hub.lower() == source.hub.lower()
                and parsed.namespace.lower() == source.namespace.lower()):  # fmt: skip
            out.append(parsed)
    out.sort(key=lambda f: (f.start, f.name))
    return out


def file_first(store: CaptureStore, name: str) -> int | None:
    """A file's first sequence number (None: it holds no event), from as few of its first bytes as will do."""
    length = HEAD
    while True:
        head = store.read(name, length)
        whole = len(head) < length
        try:
            return first_sequence(head, f"{store.where}/{name}", whole)
        except NeedMore:
            length *= 4


class CaptureIndex:
    """One hub's Capture files as the driver plans with them (built lazily: readers are pickled)."""

    def __init__(self, source: CaptureSource, settings: ConnectionSettings, refresh_every: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, store: CaptureStore | None = None) -> None:  # fmt: skip
        self.source = source
        self.settings = settings
        self.names = NameFormat(source.name_format)
        self.refresh_every = refresh_every
        self.clock = clock
        self._store = store
        self._listed: dict[str, tuple[float, list[FileName]]] = {}
        self._first: dict[str, int | None] = {}
        self._said_empty: set[str] = set()  # partitions whose empty listing was said (once each)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_store"] = None  # clients and sockets stay in the process that opened them
        state["_listed"] = {}  # a reader travels in every task: its caches (a hub's many files) stay on the driver
        state["_first"] = {}
        return state

    @property
    def store(self) -> CaptureStore:
        if self._store is None:
            self._store = open_store(self.source, self.settings)
        return self._store

    def files(self, partition: str, fresh: bool = False) -> list[FileName]:
        """The partition's files, listed again when asked or when the last listing is older than refresh_every."""
        listed = self._listed.get(partition)
        now = self.clock()
        if fresh or listed is None or now - listed[0] >= self.refresh_every:
            listed = self._listed[partition] = (now, partition_files(self.store, self.names, self.source, partition))
            if not listed[1] and partition not in self._said_empty:
                self._said_empty.add(partition)
                prefix = self.names.prefix(self.source.namespace, self.source.hub,
                                           partition if self.names.lists_by_partition else None)  # fmt: skip
                _LOG.warning("eventhubs: hub %s partition %s: no Capture file under %s/%s named by %s; if Capture "
                             "writes this hub, check eventhubs.capture.location, eventhubs.capture.namespace (the "
                             "{Namespace} in the names, here %r) and eventhubs.capture.nameFormat", self.source.hub,
                             partition, self.store.where, prefix, self.names.text, self.source.namespace)  # fmt: skip
        return listed[1]

    def firsts(self, names: list[str]) -> list[int | None]:
        """First sequence numbers of ``names`` (read in parallel where not yet known)."""
        todo = [n for n in dict.fromkeys(names) if n not in self._first]
        if len(todo) == 1:
            self._first[todo[0]] = file_first(self.store, todo[0])
        elif todo:
            with ThreadPoolExecutor(max_workers=min(16, len(todo))) as pool:
                for name, first in zip(todo, pool.map(lambda n: file_first(self.store, n), todo), strict=True):
                    self._first[name] = first
        return [self._first[n] for n in names]

    def _key(self, files: list[FileName], i: int) -> float:
        """The first sequence number at or after file ``i`` (an empty file takes its next one's; none: infinity)."""
        while i < len(files):
            first = self.firsts([files[i].name])[0]
            if first is not None:
                return first
            i += 1
        return float("inf")

    def earliest(self, partition: str) -> int | None:
        """The first captured sequence number of the partition (None: nothing captured)."""
        files = self.files(partition)
        for i in range(0, len(files), 8):
            for first in self.firsts([f.name for f in files[i : i + 8]]):
                if first is not None:
                    return first
        return None

    def covering(self, partition: str, start: int, end: int, fresh: bool = False) -> tuple[tuple[str, int | None],
                                                                                            ...]:  # fmt: skip
        """The files that hold ``[start, end)`` of the partition, in order: the last one that begins at or before
        ``start``, then every one that begins before ``end`` (their first sequence numbers with them)."""
        files = self.files(partition, fresh)
        if not files or end <= start:
            return ()
        lo, hi = 0, len(files)  # the first file whose key exceeds start, by binary search
        while lo < hi:
            mid = (lo + hi) // 2
            if self._key(files, mid) <= start:
                lo = mid + 1
            else:
                hi = mid
        i = max(0, lo - 1)
        while i > 0 and self.firsts([files[i].name])[0] is None:  # back to the non-empty file at or before start
            i -= 1
        out: list[tuple[str, int | None]] = []
        step = 8
        while i < len(files):
            chunk = files[i : i + step]
            for f, first in zip(chunk, self.firsts([f.name for f in chunk]), strict=True):
                if first is not None and first >= end and out:
                    return tuple(out)
                if first is not None:
                    out.append((f.name, first))
            i += step
        return tuple(out)

    def find_time(self, partition: str, after_us: int) -> int | None:
        """The sequence number of the first captured event enqueued after ``after_us`` (epoch microseconds: a
        position's enqueued time is exclusive); None when Capture holds none that late. Events after a time begin
        in the last file named at or before it."""
        files = self.files(partition)
        when = dt.datetime.fromtimestamp(after_us // 1_000_000, dt.timezone.utc)
        i = max(0, bisect.bisect_right([f.start for f in files], when) - 1)
        for f in files[i:]:
            seqs, batch = decode(self.store.read(f.name), f"{self.store.where}/{f.name}", partition)
            later = np.flatnonzero(arrays.int_values(batch.column("enqueuedTime")) > after_us)  # (to_numpy: pandas)
            if len(later):
                return int(seqs[later[0]])
        return None
