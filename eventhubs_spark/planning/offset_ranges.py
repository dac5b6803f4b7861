"""The source offset, and planning of per-partition sequence-number ranges with rate limits.

An offset is the **next sequence number to read** per partition, JSON ``{"<hub>": {"<partition>": n}}`` (the shape
azure-event-hubs-spark wrote, so a query resumes from its checkpoints). On a geo-replicated hub a partition's entry
is ``"<replication segment>:<sequence number>"`` (:mod:`eventhubs_spark.positions.geo_segments`). A planned range is
``[start, end)``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eventhubs_spark.errors import OptionError
from eventhubs_spark.positions import geo_segments


@dataclass(frozen=True)
class SourceOffset:
    hub: str
    positions: Mapping[str, int]

    def to_json(self) -> dict[str, dict[str, int | str]]:
        return {self.hub: {p: _entry(int(self.positions[p])) for p in sorted(self.positions, key=int)}}

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


def _entry(position: int) -> int | str:
    """A partition's offset entry: its sequence number, or ``"segment:seq"`` on a geo-replicated hub."""
    return position if geo_segments.segment_of(position) < 0 else geo_segments.show(position)


def rate_limit(start: Mapping[str, int], latest: Mapping[str, int], max_events: int | None) -> dict[str, int]:
    """End offsets reading at most ``max_events`` in all, split across partitions by backlog.

    Every partition with a backlog gets at least one event (so a small budget never starves a
    partition forever), which can exceed ``max_events`` when it is below the number of such partitions.
    """
    backlog = {p: geo_segments.count(start.get(p, latest[p]), latest[p]) for p in latest}
    total = sum(backlog.values())
    if max_events is None or total <= max_events:
        return {p: max(start.get(p, latest[p]), latest[p]) for p in latest}
    quota: dict[str, int] = {}
    remainders: list[tuple[float, str]] = []
    for p, n in backlog.items():
        if n == 0:
            quota[p] = 0
            continue
        exact = max_events * n / total
        quota[p] = min(n, max(1, math.floor(exact)))
        remainders.append((exact - math.floor(exact), p))
    # The one-event minimum can overshoot the budget: take the excess back from the largest shares.
    excess = sum(quota.values()) - max(max_events, len(remainders))
    while excess > 0:
        largest = min((p for p in quota if quota[p] > 1), key=lambda p: (-quota[p], int(p)))
        quota[largest] -= 1
        excess -= 1
    leftover = max_events - sum(quota.values())
    for _, p in sorted(remainders, key=lambda r: (-r[0], int(r[1]))):
        if leftover <= 0:
            break
        if quota[p] < backlog[p]:
            quota[p] += 1
            leftover -= 1
    return {p: geo_segments.advance(start.get(p, latest[p]), quota[p], latest[p]) for p in latest}


@dataclass(frozen=True)
class TriggerPlan:
    """What one trigger reads: ``end`` per partition, the ``latest`` it may report, and whether it was
    skipped to wait for ``minEventsPerTrigger`` (then ``end`` is where it began)."""

    end: dict[str, int]
    latest: dict[str, int]
    skipped: bool
    backlog: int


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
    capped = dict(latest)
    if target is not None:
        capped = {pid: min(capped[pid], target.get(pid, begin[pid])) for pid in capped}
    capped = {pid: max(capped[pid], begin[pid]) for pid in capped}
    backlog = sum(geo_segments.count(begin[p], capped[p]) for p in capped)
    if min_events and target is None and 0 < backlog < min_events and now - last_batch_at < max_trigger_delay:
        return TriggerPlan(dict(begin), capped, True, backlog)
    return TriggerPlan(rate_limit(begin, capped, max_events), capped, False, backlog)


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
    ranges: list[Range], min_events: int, max_events: int | None = None, max_ranges: int | None = None
) -> list[list[Range]]:
    """Spark tasks for ``ranges``: a range of ``min_events`` or more is a task of its own; smaller ones
    share tasks, in partition order, until a task holds ``min_events`` (0: one task per range), never
    more than ``max_events`` in one task (``maxEventsPerPartition``: what a user split stays split) nor more than
    ``max_ranges`` ranges (``eventhubs.maxPartitionsPerTask``: a task reads them one after another).

    Every Python task costs Spark tens of milliseconds whatever it reads, so a quiet stream's micro-batch
    of a few events per partition runs one task for a few partitions instead of one per partition
    (32 partitions, 32 tasks per trigger); a busy one still gets a task per partition.
    """
    if min_events <= 0:
        return [[r] for r in ranges]
    tasks: list[list[Range]] = []
    small: list[Range] = []
    held = 0
    for r in sorted(ranges, key=lambda r: (int(r.partition), r.start)):
        if r.size >= min_events:
            tasks.append([r])
            continue
        if small and max_events is not None and held + r.size > max_events:
            tasks.append(small)
            small, held = [], 0
        small.append(r)
        held += r.size
        if held >= min_events or (max_ranges is not None and len(small) >= max_ranges):
            tasks.append(small)
            small, held = [], 0
    if small:
        tasks.append(small)
    return tasks
