"""How far behind a stream is, per partition, each trigger: in events and in time, and which partitions stall.

Spark's Kafka source answers "how far behind are we?" in every progress report; a Python source gets no
metrics hook on Spark 4.0 to 4.3, so the stream's driver works the figures out itself at each trigger
(:class:`LagTracker`) and gives them where a user can see them: a log line, the progress's
``latestOffset`` on Spark 4.2+ (the only field of a progress report a Python source fills), and a small
JSON file per trigger (:class:`LagFiles`) that ``eventhubs-spark lag`` and the notebooks read.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from eventhubs_spark.auth.storage import local_path
from eventhubs_spark.planning import offset_ranges
from eventhubs_spark.planning.lag_columns import (
    InfoColumns,
    LagColumns,
    MovingColumns,
    ReadColumns,
    exact_micros,
    most_behind,
)
from eventhubs_spark.planning.offset_ranges import partition_order
from eventhubs_spark.positions import geo_segments
from eventhubs_spark.positions.partition_catalog import PartitionInfo, by_number

UTC = dt.timezone.utc
_LOG = logging.getLogger(__name__)

KEEP_FILES = 100  # trigger files kept per hub (Spark keeps 100 batches of its own logs by default)
# Trigger files waiting for the writer thread at most (LagFiles.write_later): past that the oldest waiting one is
# left out, and said, when the location takes longer to write than triggers come.
WAITING_FILES = 16
# How long the writer thread lets a trigger finish before writing its file: the file is CPU in the same
# interpreter (7,000 values at 1,024 partitions), and the runner's thread Spark waits on still has the trigger's
# progress report to make.
WRITE_AFTER = 0.02
FILE_DIRECTORY = "eventhubs-lag"  # under the query's checkpoint location, one folder per hub


def _micros(when: dt.datetime) -> int:
    """Microseconds since 1970 (UTC), exactly, as the array path counts them (:func:`exact_micros`)."""
    return exact_micros(when)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)


def _time(micros: int | None) -> dt.datetime | None:
    return None if micros is None else _EPOCH + dt.timedelta(microseconds=micros)


_ISO: dict[dt.datetime, str] = {}  # times written before, as text: a trigger file has two a partition


def _iso(when: dt.datetime | None) -> str | None:
    """``when.isoformat()``, remembered: a partition's last enqueued and last read times stay the same trigger
    after trigger until it moves, and a 1,024-partition hub's file has 2,048 of them."""
    if when is None:
        return None
    if when.tzinfo is not UTC:  # equal times in two zones are one key, but not one text
        return when.isoformat()
    text = _ISO.get(when)
    if text is None:
        if len(_ISO) >= 16_384:
            _ISO.clear()
        text = _ISO[when] = when.isoformat()
    return text


@dataclass(slots=True)
class PartitionLag:
    """One partition's figures at a trigger. ``committed``: the next position the query reads (its batches
    so far have read everything before it); ``latest``: the next the partition will assign. Not changed once
    made, but not frozen: a frozen dataclass takes four times as long to make, and a trigger of a 1,024-partition
    hub makes 1,024."""

    partition: str
    committed: int
    latest: int
    events: int
    seconds: float | None
    last_enqueued: dt.datetime | None
    last_read: dt.datetime | None
    stalled: str | None = None  # why, when stalled

    def to_json(self) -> dict[str, Any]:
        return {
            "committed": geo_segments.show(self.committed),
            "latest": geo_segments.show(self.latest),
            "eventsBehind": self.events,
            "secondsBehind": None if self.seconds is None else round(self.seconds, 6),
            "lastEnqueuedTime": _iso(self.last_enqueued),
            "lastReadEnqueuedTime": _iso(self.last_read),
            "stalled": self.stalled,
        }

    @classmethod
    def from_json(cls, partition: str, doc: Mapping[str, Any]) -> PartitionLag:
        def when(key: str) -> dt.datetime | None:
            value = doc.get(key)
            return None if value is None else dt.datetime.fromisoformat(str(value))

        seconds = doc.get("secondsBehind")
        return cls(
            partition,
            geo_segments.parse(str(doc["committed"])),
            geo_segments.parse(str(doc["latest"])),
            int(doc["eventsBehind"]),
            None if seconds is None else float(seconds),
            when("lastEnqueuedTime"),
            when("lastReadEnqueuedTime"),
            doc.get("stalled"),
        )


