"""The source offset, and planning of per-partition sequence-number ranges with rate limits.

An offset is the **next sequence number to read** per partition, JSON ``{"<hub>": {"<partition>": n}}`` (the shape
azure-event-hubs-spark wrote, so a query resumes from its checkpoints). On a geo-replicated hub a partition's entry
is ``"<replication segment>:<sequence number>"`` (:mod:`eventhubs_spark.positions.geo_segments`). A planned range is
``[start, end)``.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from eventhubs_spark.errors import OptionError
from eventhubs_spark.positions import geo_segments
from eventhubs_spark.positions.partition_catalog import by_number

# Partitions from which planning works over arrays (numpy) rather than one partition after another: arrays win on
# big hubs, but each array operation has a fixed cost whatever its size, so on small ones the loops win (bench
# `planning`). Read at each call, so tests can take either path at any size.
ARRAYS_FROM = 128
# Where a planned batch's offset keeps how its small ranges were packed (no hub can have this name): {} by events
# alone, {"homes": [executor, ...]} by the homes over these executors, {"spread": n} over at least n tasks. An offset
# without it was planned by a version that kept none: one task a partition, unless the options said otherwise.
TASKS_KEY = "@tasks"


@dataclass(frozen=True)
class SourceOffset:
    hub: str
    positions: Mapping[str, int]

    def to_json(self) -> dict[str, dict[str, int | str]]:
        positions = self.positions
        keys = list(positions)
        order = partition_order(keys)
        if set(map(type, positions.values())) <= {int} and max(positions.values(), default=0) <= geo_segments.SEQ_MASK:
            if order is None:  # planning's hot path: plain sequence numbers, in partition order
                return {self.hub: dict(positions)}
            return {self.hub: {keys[i]: positions[keys[i]] for i in order}}
        return {self.hub: {keys[i]: _entry(int(positions[keys[i]])) for i in order or range(len(keys))}}

    @staticmethod
    def from_json(doc: Any, hub: str) -> SourceOffset:
        """Read an offset; a checkpoint of another hub is an error, not a silent restart."""
        example = json.dumps({hub: {"0": 42, "1": 7}})
        if isinstance(doc, str):
            try:
                doc = json.loads(doc)
            except json.JSONDecodeError as exc:
                raise OptionError(f"offset is not valid JSON ({exc.msg}): expected {example}", example) from None
        if not isinstance(doc, dict) or not doc:
            raise OptionError(f"offset must look like {example}, got {doc!r}", example)
        matching = {k: v for k, v in doc.items() if k.lower() == hub.lower()}
        if not matching:
            location = f"df.writeStream.option('checkpointLocation', '/checkpoints/{hub}')"
            raise OptionError(
                f"the checkpoint's offsets are for hub(s) {sorted(doc)}, but this query reads {hub!r}: use a new "
                f"checkpoint location for a different hub, e.g. {location}",
                location,
            )
        positions = next(iter(matching.values()))
        if not isinstance(positions, dict) or not all(str(p).isascii() and str(p).isdigit() for p in positions):
            raise OptionError(f"offset for {hub!r} must map partition ids to sequence numbers, e.g. {example}", example)
        try:
            parse = geo_segments.parse
            return SourceOffset(hub, {str(int(p)): v if type(v) is int else parse(v) for p, v in positions.items()})
        except ValueError:
            raise OptionError(f"offset for {hub!r} must map partition ids to sequence numbers (or, on a "
                              f"geo-replicated hub, \"<segment>:<sequence number>\"), e.g. {example}, got "
                              f"{positions!r}", example) from None  # fmt: skip


@dataclass(frozen=True)
class Packing:
    """How a batch's small ranges share tasks, as its offset keeps it: by the homes over ``homes`` (none: by events
    alone), over at least ``spread`` tasks."""

    homes: tuple[str, ...] = ()
    spread: int = 1

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.homes:
            out["homes"] = sorted(self.homes)
        if self.spread > 1:
            out["spread"] = self.spread
        return out


class OffsetCodec:
    """A stream's offsets to and from Spark's JSON, remembering the last few it gave.

    Spark hands each offset back (as the next trigger's start, to ``partitions`` and to ``commit``), parsed from
    the JSON it wrote: equal to the one given. At 1,024 partitions reading an offset again costs about 0.3 ms a
    time, three times a trigger; comparing it with one given costs a few hundredths of that."""

    KEEP = 4

    def __init__(self, hub: str) -> None:
        self.hub = hub
        self._given: list[tuple[dict[str, Any], dict[str, int]]] = []

    def to_json(self, positions: Mapping[str, int], tasks: Packing | None = None) -> dict[str, Any]:
        """``positions`` as Spark keeps them; ``tasks``: how a planned batch is packed (under :data:`TASKS_KEY`, for
        the batch's plan after a restart). Positions given before, without ``tasks``, get the offset given then: the
        same positions must be the same offset to Spark, or it plans an empty batch to move from one to the other."""
        if tasks is None:
            for i, (given, known) in enumerate(self._given):
                if known == positions:
                    self._given.insert(0, self._given.pop(i))
                    return given
        doc: dict[str, Any] = SourceOffset(self.hub, positions).to_json()
        if tasks is not None:
            doc[TASKS_KEY] = tasks.to_json()
        self._given = [(doc, dict(positions)), *self._given[: self.KEEP - 1]]
        return doc

    @staticmethod
    def tasks(doc: Any) -> Packing | None:
        """How the batch ending at offset ``doc`` was packed; None when the offset does not say (an earlier
        version's, or a batch with a task a partition)."""
        kept = doc.get(TASKS_KEY) if isinstance(doc, dict) else None
        if not isinstance(kept, dict):
            return None
        homes = kept.get("homes")
        spread = kept.get("spread")
        return Packing(
            tuple(homes) if isinstance(homes, list) and all(isinstance(h, str) for h in homes) else (),
            spread if type(spread) is int and spread > 0 else 1,
        )

    def positions(self, doc: Any) -> dict[str, int]:
        """The positions of ``doc`` (a copy the caller may change); see :meth:`SourceOffset.from_json`."""
        for given, positions in self._given:
            if doc == given:
                return dict(positions)
        read = dict(SourceOffset.from_json(doc, self.hub).positions)
        # remembered as given: a checkpoint's offset (after a restart) is then the one answered while nothing new
        # comes, "@tasks" and all, not an equal one without it that Spark would take for new data
        self._given = [(doc, dict(read)), *self._given[: self.KEEP - 1]]
        return read

    def __getstate__(self) -> dict[str, Any]:
        return {"hub": self.hub, "_given": []}  # what executors get of a reader: nothing to remember there


def _entry(position: int) -> int | str:
    """A partition's offset entry: its sequence number, or ``"segment:seq"`` on a geo-replicated hub."""
    return position if geo_segments.segment_of(position) < 0 else geo_segments.show(position)


def rate_limit(start: Mapping[str, int], latest: Mapping[str, int], max_events: int | None) -> dict[str, int]:
    """End offsets reading at most ``max_events`` in all, split across partitions by backlog.

    Every partition with a backlog gets at least one event (so a small budget never starves a
    partition forever), which can exceed ``max_events`` when it is below the number of such partitions.
    """
    keys = list(latest)
    if latest.keys() <= start.keys():
        starts = list(map(start.__getitem__, keys))
    else:
        starts = [start.get(p, e) for p, e in latest.items()]
    return dict(zip(keys, _rate_limit(keys, starts, list(latest.values()), max_events), strict=True))


def _rate_limit(keys: list[str], starts: list[int], ends: list[int], max_events: int | None) -> list[int]:
    """:func:`rate_limit` on parallel lists (partition ``keys[i]`` reads from ``starts[i]``, up to ``ends[i]``)."""
    if len(keys) >= ARRAYS_FROM and max(max(starts), max(ends)) <= geo_segments.SEQ_MASK:
        stops = _rate_limit_plain(keys, np.array(starts, np.int64), np.array(ends, np.int64), max_events)
        if stops is not None:
            return stops.tolist()
    return _rate_limit_each(keys, starts, ends, max_events)


def _rate_limit_plain(
    keys: list[str], starts: np.ndarray, ends: np.ndarray, max_events: int | None
) -> np.ndarray | None:
    """:func:`_rate_limit_each` over arrays, for positions that are plain sequence numbers: planning runs this every
    trigger for every partition (1,024 on a Dedicated hub), where a loop a partition cost more than the rest of the
    trigger. None in the rare case the loop handles: shares whose one-event minimum overshoots the budget (or numbers
    too large for 64 bits)."""
    backlog = np.maximum(ends - starts, 0)
    total = int(backlog.sum())
    if max_events is None or total <= max_events:
        return np.maximum(starts, ends)
    if max_events * int(backlog.max()) >= 1 << 62:
        return None
    floors = max_events * backlog // total
    quota = np.where((floors == 0) & (backlog > 0), 1, floors)
    with_data = int(np.count_nonzero(backlog))
    if int(quota.sum()) > max(max_events, with_data):
        return None
    leftover = max_events - int(quota.sum())
    if leftover > 0:  # one more event each, by the largest remainder, then by partition number
        order = _numeric_order_array(keys)
        ranked = order[backlog[order] > 0]
        ranked = ranked[np.argsort(-(max_events * backlog[ranked] % total), kind="stable")]
        quota[ranked[quota[ranked] < backlog[ranked]][:leftover]] += 1
    return starts + quota


def _rate_limit_each(keys: list[str], starts: list[int], ends: list[int], max_events: int | None) -> list[int]:
    """:func:`rate_limit` one partition after another: a share's fraction is kept exact (an integer remainder) so
    the one-event leftovers go by it, then by partition number. What a geo-replicated hub plans with, and what the
    array path (:func:`_rate_limit_plain`) is tested against."""
    plain = not keys or max(max(starts), max(ends)) <= geo_segments.SEQ_MASK
    if plain:
        backlog = [d if d > 0 else 0 for d in map(operator.sub, ends, starts)]
    else:
        count = geo_segments.count
        backlog = [count(s, e) for s, e in zip(starts, ends, strict=True)]
    total = sum(backlog)
    if max_events is None or total <= max_events:
        return list(map(max, starts, ends))
    floors = [max_events * n // total for n in backlog]
    quota = [f or (1 if n else 0) for f, n in zip(floors, backlog, strict=True)]
    with_data = [i for i in _numeric_order(keys) if backlog[i]]
    # The one-event minimum can overshoot the budget: take the excess back from the largest shares.
    excess = sum(quota) - max(max_events, len(with_data))
    while excess > 0:
        largest = min((i for i in with_data if quota[i] > 1), key=lambda i: (-quota[i], int(keys[i])))
        quota[largest] -= 1
        excess -= 1
    leftover = max_events - sum(quota)
    if leftover > 0:
        remainder = [max_events * n % total for n in backlog]
        for i in sorted(with_data, key=remainder.__getitem__, reverse=True):  # stable: ties in partition order
            if leftover <= 0:
                break
            if quota[i] < backlog[i]:
                quota[i] += 1
                leftover -= 1
    if plain:
        return list(map(operator.add, starts, quota))
    advance = geo_segments.advance
    return [advance(s, q, e) for s, q, e in zip(starts, quota, ends, strict=True)]


_ORDERS: dict[tuple[str, ...], tuple[list[int] | None, np.ndarray]] = {}


def partition_order(keys: tuple[str, ...] | list[str]) -> list[int] | None:
    """Indexes of ``keys`` (partition ids) in partition-number order, None when they are in it already (a stream's
    offsets are written in it); the last few orders are kept, as a stream asks for the same partitions trigger
    after trigger."""
    return _orders(keys)[0]


def _numeric_order(keys: list[str]) -> list[int] | range:
    """:func:`partition_order`, as indexes also when ``keys`` are in order."""
    order = _orders(keys)[0]
    return range(len(keys)) if order is None else order


def _numeric_order_array(keys: list[str]) -> np.ndarray:
    """:func:`_numeric_order` as an array of indexes."""
    return _orders(keys)[1]


def _orders(keys: tuple[str, ...] | list[str]) -> tuple[list[int] | None, np.ndarray]:
    held = tuple(keys)
    orders = _ORDERS.get(held)
    if orders is None:
        if len(_ORDERS) >= 4:
            _ORDERS.clear()
        ranked = sorted(range(len(held)), key=lambda i: by_number(held[i]))
        orders = _ORDERS[held] = (None if ranked == list(range(len(held))) else ranked, np.array(ranked, np.int64))
    return orders


@dataclass(frozen=True)
class TriggerPlan:
    """What one trigger reads: ``end`` per partition, the ``latest`` it may report, and whether it was
    skipped to wait for ``minEventsPerTrigger`` (then ``end`` is where it began)."""

    end: dict[str, int]
    latest: dict[str, int]
    skipped: bool
    backlog: int
    planned: int = 0  # events from begin to end


def plan_trigger(
    begin: Mapping[str, int],
    latest: Mapping[str, int],
    *,
    max_events: int | None,
    target: Mapping[str, int] | None = None,
    min_events: int | None = None,
    max_trigger_delay: float = 900.0,
    now: float = 0.0,
    last_batch_at: float = 0.0,
) -> TriggerPlan:
    """The decision inside ``latestOffset``, with the clock passed in.

    - ``target`` (``Trigger.AvailableNow``): no partition reads past what was there when the run began.
    - ``latest`` never lies behind ``begin`` (a partition's end seen before a restart, or a range
      planned past it).
    - ``min_events``: while fewer events wait, the trigger is skipped, until ``max_trigger_delay``
      seconds have passed since the last batch that read anything (never under AvailableNow, whose
      run must end).
    - ``max_events``: the admission limit, split across partitions in proportion to their backlog
      (:func:`rate_limit`); None reads everything.
    """
    keys = list(latest)
    plan = _plan_plain(keys, begin, latest, max_events, target)
    if plan is not None:  # every position a plain sequence number: over arrays
        stops, capped, backlog, first = plan
        if min_events and target is None and 0 < backlog < min_events and now - last_batch_at < max_trigger_delay:
            return TriggerPlan(dict(begin), capped, True, backlog)
        if stops is not None:
            return TriggerPlan(dict(zip(keys, stops, strict=True)), capped, False, backlog, sum(stops) - first)
    starts = [begin[p] for p in keys]
    ends = list(latest.values())
    if target is not None:
        ends = list(map(min, ends, [target.get(p, s) for p, s in zip(keys, starts, strict=True)]))
    ends = list(map(max, ends, starts))
    capped = dict(zip(keys, ends, strict=True))
    plain = max(ends, default=0) <= geo_segments.SEQ_MASK  # no replication segments: positions subtract
    backlog = _events(starts, ends, plain)
    if min_events and target is None and 0 < backlog < min_events and now - last_batch_at < max_trigger_delay:
        return TriggerPlan(dict(begin), capped, True, backlog)
    stops = _rate_limit(keys, starts, ends, max_events)
    return TriggerPlan(dict(zip(keys, stops, strict=True)), capped, False, backlog, _events(starts, stops, plain))


def _plan_plain(
    keys: list[str],
    begin: Mapping[str, int],
    latest: Mapping[str, int],
    max_events: int | None,
    target: Mapping[str, int] | None,
) -> tuple[list[int] | None, dict[str, int], int, int] | None:
    """:func:`plan_trigger`'s figures over arrays (each partition's stop, or None where the rate limit needs the
    loop; the capped ends; the backlog; the sum of the starts), or None where a position is not a plain sequence
    number. A Dedicated hub's 1,024 partitions are planned every trigger; list operations a partition cost more
    than the rest of the trigger.

    A ``target`` that is ``latest`` itself (a Trigger.AvailableNow run's batches, planned from the ends its run
    began with) caps nothing; and where neither the target nor a start past its end changed an end, the capped ends
    are a copy of ``latest`` (at 1,024 partitions the cap and the capped ends' dict were 0.12 ms of a 0.34 ms plan)."""
    n = len(keys)
    if not n or n < ARRAYS_FROM:
        return None
    try:
        starts = np.fromiter(map(begin.__getitem__, keys), np.int64, n)
        ends = np.fromiter(latest.values(), np.int64, n)
        capped = ends
        if target is not None and target is not latest:
            capped = np.minimum(ends, np.fromiter(map(target.get, keys, starts.tolist()), np.int64, n))
    except (OverflowError, TypeError, ValueError):
        return None
    if max(int(starts.max()), int(capped.max())) > geo_segments.SEQ_MASK:
        return None
    capped = np.maximum(capped, starts)
    first = int(starts.sum())
    stops = _rate_limit_plain(keys, starts, capped, max_events)
    shown = None if stops is None else stops.tolist()
    unchanged = bool((capped == ends).all())
    return (
        shown,
        dict(latest) if unchanged else dict(zip(keys, capped.tolist(), strict=True)),
        int(capped.sum()) - first,
        first,
    )


def _events(starts: list[int], stops: list[int], plain: bool) -> int:
    """The events in ranges ``[starts[i], stops[i])``, each stop at or after its start; ``plain``: positions are
    sequence numbers (no replication segment), so the count is a subtraction."""
    return sum(stops) - sum(starts) if plain else sum(map(geo_segments.count, starts, stops))


@dataclass(frozen=True)
class Range:
    partition: str
    start: int
    end: int

    @property
    def size(self) -> int:
        return geo_segments.count(self.start, self.end)


def split_ranges(ranges: list[Range], max_per_task: int | None) -> list[Range]:
    """Split each range into pieces of at most ``max_per_task`` events (Spark tasks)."""
    if not max_per_task:
        return ranges
    out = []
    for r in ranges:
        if geo_segments.segment_of(r.start) != geo_segments.segment_of(r.end):
            out.append(r)  # across a promotion: where the new segment begins is not known, so no split
            continue
        pieces = max(1, math.ceil(r.size / max_per_task))
        step = math.ceil(r.size / pieces)
        for s in range(r.start, r.end, step):
            out.append(Range(r.partition, s, min(s + step, r.end)))
    return out


def pack_ranges(
    ranges: list[Range],
    min_events: int,
    max_events: int | None = None,
    max_ranges: int | None = None,
    home_of: Mapping[str, str] | None = None,
    at_least: int = 1,
) -> list[list[Range]]:
    """Spark tasks for ``ranges``: a range of ``min_events`` or more is a task of its own; the smaller ones share
    as few tasks as hold about ``min_events`` each (0: one task per range), in partition order, split where the
    events even out, never more than ``max_events`` in one task (``maxEventsPerPartition``: what a user split stays
    split) nor more than ``max_ranges`` ranges (``eventhubs.maxPartitionsPerTask``). ``home_of`` (each partition's
    home executor): the small ranges of each home share tasks of their own, at least one a home, so a task reads
    from one executor's receivers and a quiet batch runs a task on every home (a partition without a home is
    packed with the others without one). ``at_least``: the small ranges of each home share at least this many tasks
    (as many as there are ranges, at the most).

    Why: every Python task costs Spark tens of milliseconds whatever it reads, so a quiet micro-batch of a few
    events per partition ran a task per partition (1,024 of them on a Dedicated hub); a busy one still gets a task
    per partition. The plan is a function of its arguments alone, never of the cluster at the time: Spark plans a
    batch run again (after a restart) from the same offsets, and the exactly-once sink names each row by its task
    and place, so a batch run again must be packed as its first run was (a stream keeps how it packed in the batch's
    offset: :meth:`OffsetCodec.tasks`)."""
    ordered = sorted(ranges, key=lambda r: (int(r.partition), r.start))
    if min_events <= 0:
        return [[r] for r in ordered]
    tasks: list[list[Range]] = []
    small: dict[str, list[Range]] = {}
    homes = home_of or {}
    for r in ordered:
        if r.size >= min_events:
            tasks.append([r])
        else:
            small.setdefault(homes.get(r.partition, ""), []).append(r)
    for home in sorted(small):
        tasks += _pack_small(small[home], min_events, max_events, max_ranges, at_least)
    return tasks


def _pack_small(
    small: list[Range], min_events: int, max_events: int | None, max_ranges: int | None, at_least: int = 1
) -> list[list[Range]]:
    """Ranges under a task's worth, in order, in as few tasks as hold about ``min_events`` each (at least
    ``at_least``)."""
    total = sum(r.size for r in small)
    count = max(at_least, total // min_events)  # each shared task holds about min_events, at least
    if max_events is not None:
        count = max(count, -(-total // max_events))
    if max_ranges is not None:
        count = max(count, -(-len(small) // max_ranges))
    count = min(count, len(small))
    return _even_runs(small, count, max_events, max_ranges)


def _even_runs(ranges: list[Range], count: int, max_events: int | None, max_ranges: int | None) -> list[list[Range]]:
    """``ranges`` cut into about ``count`` runs, in order, of about equal events (a cut where the running total
    passes the next share), and earlier where a run would pass ``max_events`` or hold ``max_ranges``."""
    total = sum(r.size for r in ranges)
    runs: list[list[Range]] = []
    run: list[Range] = []
    held = done = 0
    for r in ranges:
        full = max_events is not None and held + r.size > max_events
        if run and (full or (max_ranges is not None and len(run) >= max_ranges)):
            runs.append(run)
            run, held = [], 0
        run.append(r)
        held += r.size
        done += r.size
        # the next share's mark: (runs so far + 1) of ``count`` equal parts of the total
        if len(runs) + 1 < count and done * count >= (len(runs) + 1) * total:
            runs.append(run)
            run, held = [], 0
    if run:
        runs.append(run)
    return runs
