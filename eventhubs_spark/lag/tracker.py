"""A stream's lag each trigger, per partition, in events and in time, and which partitions stall.

The tracker and its report; :mod:`eventhubs_spark.lag` says where the figures go.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eventhubs_spark.lag.columns import (
    InfoColumns,
    LagColumns,
    MovingColumns,
    ReadColumns,
    exact_micros,
    most_behind,
)
from eventhubs_spark.planning import offset_ranges
from eventhubs_spark.planning.offset_ranges import partition_order
from eventhubs_spark.positions import geo_segments
from eventhubs_spark.positions.partition_catalog import PartitionInfo, by_number

UTC = dt.timezone.utc
_LOG = logging.getLogger(__name__)


def to_micros(when: dt.datetime) -> int:
    """Microseconds since 1970 (UTC), exactly, as the array path counts them (:func:`exact_micros`)."""
    return exact_micros(when)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)


def from_micros(micros: int | None) -> dt.datetime | None:
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
    :class:`~eventhubs_spark.lag.columns.LagColumns`), whose per-partition figures are made only when
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
        last_read = from_micros(int(columns.read_time[i])) if columns.read_known[i] else None
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
        furthest behind (:func:`~eventhubs_spark.lag.columns.most_behind`), in partition order, and
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
    # on _lock: a task said what it read (await_reports)
    _reported: threading.Condition = field(init=False, repr=False, compare=False)
    _awaiting: bool = True  # await_reports waits (until a wait runs out)
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
        state.pop("_reported")
        state.update(_moving=self._moving_states(), _moving_columns=None, _infos_columns=None, _read_columns=None,
                     _reads_changed=True)  # fmt: skip
        return state

    def __post_init__(self) -> None:
        self._reported = threading.Condition(self._lock)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._reported = threading.Condition(self._lock)

    def read(self, partition: str, end: int, enqueued_micros: int | None) -> None:
        """An executor read a range of ``partition`` up to ``end`` (exclusive); its last event was enqueued
        at ``enqueued_micros`` (microseconds since 1970, UTC; None: no event was left of it to read)."""
        with self._reported:  # all of it taken before a trigger waiting for it wakes
            self._done[partition] = max(end, self._done.get(partition, end))
            if enqueued_micros is not None:
                self._know_locked(partition, end, enqueued_micros)
            self._reported.notify_all()

    def await_reports(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until a task has said it read every range of the running batch: a task
        tells the driver what it read and does not wait for it to be taken (issue 87), so the report may still be
        on its way when Spark starts the next trigger, whose lag figures and mirrored checkpoints use it. True when
        all were said. Once a wait runs out (executors that cannot reach the driver, a report lost) the next
        triggers do not wait until a batch's reports are all here again: the figures are then a trigger late, and
        the mirror looks the checkpoint's event up on the hub, as without the reports."""

        def missing() -> bool:
            return any(self._done.get(p, start) < end for p, (start, end) in self._inflight.items())

        with self._reported:
            if not missing():
                self._awaiting = True
                return True
            if not self._awaiting:
                return False
            if self._reported.wait_for(lambda: not missing(), timeout):
                return True
            self._awaiting = False
        _LOG.info(
            "hub %s: the tasks of the last batch did not all say what they read within %g s: lag figures "
            "may be a trigger late; not waited for again until a batch's reports all arrive",
            self.hub,
            timeout,
        )
        return False

    def known_reads(self) -> dict[str, tuple[int, int]]:
        """Each partition's furthest end whose previous event's enqueued time is known (µs)."""
        with self._lock:
            return dict(self._read)

    def _know(self, partition: str, end: int, enqueued_micros: int) -> None:
        """The event before position ``end`` was enqueued at ``enqueued_micros``."""
        with self._lock:
            self._know_locked(partition, end, enqueued_micros)

    def _know_locked(self, partition: str, end: int, enqueued_micros: int) -> None:
        """:meth:`_know`, the caller holding ``_lock``."""
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
                    self._know(p, position, to_micros(info.last_enqueued_time))
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

        Worked out over arrays (:mod:`~eventhubs_spark.lag.columns`) from
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