class LagReport:
    """A trigger's figures for one hub: per partition, and summed up under the Kafka source's names.

    Made either from per-partition figures (``partitions``), or by the tracker from arrays (``columns``,
    :class:`~eventhubs_spark.planning.lag_columns.LagColumns`), whose per-partition figures are made only when
    asked for: a trigger's progress report and summary come from the arrays."""

    __slots__ = ("_columns", "_partitions", "at", "hub")

    def __init__(self, hub: str, at: dt.datetime, partitions: Mapping[str, PartitionLag] | None = None,
                 columns: LagColumns | None = None) -> None:  # fmt: skip
        self.hub = hub
        self.at = at
        self._partitions = partitions
        self._columns = columns

    @property
    def partitions(self) -> Mapping[str, PartitionLag]:
        """Each partition's figures, in the order they were worked out."""
        if self._partitions is None:
            columns = self._columns
            keys = columns.keys if columns is not None else ()
            self._partitions = {p: self._made(i) for i, p in enumerate(keys)}
        return self._partitions

    def _made(self, i: int) -> PartitionLag:
        """The figures of the ``i``-th partition of the columns."""
        columns = self._columns
        assert columns is not None
        p, info = columns.keys[i], columns.infos[i]
        events = int(columns.events[i])
        last_enqueued = None if info.is_empty else info.last_enqueued_time
        last_read = _time(int(columns.read_time[i])) if columns.read_known[i] else None
        seconds: float | None = float(columns.seconds[i])
        if events == 0:
            last_read = last_read or last_enqueued
        elif seconds != seconds:
            seconds = None
        return PartitionLag(p, int(columns.committed[i]), int(columns.latest[i]), events, seconds, last_enqueued,
                            last_read, columns.stalled.get(p))  # fmt: skip

    def partition(self, p: str) -> PartitionLag:
        """One partition's figures."""
        columns = self._columns
        if self._partitions is None and columns is not None:
            return self._made(columns.keys.index(p))
        return self.partitions[p]

    def stalled(self) -> dict[str, str]:
        """The stalled partitions and why, in the order they were worked out."""
        if self._partitions is None and self._columns is not None:
            return dict(self._columns.stalled)
        return {p: v.stalled for p, v in self.partitions.items() if v.stalled}

    def figures(self) -> tuple[object, ...]:
        """What tells two triggers' figures apart (a lag file is written again when they differ)."""
        if self._partitions is None and self._columns is not None:
            return self._columns.figures()
        return tuple((p, v.events, v.seconds, v.stalled) for p, v in sorted(self.partitions.items()))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LagReport):
            return NotImplemented
        return (self.hub, self.at, dict(self.partitions)) == (other.hub, other.at, dict(other.partitions))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LagReport(hub={self.hub!r}, at={self.at!r}, partitions={dict(self.partitions)!r})"

    def ordered(self) -> list[tuple[str, PartitionLag]]:
        """The partitions' figures in partition order."""
        return sorted(self.partitions.items(), key=lambda kv: by_number(kv[0]))

    def summary(self) -> dict[str, Any]:
        """``avg/max/minOffsetsBehindLatest`` as the Kafka source names them (events here), the same in
        seconds (None while any partition's time is unknown), and the stalled partitions."""
        if self._partitions is None and self._columns is not None:
            return self._columns.summary()
        events = [p.events for p in self.partitions.values()]
        seconds = [p.seconds for p in self.partitions.values() if p.seconds is not None]
        if len(seconds) < len(self.partitions):
            seconds = []  # a partition's time unknown: the figures over the others would say less than is true
        out: dict[str, Any] = {
            "avgOffsetsBehindLatest": round(sum(events) / len(events), 3) if events else 0.0,
            "maxOffsetsBehindLatest": max(events, default=0),
            "minOffsetsBehindLatest": min(events, default=0),
            "avgSecondsBehindLatest": round(sum(seconds) / len(seconds), 6) if seconds else None,
            "maxSecondsBehindLatest": round(max(seconds), 6) if seconds else None,
            "minSecondsBehindLatest": round(min(seconds), 6) if seconds else None,
        }
        out["stalledPartitions"] = sorted((p for p, v in self.partitions.items() if v.stalled), key=by_number)
        return out

    def progress(self, most: int | None = None) -> dict[str, Any]:
        """What a progress report carries: the summary, and each partition's events and seconds behind; with
        ``most`` (eventhubs.lag.progressPartitions) and more partitions than that, only the ``most`` partitions
        furthest behind (:func:`~eventhubs_spark.planning.lag_columns.most_behind`), in partition order, and
        ``partitionsShown`` saying so.

        Why a bound: Spark copies the whole report into every progress event (listeners, the UI, the event log);
        at 1,024 partitions the two maps were 26 KB a trigger and cost Spark's side of ``latestOffset`` 1-2 ms
        a trigger, half of all it took (bench partitions). The summary and the stalled list stay whole, and the
        lag files and ``eventhubs-spark lag`` keep every partition."""
        if self._partitions is None and self._columns is not None:
            summary = self._columns.summary()
            events, seconds = self._columns.per_partition(most)
            total = len(self._columns.keys)
        else:
            summary = self.summary()
            ordered = self.ordered()
            total = len(ordered)
            if most is not None and total > most:
                picked = most_behind(
                    np.fromiter((v.events for _, v in ordered), np.int64, total),
                    np.fromiter((np.nan if v.seconds is None else v.seconds for _, v in ordered), np.float64, total),
                    np.fromiter((bool(v.stalled) for _, v in ordered), bool, total),
                    most,
                )
                ordered = [ordered[i] for i in picked]
            events = {p: v.events for p, v in ordered}
            seconds = {p: None if v.seconds is None else round(v.seconds, 6) for p, v in ordered}
        out = {**summary, "eventsBehindLatest": events, "secondsBehindLatest": seconds}
        if len(events) < total:
            out["partitionsShown"] = (f"the {len(events)} of {total} partitions furthest behind (every partition: the "
                                      "lag files, eventhubs-spark lag; eventhubs.lag.progressPartitions)")  # fmt: skip
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "hub": self.hub,
            "time": self.at.isoformat(),
            **self.summary(),
            "partitions": {p: v.to_json() for p, v in self.ordered()},
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> LagReport:
        return cls(
            str(doc["hub"]),
            dt.datetime.fromisoformat(str(doc["time"])),
            {str(p): PartitionLag.from_json(str(p), v) for p, v in dict(doc["partitions"]).items()},
        )

    def log_line(self) -> str:
        """One line for the driver's log: the summary, each partition behind, each stalled one and why."""
        s = self.summary()
        behind = ", ".join(
            f"{p}:{v.events}" + ("" if v.seconds is None else f"/{v.seconds:.1f}s")
            for p, v in self.ordered()
            if v.events
        )
        seconds = "unknown" if s["maxSecondsBehindLatest"] is None else f"{s['maxSecondsBehindLatest']:.3f}s"
        return (
            f"hub {self.hub}: behind latest: events total={sum(v.events for v in self.partitions.values())} "
            f"max={s['maxOffsetsBehindLatest']} avg={s['avgOffsetsBehindLatest']} min={s['minOffsetsBehindLatest']}; "
            f"time max={seconds} ({behind or 'none behind'})"
        )


