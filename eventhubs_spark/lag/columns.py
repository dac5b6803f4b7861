"""A trigger's lag figures as arrays, one entry a partition.

This is how :class:`~eventhubs_spark.lag.LagTracker` works them out on a hub whose positions are plain sequence
numbers (every hub but a geo-replicated one).

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import datetime as dt
import itertools
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from eventhubs_spark.positions import geo_segments
from eventhubs_spark.positions.partition_catalog import PartitionInfo, by_number

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_MICROSECOND = dt.timedelta(microseconds=1)


def exact_micros(when: dt.datetime) -> int:
    """Microseconds since 1970 (UTC), exactly (an integer division of the timedelta, not a float)."""
    return (when - _EPOCH) // _MICROSECOND


class InfoColumns:
    """Partition properties, in the order of ``keys``, as arrays: each partition's last enqueued sequence number
    (``last``) and its last enqueued time in µs (``time``; ``has_time``: known and the partition not empty).

    Made again each trigger only for the partitions whose properties object changed: a Trigger.AvailableNow run
    plans every batch from the same objects, and a running stream's vouched ends keep the object of every
    partition that did not move. Given the very mapping they were last read from (``source``: planning's
    properties mappings are made anew, never changed once given), they are taken as they are: a trigger reads
    them twice (its figures, then what it planned), and looking 1,024 partitions up again was 0.07 ms each time."""

    __slots__ = ("has_time", "infos", "keys", "last", "source", "time")

    def __init__(self, keys: tuple[str, ...], infos: list[PartitionInfo]) -> None:
        n = len(keys)
        self.keys = keys
        self.infos = infos
        self.source: Mapping[str, PartitionInfo] | None = None
        self.last = np.empty(n, np.int64)
        self.time = np.zeros(n, np.int64)
        self.has_time = np.zeros(n, bool)
        self._take(range(n))

    def _take(self, indexes: Sequence[int] | range) -> None:
        infos, last, time, has_time = self.infos, self.last, self.time, self.has_time
        for i in indexes:
            info = infos[i]
            last[i] = info.last_enqueued_sequence_number
            when = info.last_enqueued_time
            if info.is_empty or when is None:
                has_time[i] = False
                time[i] = 0
            else:
                has_time[i] = True
                time[i] = exact_micros(when)

    @classmethod
    def of(cls, keys: tuple[str, ...], infos: Mapping[str, PartitionInfo],
           previous: InfoColumns | None) -> InfoColumns | None:  # fmt: skip
        """The columns of ``infos`` for ``keys``, reusing ``previous`` where its objects are the same; None when a
        partition of ``keys`` has no properties, or a position has a replication segment (the loop's cases)."""
        if previous is not None and previous.source is infos and previous.keys == keys:
            return previous  # read from this very mapping for these keys, and fit for arrays then
        try:
            objects = list(map(infos.__getitem__, keys))
        except KeyError:
            return None
        if previous is not None and previous.keys == keys:
            changed = np.flatnonzero(np.fromiter(map(operator.is_not, objects, previous.infos), bool, len(keys)))
            if len(changed):
                previous.infos = objects
                try:
                    previous._take(changed.tolist())
                except OverflowError:  # a number past 64 bits: these columns are half made, never used again
                    previous.keys = ()
                    return None
            columns = previous
        else:
            try:
                columns = cls(keys, objects)
            except OverflowError:
                return None
        if len(keys) and int(columns.last.max()) >= geo_segments.SEQ_MASK:
            columns.source = None
            return None  # a position with a replication segment: counted across segments by the loop
        columns.source = infos
        return columns


_UNKNOWN = (-1, 0)  # no read said for the partition


class ReadColumns:
    """Where the tasks' reading of each partition (in the order of ``keys``) ended, and the enqueued time (µs) of
    the event before it: the tracker's reads dict as arrays, kept up to date as each task says what it read
    (:meth:`take`, under the tracker's lock) and made again only when a task reads a partition outside ``keys``.

    Why in place: after every batch of a 1,024-partition hub every partition has a new read, and making the arrays
    again from the dict was half of a trigger's lag figures (0.13 ms in a quiet process); a task's report sets two
    numbers as it arrives, while the batch still runs."""

    __slots__ = ("index", "keys", "known", "position", "time")

    def __init__(self, keys: tuple[str, ...], reads: Mapping[str, tuple[int, int]]) -> None:
        n = len(keys)
        self.keys = keys
        self.index = {k: i for i, k in enumerate(keys)}
        rows = map(reads.get, keys, itertools.repeat(_UNKNOWN))
        flat = np.fromiter(itertools.chain.from_iterable(rows), np.int64, 2 * n).reshape(n, 2)
        self.position = flat[:, 0].copy()
        self.time = flat[:, 1].copy()
        self.known = self.position >= 0  # a read's end is never negative

    def take(self, partition: str, end: int, micros: int) -> bool:
        """The tracker's read of ``partition`` is now (``end``, ``micros``); False where the partition is not one
        of ``keys`` (the arrays must be made again)."""
        i = self.index.get(partition)
        if i is None:
            return False
        self.position[i] = end
        self.time[i] = micros
        self.known[i] = True
        return True

    def copy(self) -> ReadColumns:
        """The arrays as they are now (a trigger's figures keep them; tasks' reports go on changing these)."""
        held = ReadColumns.__new__(ReadColumns)
        held.keys, held.index = self.keys, self.index
        held.position, held.time, held.known = self.position.copy(), self.time.copy(), self.known.copy()
        return held


@dataclass
class MovingColumns:
    """Where each partition's reading stood (``position``), since when (``since``, the tracker's clock), for how
    many batch-planning triggers (``batches``), and whether its stall was said (``said``); ``present``: a
    partition the tracker has seen (a new one starts its count at this trigger)."""

    keys: tuple[str, ...]
    index: dict[str, int]
    position: np.ndarray
    since: np.ndarray
    batches: np.ndarray
    said: np.ndarray
    present: np.ndarray

    @classmethod
    def empty(cls, keys: tuple[str, ...]) -> MovingColumns:
        n = len(keys)
        return cls(keys, {k: i for i, k in enumerate(keys)}, np.zeros(n, np.int64), np.zeros(n, np.float64),
                   np.zeros(n, np.int64), np.zeros(n, bool), np.zeros(n, bool))  # fmt: skip


@dataclass
class LagColumns:
    """One trigger's figures as arrays in the order of ``keys`` (what :class:`~eventhubs_spark.lag.
    LagReport` makes its per-partition figures from when they are asked for): ``seconds`` is NaN where unknown,
    ``read_known`` says where the last read event's time (``read_time``, µs) is the one before ``committed``;
    ``stalled`` holds only the stalled partitions, with why."""

    keys: tuple[str, ...]
    infos: list[PartitionInfo]
    committed: np.ndarray
    latest: np.ndarray
    events: np.ndarray
    seconds: np.ndarray
    read_known: np.ndarray
    read_time: np.ndarray
    stalled: dict[str, str]
    order: list[int] | None  # the partition-number order, None when ``keys`` are in it already

    def summary(self) -> dict[str, object]:
        """As :meth:`~eventhubs_spark.lag.LagReport.summary` computes it from per-partition figures (the
        same sums, in the same order, so the same floats)."""
        n = len(self.keys)
        seconds = self.seconds
        unknown = bool(np.isnan(seconds).any())
        known = [] if unknown or not n else seconds.tolist()
        return {
            "avgOffsetsBehindLatest": round(int(self.events.sum()) / n, 3) if n else 0.0,
            "maxOffsetsBehindLatest": int(self.events.max()) if n else 0,
            "minOffsetsBehindLatest": int(self.events.min()) if n else 0,
            "avgSecondsBehindLatest": round(sum(known) / len(known), 6) if known else None,
            "maxSecondsBehindLatest": round(max(known), 6) if known else None,
            "minSecondsBehindLatest": round(min(known), 6) if known else None,
            "stalledPartitions": sorted(self.stalled, key=by_number),
        }

    def per_partition(self, most: int | None = None) -> tuple[dict[str, int], dict[str, float | None]]:
        """Each partition's events and seconds behind, in partition order; with ``most``, only the ``most``
        furthest behind (:func:`most_behind`), picked over the arrays before any dict is made. The seconds are µs
        differences over 10**6, which ``round(s, 6)`` (what the figures objects' path applies) leaves as they
        are."""
        keys, events, seconds = self.keys, self.events, self.seconds
        if self.order is not None:
            keys = tuple(keys[i] for i in self.order)
            events, seconds = events[self.order], seconds[self.order]
        if most is not None and len(keys) > most:
            held = np.zeros(len(keys), bool)
            if self.stalled:
                index = {k: i for i, k in enumerate(keys)}
                held[[index[p] for p in self.stalled]] = True
            picked = most_behind(events, seconds, held, most)
            keys, events, seconds = tuple(keys[i] for i in picked), events[picked], seconds[picked]
        shown = [None if s != s else s for s in seconds.tolist()]  # NaN: unknown
        return dict(zip(keys, events.tolist(), strict=True)), dict(zip(keys, shown, strict=True))

    def figures(self) -> tuple[object, ...]:
        """What decides whether a lag file is written again: the partitions, their events and seconds behind, and
        the stalled ones."""
        return (self.keys, self.events.tobytes(), self.seconds.tobytes(), tuple(sorted(self.stalled.items())))


def most_behind(events: np.ndarray, seconds: np.ndarray, held: np.ndarray, most: int) -> list[int]:
    """The indices (ascending) of the ``most`` partitions furthest behind, of arrays in partition order: those
    ``held`` (stalled) first, then the most events behind, then the most seconds (NaN: unknown, last), then the
    lower partition number (eventhubs.lag.progressPartitions)."""
    late = np.where(np.isnan(seconds), -1.0, seconds)
    # lexsort sorts by its last key first; the index keeps partition order among equals
    picked = np.lexsort((np.arange(len(events)), -late, -events, ~held))[:most]
    return sorted(picked.tolist())