def _stalled_text(p: str, events: int, batches: int, waited: float, cause: Callable[[str], str | None]) -> str:
    """Why partition ``p`` is stalled, as the figures say it (both of :meth:`LagTracker.observe`'s paths)."""
    why = cause(p) or "cause unknown: no failure was reported for it"
    return f"{events} events waiting, no progress for {batches} batches and {waited:.0f} s; {why}"


@dataclass
class _Moving:
    """Where a partition's reading stood, since when, and for how many triggers that read others."""

    position: int
    since: float
    batches: int = 0
    said: bool = False


@dataclass
class LagTracker:
    """The driver's lag figures of one hub's stream, trigger after trigger (the stream runner keeps one).

    ``clock``: monotonic seconds (stall durations); ``wall``: the time the figures are stamped with.

    The figures are measured when the driver plans a trigger, against what the query has finished reading
    (the start of the batch it plans: every batch before it has completed), from the partition properties it
    asks for anyway, with no extra call per partition:

    - **events behind**: the events enqueued that the query has not read (last enqueued sequence number + 1
      minus the next one to read, across a replication segment on a geo-replicated hub; 0 for an empty
      partition);
    - **seconds behind**: the last enqueued event's time minus the enqueued time of the last event the query
      read, 0 when nothing waits. The driver knows that time from the last event of each range the executors
      read (each task tells the driver when it is done) or from a trigger's properties when the query had
      read to the partition's end; it is unknown (None) only until the query's first batch on a partition
      completes.

    A partition with events waiting that has not moved for ``stalled_batches`` triggers that read other
    partitions, or for ``stalled_after`` seconds, is **stalled**: named in the figures with the likely cause
    where the driver knows one.
    """

    hub: str
    stalled_batches: int = 10
    stalled_after: float = 300.0
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], dt.datetime] = field(default=lambda: dt.datetime.now(UTC))
    _read: dict[str, tuple[int, int]] = field(default_factory=dict)  # partition -> (position, its event's time)
    # partition -> (the time in _read, as a datetime), for the loop path (see observe)
    _read_when: dict[str, tuple[int, dt.datetime]] = field(default_factory=dict)
    _done: dict[str, int] = field(default_factory=dict)  # partition -> the furthest end a task said it read
    _moving: dict[str, _Moving] = field(default_factory=dict)
    _inflight: dict[str, tuple[int, int]] = field(default_factory=dict)  # the running batch's ranges
    _inflight_since: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # the array path's state (lag_columns): the last trigger's partitions as arrays; _moving then holds only the
    # partitions outside them (a partition that left, in ownership mode, keeps its state for when it comes back)
    _infos_columns: InfoColumns | None = None
    _read_columns: ReadColumns | None = None  # _read as arrays, changed in place (under _lock) as tasks say
    _reads_changed: bool = True  # a task read a partition outside _read_columns since they were made
    _moving_columns: MovingColumns | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Without the lock, and without the array path's state: the stream reader that holds this goes to every
        task, and a 1,024-partition hub's arrays (and properties) would go with it; a copy works them out again."""
        state = self.__dict__.copy()
        state.pop("_lock")
        state.update(_moving=self._moving_states(), _moving_columns=None, _infos_columns=None, _read_columns=None,
                     _reads_changed=True)  # fmt: skip
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def read(self, partition: str, end: int, enqueued_micros: int) -> None:
        """An executor read a range of ``partition`` up to ``end`` (exclusive); its last event was enqueued
        at ``enqueued_micros`` (microseconds since 1970, UTC)."""
        with self._lock:
            self._done[partition] = max(end, self._done.get(partition, end))
        self._know(partition, end, enqueued_micros)

    def known_reads(self) -> dict[str, tuple[int, int]]:
        """Each partition's furthest end whose previous event's enqueued time is known (µs)."""
        with self._lock:
            return dict(self._read)

    def _know(self, partition: str, end: int, enqueued_micros: int) -> None:
        """The event before position ``end`` was enqueued at ``enqueued_micros``."""
        with self._lock:
            known = self._read.get(partition)
            if known is None or end >= known[0]:
                self._read[partition] = (end, enqueued_micros)
                self._take_read(partition, end, enqueued_micros)

    def _take_read(self, partition: str, end: int, micros: int) -> None:
        """A read just put in ``_read``, into its arrays too (called under ``_lock``)."""
        columns = self._read_columns
        if columns is None or not columns.take(partition, end, micros):
            self._reads_changed = True

    def _when(self, partition: str, micros: int) -> dt.datetime:
        """``micros`` as a datetime, kept per partition: a trigger asks it of every partition the query read to."""
        held = self._read_when.get(partition)
        if held is None or held[0] != micros:
            held = self._read_when[partition] = (micros, _EPOCH + dt.timedelta(microseconds=micros))
        return held[1]

    def running(self, ranges: Mapping[str, tuple[int, int]]) -> None:
        """Spark runs a batch of these ranges (partition -> [start, end)) now."""
        with self._lock:
            self._inflight = {p: r for p, r in ranges.items() if r[1] > r[0]}
            self._inflight_since = self.clock()

    def overdue(self) -> list[tuple[str, int, int, float]]:
        """The running batch's ranges no task has reported read ``stalled_after`` seconds after it began (each
        returned once): a batch that hangs never reaches the next trigger, where :meth:`observe` would see it.
        Each is (partition, start, end, seconds since the batch began)."""
        with self._lock:
            waited = self.clock() - self._inflight_since
            if not self._inflight or waited < self.stalled_after:
                return []
            late = [(p, start, end, waited) for p, (start, end) in sorted(self._inflight.items())
                    if self._done.get(p, start) < end]  # fmt: skip
            self._inflight = {}
        return late

    def planned(self, end: Mapping[str, int], infos: Mapping[str, PartitionInfo]) -> None:
        """A trigger planned to read up to ``end``: where that is a partition's end, the last event it reads
        is the partition's last enqueued one, whose time the properties gave."""
        keys = tuple(end)
        columns = InfoColumns.of(keys, infos, self._infos_columns) if len(keys) >= offset_ranges.ARRAYS_FROM else None
        try:
            stop = np.fromiter(end.values(), np.int64, len(keys)) if columns is not None else None
        except (OverflowError, TypeError, ValueError):
            stop = None
        if columns is None or stop is None:
            for p, position in end.items():
                info = infos.get(p)
                if info is not None and not info.is_empty and position == info.end and info.last_enqueued_time:
                    self._know(p, position, _micros(info.last_enqueued_time))
            return
        self._infos_columns = columns
        at_end = (stop == columns.last + 1) & columns.has_time
        times = columns.time
        with self._lock:  # tasks' reports change the read arrays in place
            read = self._read_columns
            if read is not None and read.keys == keys:  # known already (a quiet partition, trigger after trigger)
                at_end &= ~(read.known & (read.position == stop) & (read.time == times))
            chosen = np.flatnonzero(at_end).tolist()
            known_reads = self._read
            for i in chosen:
                p, position = keys[i], int(stop[i])
                known = known_reads.get(p)
                if known is None or position >= known[0]:
                    when = int(times[i])
                    known_reads[p] = (position, when)
                    self._take_read(p, position, when)

    def observe(
        self,
        committed: Mapping[str, int],
        infos: Mapping[str, PartitionInfo],
        batch_planned: bool,
        cause: Callable[[str], str | None] = lambda _: None,
    ) -> LagReport:
        """This trigger's figures: ``committed`` is where the query's reading of each partition stands (the
        batch about to be planned starts there); ``batch_planned``: the last trigger planned a batch (a
        partition that did not move through it counts one batch towards a stall); ``cause``: why a
        partition might be stalled, where the caller knows.

        Worked out over arrays (:mod:`~eventhubs_spark.planning.lag_columns`) from
        :data:`~eventhubs_spark.planning.offset_ranges.ARRAYS_FROM` partitions where every partition's position is
        a plain sequence number and has properties, one partition after another otherwise: the same figures."""
        now = self.clock()
        arrays = len(committed) >= offset_ranges.ARRAYS_FROM
        keys = tuple(committed)
        with self._lock:  # one lock a trigger, not one a partition (1,024 of them on a big hub)
            self._inflight = {}  # a new trigger: the batch before it is done
            read_columns = None
            if arrays:
                read_columns = self._read_columns
                if read_columns is None or read_columns.keys != keys or self._reads_changed:
                    read_columns = self._read_columns = ReadColumns(keys, self._read)
                    self._reads_changed = False
                read_columns = read_columns.copy()
        report = None
        if read_columns is not None:
            report = self._observe_columns(committed, keys, infos, batch_planned, cause, now, read_columns)
        if report is None:
            with self._lock:
                reads = dict(self._read)
            report = self._observe_each(committed, infos, batch_planned, cause, now, reads)
        return report

    def _observe_columns(
        self,
        committed: Mapping[str, int],
        keys: tuple[str, ...],
        infos: Mapping[str, PartitionInfo],
        batch_planned: bool,
        cause: Callable[[str], str | None],
        now: float,
        read: ReadColumns,
    ) -> LagReport | None:
        """:meth:`observe` over arrays (``read``: the tasks' reads as this trigger found them); None where it cannot
        be (a geo-replicated hub's positions, a partition without properties)."""
        try:
            position = np.fromiter(committed.values(), np.int64, len(keys))
        except (OverflowError, TypeError, ValueError):
            return None
        columns = InfoColumns.of(keys, infos, self._infos_columns)
        if columns is None:
            return None
        self._infos_columns = columns
        moving = self._moving_for(keys)
        end = columns.last + 1
        ahead = end > position
        events = np.where(ahead, end - position, 0)
        read_known = read.known & (read.position == position)
        seconds = np.full(len(keys), np.nan)
        seconds[~ahead] = 0.0
        timed = ahead & read_known & columns.has_time
        seconds[timed] = np.maximum((columns.time[timed] - read.time[timed]) / 1e6, 0.0)
        # a partition that moved, or has nothing waiting, or is new: a new start (as _Moving in the loop)
        reset = ~moving.present | (moving.position != position) | ~ahead
        moving.position[reset] = position[reset]
        moving.since[reset] = now
        moving.batches[reset] = 0
        moving.said[reset] = False
        moving.present[:] = True
        held = ~reset
        if batch_planned:
            moving.batches[held] += 1
        late = held & ((moving.batches >= self.stalled_batches) | (now - moving.since >= self.stalled_after))
        stalled: dict[str, str] = {}
        for i in np.flatnonzero(late).tolist():
            p = keys[i]
            stalled[p] = _stalled_text(p, int(events[i]), int(moving.batches[i]), now - float(moving.since[i]), cause)
        figures = LagColumns(keys, columns.infos, position, np.where(ahead, end, position), events, seconds,
                             read_known, read.time, stalled, partition_order(keys))  # fmt: skip
        return LagReport(self.hub, self.wall(), columns=figures)

    def _moving_for(self, keys: tuple[str, ...]) -> MovingColumns:
        """The stall state of ``keys`` as arrays, taken over from the loop's per-partition state when the partitions
        are not those of the last trigger."""
        moving = self._moving_columns
        if moving is not None and moving.keys == keys:
            return moving
        self._moving_back()
        moving = self._moving_columns = MovingColumns.empty(keys)
        for i, p in enumerate(keys):
            state = self._moving.pop(p, None)
            if state is not None:
                moving.position[i], moving.since[i], moving.batches[i] = state.position, state.since, state.batches
                moving.said[i] = state.said
                moving.present[i] = True
        return moving

    def _moving_back(self) -> None:
        """The arrays' stall state back to per-partition state (the loop's, and the partitions a trigger left)."""
        self._moving = self._moving_states()
        self._moving_columns = None

    def _moving_states(self) -> dict[str, _Moving]:
        """Every partition's stall state, one object a partition (a new dict; the arrays are left as they are)."""
        states = dict(self._moving)
        moving = self._moving_columns
        if moving is not None:
            for i in np.flatnonzero(moving.present).tolist():
                states[moving.keys[i]] = _Moving(int(moving.position[i]), float(moving.since[i]),
                                                 int(moving.batches[i]), bool(moving.said[i]))  # fmt: skip
        return states

    def _observe_each(
        self,
        committed: Mapping[str, int],
        infos: Mapping[str, PartitionInfo],
        batch_planned: bool,
        cause: Callable[[str], str | None],
        now: float,
        reads: dict[str, tuple[int, int]],
    ) -> LagReport:
        """:meth:`observe` one partition after another (a geo-replicated hub; a partition without properties)."""
        self._moving_back()
        out: dict[str, PartitionLag] = {}
        count = geo_segments.count
        plain = geo_segments.SEQ_MASK
        moving_of = self._moving
        when = self._when
        for p, position in committed.items():
            info = infos.get(p)
            if info is None:
                continue
            end = info.last_enqueued_sequence_number + 1
            if end > position:
                latest = end
                events = end - position if end <= plain else count(position, end)
            else:
                latest, events = position, 0
            last_enqueued = None if info.is_empty else info.last_enqueued_time
            known = reads.get(p)
            last_read = when(p, known[1]) if known is not None and known[0] == position else None
            if events == 0:
                seconds: float | None = 0.0
                last_read = last_read or last_enqueued
            elif last_read is not None and last_enqueued is not None:
                seconds = max(0.0, (last_enqueued - last_read).total_seconds())
            else:
                seconds = None
            moving = moving_of.get(p)
            if moving is None:
                moving_of[p] = _Moving(position, now)
                stalled = None
            elif moving.position != position or events == 0:  # moved, or nothing waits: a new start
                moving.position, moving.since, moving.batches, moving.said = position, now, 0, False
                stalled = None
            else:
                stalled = self._stall(p, moving, events, batch_planned, now, cause)
            out[p] = PartitionLag(p, position, latest, events, seconds, last_enqueued, last_read, stalled)
        return LagReport(self.hub, self.wall(), out)

    def _stall(
        self, p: str, moving: _Moving, events: int, batch_planned: bool, now: float, cause: Callable[[str], str | None]
    ) -> str | None:
        """Why partition ``p`` is stalled (None while it is not): it has ``events`` waiting and has not moved
        since ``moving`` began."""
        if batch_planned:
            moving.batches += 1
        waited = now - moving.since
        if moving.batches < self.stalled_batches and waited < self.stalled_after:
            return None
        return _stalled_text(p, events, moving.batches, waited, cause)

    def newly_stalled(self, report: LagReport) -> list[PartitionLag]:
        """The stalled partitions not said before (each is said once until it moves again)."""
        out = []
        columns = self._moving_columns
        for p in report.stalled():
            i = columns.index.get(p) if columns is not None else None
            if columns is not None and i is not None:
                if not columns.said[i]:
                    columns.said[i] = True
                    out.append(report.partition(p))
                continue
            moving = self._moving.get(p)
            if moving is not None and not moving.said:
                moving.said = True
                out.append(report.partition(p))
        return out


class Folder(Protocol):
    """Where a checkpoint location's files are read from: a local folder, or blobs under a prefix
    (:class:`eventhubs_spark.checkpoints.blob.BlobFolder`), so the command reads either alike."""

    where: str

    def names(self, sub: str) -> list[str]:
        """The files directly in folder ``sub`` (``a/b``), by name; empty when there is none."""
        ...

    def folders(self, sub: str) -> list[str]:
        """The folders directly in folder ``sub``, by name; empty when there is none."""
        ...

    def text(self, path: str) -> str:
        """A file's text (OSError when it cannot be read)."""
        ...

    def modified(self, path: str) -> dt.datetime:
        """When a file was last written."""
        ...


class LocalFolder:
    """A checkpoint location on a path this process can open (:func:`local_path`)."""

    def __init__(self, location: str) -> None:
        self.where = location
        self.root = Path(local_path(location))

    def names(self, sub: str) -> list[str]:
        folder = self.root / sub
        return [p.name for p in folder.iterdir() if p.is_file()] if folder.is_dir() else []

    def folders(self, sub: str) -> list[str]:
        folder = self.root / sub
        return [p.name for p in folder.iterdir() if p.is_dir()] if folder.is_dir() else []

    def text(self, path: str) -> str:
        return (self.root / path).read_text(encoding="utf-8")

    def modified(self, path: str) -> dt.datetime:
        return dt.datetime.fromtimestamp((self.root / path).stat().st_mtime, UTC)


SOURCE_FILE = "source.json"


def stored_sources(folder: Folder) -> dict[str, dict[str, str]]:
    """The hubs whose queries wrote lag files under a checkpoint location, with the options each stored
    (:meth:`LagFiles.write_source`); a hub that stored none is left out."""
    found: dict[str, dict[str, str]] = {}
    for hub in folder.folders(FILE_DIRECTORY):
        with contextlib.suppress(OSError, ValueError, TypeError):
            doc = json.loads(folder.text(f"{FILE_DIRECTORY}/{hub}/{SOURCE_FILE}"))
            if isinstance(doc, dict):
                found[hub] = {str(k): str(v) for k, v in doc.items()}
    return found


class LagFiles:
    """A stream's lag figures, a small JSON file per trigger under ``<checkpoint location>/eventhubs-lag/
    <hub>/``, the newest :data:`KEEP_FILES` kept. Written whole (a temporary file renamed), so a reader
    never sees half of one."""

    def __init__(self, checkpoint_location: str, hub: str, folder: Folder | None = None) -> None:
        """``folder``: where to read them from (default: the location as a local path, where they are written)."""
        self.location = checkpoint_location
        self.folder: Folder = folder if folder is not None else LocalFolder(checkpoint_location)
        self.hub = hub
        self._sub = f"{FILE_DIRECTORY}/{hub}"
        self._written: collections.deque[Path] | None = None  # the trigger files there, oldest first (see write)
        self._start_writer_state()

    def _start_writer_state(self) -> None:
        self._waiting: collections.deque[LagReport] = collections.deque()  # for the writer thread (write_later)
        self._writing = False
        self._left_out = 0  # trigger files left out since the last warning (the writer fell behind)
        self._writer_cond = threading.Condition()
        self._writer: threading.Thread | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Without the files written: the stream reader that holds this goes to every task, and up to 100 paths
        would go with it (a driver that gets it back lists the folder again); nor the writer thread's state."""
        state = self.__dict__.copy()
        state["_written"] = None
        for name in ("_waiting", "_writing", "_left_out", "_writer_cond", "_writer"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._start_writer_state()

    def write_later(self, report: LagReport) -> None:
        """One trigger's file, written by a thread of its own, in trigger order.

        Why not on the trigger: Spark waits on ``latestOffset`` for the batch's plan, and the file is not part of
        it. At 1,024 partitions making and writing the file was 6.7 ms of a trigger whose planning took 0.6 ms,
        and a location on a mounted store (``/dbfs``) adds its own round trips to every trigger. A failure is
        logged as a warning (the figures stay in the driver's log and the progress). Should the location take
        longer to write than triggers come, at most :data:`WAITING_FILES` wait; older ones are left out, and
        said."""
        with self._writer_cond:
            if len(self._waiting) >= WAITING_FILES:
                self._waiting.popleft()
                self._left_out += 1
            self._waiting.append(report)
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_waiting, name="eventhubs-lag-files", daemon=True)
                self._writer.start()
            self._writer_cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every file :meth:`write_later` was given is written (or failed), at most ``timeout``
        seconds; False when some are still waiting then."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._writer_cond:
            while self._waiting or self._writing:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._writer_cond.wait(left)
        return True

    def _write_waiting(self) -> None:
        while True:
            with self._writer_cond:
                while not self._waiting:
                    self._writer_cond.wait()
            time.sleep(WRITE_AFTER)  # the trigger that gave it finishes first
            while True:
                with self._writer_cond:
                    if not self._waiting:
                        self._writer_cond.notify_all()
                        break
                    report = self._waiting.popleft()
                    self._writing = True
                    left_out, self._left_out = self._left_out, 0
                if left_out:
                    _LOG.warning("eventhubs: hub %s: %d triggers' lag files were left out: %s takes longer to "
                                 "write than triggers come (the newest are kept)", self.hub, left_out,
                                 self.directory)  # fmt: skip
                try:
                    self.write(report)
                except Exception as exc:  # the figures stay in the driver's log and the progress
                    _LOG.warning("eventhubs: hub %s: the lag figures could not be written under %s: %s", self.hub,
                                 self.directory, exc)  # fmt: skip
                finally:
                    with self._writer_cond:
                        self._writing = False
                        self._writer_cond.notify_all()

    @property
    def directory(self) -> Path:
        """Where the driver writes them (a local path)."""
        return Path(local_path(self.location)) / self._sub

    def write(self, report: LagReport) -> Path:
        """One trigger's file, the oldest beyond :data:`KEEP_FILES` removed.

        A driver writes one a trigger, so this is on the planning path: at 1,024 partitions the figures are
        7,000 values. They are written without indentation (json's C encoder; with an indent Python's own
        encoder took 7 ms of a 10 ms trigger), and the folder is listed once, then the files written are
        counted here."""
        directory = self.directory
        if self._written is None:
            directory.mkdir(parents=True, exist_ok=True)
            self._written = collections.deque(self.files())
        stamp = _micros(report.at)
        while (directory / f"{stamp:017d}.json").exists():  # two triggers in one microsecond: both kept
            stamp += 1
        path = directory / f"{stamp:017d}.json"
        _write_whole(path, json.dumps(report.to_json(), sort_keys=True))
        written = self._written
        written.append(path)
        while len(written) > KEEP_FILES:
            with contextlib.suppress(OSError):
                written.popleft().unlink()
        return path

    def write_reads(self, reads: Mapping[str, tuple[int, int]]) -> None:
        """Where the tasks' reading of each partition ended and the enqueued time of the event before it
        (``reads.json``): what the next trigger's file would say, for a command that looks before it comes
        (or after the query stopped)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        doc = {p: {"end": geo_segments.show(end), "enqueuedTime": _time(micros).isoformat()}  # type: ignore[union-attr]
               for p, (end, micros) in sorted(reads.items())}  # fmt: skip
        _write_whole(self.directory / "reads.json", json.dumps(doc, sort_keys=True))

    def write_source(self, options: Mapping[str, str]) -> None:
        """The query's options without their secrets (``source.json``, see :func:`shareable_options`), so a
        command given only the checkpoint location (``eventhubs-spark lag``) knows the hub, its namespace and
        how the query reads; the secret it still needs comes from the user."""
        self.directory.mkdir(parents=True, exist_ok=True)
        _write_whole(self.directory / SOURCE_FILE, json.dumps(dict(options), indent=1, sort_keys=True))

    def reads(self) -> dict[str, tuple[int, int]]:
        """What :meth:`write_reads` wrote last (empty when nothing was)."""
        try:
            doc = json.loads(self.folder.text(f"{self._sub}/reads.json"))
            return {str(p): (geo_segments.parse(str(v["end"])),
                             _micros(dt.datetime.fromisoformat(str(v["enqueuedTime"]))))
                    for p, v in doc.items()}  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def files(self) -> list[Path]:
        """The trigger files (written here), oldest first."""
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.iterdir() if p.suffix == ".json" and p.stem.isdigit())

    def names(self) -> list[str]:
        """The trigger files' names in the folder read from, oldest first."""
        return sorted(n for n in self.folder.names(self._sub) if n.endswith(".json") and n[:-5].isdigit())

    def reports(self, last: int | None = None) -> list[LagReport]:
        """The reports of the last ``last`` triggers (all kept ones: None), oldest first; a file that cannot
        be read (removed meanwhile) is passed over."""
        out = []
        names = self.names()
        for name in names[-last:] if last else names:
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                out.append(LagReport.from_json(json.loads(self.folder.text(f"{self._sub}/{name}"))))
        return out


@dataclass(frozen=True)
class SparkCommit:
    """What a Spark checkpoint location says of one hub: the last committed batch, where it left each
    partition (the next position to read), and when its commit was written."""

    batch: int
    positions: Mapping[str, int]
    committed_at: dt.datetime


def last_commit(folder: Folder, hub: str) -> SparkCommit | None:
    """The last batch Spark committed (``commits/N``) and this hub's end offset in it (``offsets/N``: a version
    line, the batch's metadata, then one line per source; ours is ``{"<hub>": {"<partition>": <position>}}``).
    None when no batch has been committed yet. A location of another hub's query raises ValueError."""
    batches = sorted(int(n) for n in folder.names("commits") if n.isdigit())
    if not batches:
        if not folder.names("offsets") and not folder.names(""):
            raise ValueError(f"no Spark checkpoint at {folder.where!r}: nothing is there")
        return None
    batch = batches[-1]
    hubs: list[str] = []
    for line in folder.text(f"offsets/{batch}").splitlines()[2:]:
        try:
            doc = json.loads(line)
        except ValueError:
            continue  # "-": a source without an offset in this batch
        if not isinstance(doc, dict):
            continue
        hubs.extend(str(k) for k in doc if not str(k).startswith("@"))
        found = {str(k).lower(): v for k, v in doc.items()}.get(hub.lower())
        if isinstance(found, dict):
            positions = {str(p): geo_segments.parse(str(v)) for p, v in found.items()}
            return SparkCommit(batch, positions, folder.modified(f"commits/{batch}"))
    raise ValueError(f"the checkpoint at {folder.where!r} is of a query reading {sorted(hubs) or 'no hub'}, "
                     f"not {hub!r}: name the hub its query reads (EntityPath or eventhubs.name)")  # fmt: skip


def _write_whole(path: Path, text: str) -> None:
    """Write a file so a reader sees the old one or the new one, never half (a temporary file renamed)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
