"""The Spark data source ``eventhubs``: the stream reader and the batch reader.

Planning runs on the driver (options → positions → sequence-number ranges, with rate limits and
admission control); ``read()`` runs on executors and gets everything it needs inside the input
partition, since state set on the driver-side reader never reaches it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from eventhubs_spark import defaults
from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.avro import reading as avro_reading
from eventhubs_spark.avro.registry import RegistryError
from eventhubs_spark.capture.store import CaptureRead
from eventhubs_spark.checkpoints.mirror import CheckpointMirror
from eventhubs_spark.codec.schema import ARROW_SCHEMA, SCHEMA_DDL, Projection, projection
from eventhubs_spark.errors import EventHubsError, OptionError, data_loss_error
from eventhubs_spark.interprocess import driver_channel
from eventhubs_spark.interprocess.task_ranges import RangeRequest, ReceiverConfig
from eventhubs_spark.options import BATCH, STREAM, ReadOptions, read_options, shareable_options
from eventhubs_spark.planning.lag import LagFiles, LagReport, LagTracker
from eventhubs_spark.planning.offset_ranges import Range, SourceOffset, pack_ranges, plan_trigger, split_ranges
from eventhubs_spark.planning.partition_homes import QueryDriver
from eventhubs_spark.planning.position_lookup import resolve
from eventhubs_spark.positions import geo_segments
from eventhubs_spark.positions.event_positions import Earliest, EnqueuedTime, Latest, Position
from eventhubs_spark.positions.partition_catalog import PartitionCatalog, PartitionInfo, PartitionMetadata
from eventhubs_spark.process import runtime

if TYPE_CHECKING:
    from eventhubs_spark.avro.decode import AvroReading
    from eventhubs_spark.capture.index import CaptureIndex

_LOG = logging.getLogger(__name__)


def _worker_logging() -> None:
    """Spark's Python workers configure no logging, so the connector's lines would vanish there.

    ``EVENTHUBS_SPARK_LOG_LEVEL`` (e.g. ``INFO``) sends them to the worker's stderr, which Spark keeps
    in the executor log; nothing is configured when the application already has handlers.
    """
    level = os.environ.get("EVENTHUBS_SPARK_LOG_LEVEL")
    tree = logging.getLogger("eventhubs_spark")  # every module's logger is under it
    if level and not tree.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        tree.addHandler(handler)
        tree.setLevel(level.upper())


# How long an idle owner-level receiver stays open on an executor, waiting for its partition's next
# range. Open, it saves the next task a link attach and keeps its prefetched events; but it also locks
# non-epoch readers of the consumer group out. A stream keeps it for a few of its own trigger intervals
# (measured), within these bounds, and in ownership mode for at most one ownership update interval; a
# batch read keeps it briefly, for the next range of the same partition.
BATCH_IDLE_TIMEOUT = 10.0
MIN_STREAM_IDLE_TIMEOUT = 10.0
MAX_STREAM_IDLE_TIMEOUT = 120.0

# Events from Capture a task reads at least, in whole files: a partition's long history goes to many tasks at once
# (each file is read by the one task whose range holds its first event), without a task for every small file.
CAPTURE_TASK_EVENTS = 200_000

LAG_FILE_EVERY = 60.0  # seconds: a quiet stream still writes its lag figures this often (the command shows their age)
LAG_KEY = "@lag"  # where the progress's latestOffset carries the lag figures (Spark 4.2+)

try:  # Spark 4.2+: admission control and Trigger.AvailableNow for Python streaming sources
    from pyspark.sql.streaming.datasource import (
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    HAS_ADMISSION_CONTROL = True
except ImportError:  # Spark 4.0 and 4.1: the connector applies its own limits
    HAS_ADMISSION_CONTROL = False

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in so the reader's class definition works on Spark 4.0 and 4.1."""

    ReadMaxRows = None  # type: ignore[assignment,misc]


@dataclass(frozen=True)
class EventHubsPartition(InputPartition):
    """One Spark task: one range of an Event Hubs partition (or a few small ones, see
    ``eventhubs.minEventsPerTask``), and where to read them. Plain data only."""

    requests: tuple[RangeRequest, ...]
    service: bool = True  # through the executor's receiver service (eventhubs.receiverService)
    capture: CaptureRead | None = None  # the one range is read from these Capture files, not from the hub


def read_partition(split: EventHubsPartition) -> Iterator[Any]:
    """Executor side: read the task's ranges through the executor's receiver service (which sends the
    undecoded frames' spans; they are decoded here into Arrow record batches), or in this worker when
    there is none, and log what each took.

    (When planning finds nothing to read, Spark still runs one task with a placeholder partition;
    the readers answer that with no rows.)
    """
    from pyspark import TaskContext

    _worker_logging()
    ctx = TaskContext.get()
    runtime.task_started()
    retry = ctx is not None and ctx.attemptNumber() > 0
    done: list[list[Any]] = []  # each range read: [partition, end, its last event's enqueued time (µs)]
    for request in split.requests:
        if request.end <= request.start:
            continue
        if retry:
            request = dataclasses.replace(request, retry=True)
        stats: dict[str, Any] = {}
        started = time.monotonic()
        last = None
        try:
            if split.capture is not None:
                from eventhubs_spark.capture.reader import read_capture

                reads = read_capture(split.capture, request.settings, request.partition, request.start, request.end,
                                     request.fail_on_data_loss, stats)  # fmt: skip
            else:
                reads = runtime.current().read(request, split.service, stats)
            for last in reads:
                yield last
            if last is not None and last.num_rows:
                done.append([request.partition, request.end, last.column(_ENQUEUED)[last.num_rows - 1].value])
        finally:
            if stats.get("fallbacks"):
                slow_path_taken(request, int(stats["fallbacks"]), int(stats.get("read", 0)))
            if _LOG.isEnabledFor(logging.INFO):
                figures = " ".join(f"{key}={stats.get(key, 0)}" for key in _LOGGED)
                _LOG.info("eventhubs read hub=%s partition=%s range=[%d,%d) seconds=%.3f via=%s %s worker_pid=%d",
                          request.settings.hub, request.partition, request.start, request.end,
                          time.monotonic() - started, stats.get("via", "-"), figures, os.getpid())  # fmt: skip
    first = split.requests[0] if split.requests else None
    if done and first is not None and first.driver is not None:
        # The stream's driver works out how far behind the query is in time from each range's last event
        # (planning/lag.py). Asked, not told: the answer comes before the task ends, so before the next trigger.
        driver_channel.ask_kept(first.driver, first.query, {"kind": "read", "ranges": done}, timeout=_TELL_READ_TIMEOUT)


_ENQUEUED = ARROW_SCHEMA.get_field_index("enqueuedTime")
UNHEARD_AFTER = 4  # the driver says no executor reached its channel when planning this batch (three ran before)
_TELL_READ_TIMEOUT = 2.0  # seconds a task waits to tell the driver what it read (best effort: never fails it)

_SLOW_PATH_SAID: set[tuple[str, str, str, str]] = set()


def slow_path_taken(request: RangeRequest, fallbacks: int, read: int) -> bool:
    """Say once per query's hub, consumer group and partition (in this process) that messages were decoded
    by the SDK's slow decoder (messages the connector's own decoders do not handle), with how many; the task
    log line counts them every time (``fallbacks=``). Returns whether it said so now."""
    key = (request.settings.namespace, request.settings.hub, request.config.consumer_group, request.partition)
    if key in _SLOW_PATH_SAID:
        return False
    _SLOW_PATH_SAID.add(key)
    _LOG.warning(
        "eventhubs: hub %s partition %s (consumer group %s): %d of %d events in [%d, %d) were decoded by the "
        "SDK's decoder, about 10x slower than the connector's own: their messages have a shape the fast decoders "
        "do not handle. Said once per partition; each task's log line counts them (fallbacks=)",
        request.settings.hub, request.partition, request.config.consumer_group, fallbacks, read, request.start,
        request.end,
    )  # fmt: skip
    return True


def _read(partition: InputPartition, columns: Projection | None, avro: AvroReading | None = None) -> Iterator[Any]:
    """A reader's ``read``: the task's batches (with the Avro bodies decoded into ``value``, when asked), with only
    the columns the query asked for."""
    if not isinstance(partition, EventHubsPartition):
        return iter(())
    batches = read_partition(partition)
    if avro is not None:
        batches = map(avro.apply, batches)
    return said_first(batches if columns is None else map(columns.apply, batches))


def said_first(batches: Iterator[Any]) -> Iterator[Any]:
    """``batches``, with the connector's own errors raised with a traceback of one frame (the whole chain goes to
    the executor's log): Spark puts a task's Python traceback, then the error's message, into the exception a user
    sees, so a deep traceback buried our one-line message at line 48 of 56 of a stream's failure. Anything else (a
    bug) keeps its whole traceback."""
    try:
        yield from batches
    except EventHubsError as exc:
        _LOG.info("eventhubs: the task fails: %s", exc, exc_info=True)
        raise exc.with_traceback(None) from None


def _source_schema(avro: AvroReading | None) -> pa.Schema:
    """The source's columns: its own, then (reading Avro) ``value`` and the corrupt-record column."""
    return ARROW_SCHEMA if avro is None else pa.schema([*ARROW_SCHEMA, *avro.fields()])


# What a task logs of its read: the range's counts, then (pid: the process that read, the executor's
# receiver service or the worker) that process's pool and links, so reuse can be followed across tasks.
_LOGGED = (
    "read",
    "lost",
    "fallbacks",
    "pid",
    "pool_hits",
    "pool_repositions",
    "pool_creates",
    "pool_reuse_rate",
    "link_attaches",
    "displaced_idle",
    "displaced_reading",
    "closed_idle",
    "reconnects",
)


def _management(settings: ConnectionSettings, operation_timeout: float) -> PartitionMetadata:
    """The management client of the process the reader runs in.

    Looked up at each call, never bound at construction: readers are pickled to the executors and
    (on Spark Connect) between driver processes, and the runtime holds locks and sockets.
    """
    return runtime.current().management(settings, operation_timeout)


# Where the readers ask a hub's partitions' properties (tests give a stand-in; None: the process's client)
_Metadata = Callable[[], PartitionMetadata] | None
_Columns = Projection | None  # the query's own schema, when it gave one (arrow.projection)


class _Planner:
    """What the stream and batch readers share: settings, receiver config, partition metadata."""

    def __init__(self, raw: Mapping[str, str], mode: str, metadata: _Metadata = None) -> None:
        """``metadata``: where partition properties come from (default: the hub's management link)."""
        self.options = read_options(dict(raw), mode)
        self.settings = self.options.settings
        self.config = ReceiverConfig(
            consumer_group=self.options.consumer_group,
            prefetch=self.options.prefetch_count,
            receiver_timeout=self.options.receiver_timeout,
            exclusive=self.options.use_exclusive_receiver,
            read_ahead_events=self.options.read_ahead_events,
            read_ahead_bytes=self.options.read_ahead_bytes,
        )
        self.catalog = PartitionCatalog(
            self.settings.hub,
            metadata or functools.partial(_management, self.settings, self.options.operation_timeout),
        )
        # the checkpoint store: progress for others to see, and hand-overs in ownership mode
        self.mirror = CheckpointMirror(self.options.checkpoint_store, self.settings, self.config)
        self._ownership: Any = None
        # the hub's Capture files (eventhubs.capture.*): history the hub no longer holds
        self.capture: CaptureIndex | None = None
        if self.options.capture is not None:
            from eventhubs_spark.capture.index import CaptureIndex

            self.capture = CaptureIndex(self.options.capture, self.settings)

    def configured_starts(self, infos: Mapping[str, PartitionInfo]) -> dict[str, Position]:
        """eventhubs.startingPosition(s) per partition."""
        return self.positions_for(
            infos, self.options.default_start, self.options.starting_positions, "eventhubs.startingPositions"
        )

    def starting_positions(self, infos: Mapping[str, PartitionInfo]) -> dict[str, Position]:
        positions = self.configured_starts(infos)
        if self.options.start_from_checkpoint_store:
            from eventhubs_spark.checkpoints.query_ownership import checkpoint_position

            found = {
                pid: checkpoint_position(c, positions[pid])
                for pid, c in self.mirror.checkpoints().items()
                if pid in infos and (c.sequence_number is not None or c.offset is not None)
            }
            _LOG.info("hub %s: starting %d partition(s) from checkpoint store checkpoints %s", self.settings.hub,
                      len(found), found)  # fmt: skip
            positions.update(found)
        return positions

    def ownership(self) -> Any:
        """Ownership mode's cycle for this query (built once, in the stream runner process), or None."""
        settings = self.options.ownership
        if settings is None:
            return None
        if self._ownership is None:
            from eventhubs_spark.checkpoints.balancer import BalancerConfig
            from eventhubs_spark.checkpoints.query_ownership import QueryOwnership, default_owner_id

            config = BalancerConfig(
                strategy=settings.strategy,
                interval=settings.update_interval,
                expiry=settings.expiration,
                max_partitions=settings.max_partitions,
            )
            owner = settings.owner_id or default_owner_id()
            self._ownership = QueryOwnership(
                self.mirror.store(), self.settings.namespace, self.settings.hub, self.config.consumer_group,
                owner, lambda: self.catalog.ids, config,
            )  # fmt: skip
            _LOG.info("hub %s: ownership mode as owner %s (%s)", self.settings.hub, owner, config)
        return self._ownership

    def partition_infos(self, refresh_ids_after: float | None = None) -> dict[str, PartitionInfo]:
        infos = self.catalog.infos(refresh_ids_after)
        self.mirror.note(infos)
        return infos

    def positions_for(
        self,
        infos: Mapping[str, PartitionInfo],
        chosen: Position,
        overrides: Mapping[str, Position],
        per_partition: str,
    ) -> dict[str, Position]:
        """``chosen`` for every partition, but where ``overrides`` (option ``per_partition``) names one."""
        unknown = sorted(set(overrides) - set(infos), key=int)
        if unknown:
            example = f'.option({per_partition!r}, \'{{"{min(infos, key=int)}": {{"seqNo": 0}}}}\')'
            raise OptionError(
                f"{per_partition}: hub {self.settings.hub!r} has no partition(s) {unknown}; its partitions are "
                f"{sorted(infos, key=int)}, e.g. {example}",
                example,
            )
        return {pid: overrides.get(pid, chosen) for pid in infos}

    def resolve(self, infos: dict[str, PartitionInfo], positions: dict[str, Position]) -> dict[str, int]:
        """Each position's sequence number: from the hub, and with Capture, from its files where the event named is
        older than the hub's first (earliest: Capture's first event; an enqueued time before the hub's first)."""
        out = resolve(self.settings, self.config, infos, positions, self.config.receiver_timeout)
        capture = self.capture
        if capture is None:
            return out
        wanted: dict[str, Position] = {}
        for pid, position in positions.items():
            info = infos[pid]
            begin = info.end if info.is_empty else info.beginning_sequence_number
            if out[pid] > begin or not isinstance(position, Earliest | EnqueuedTime):
                continue  # the hub holds the event named, and one before it
            self._no_geo(pid, info)
            wanted[pid] = position

        def in_capture(pid: str) -> int | None:
            position = wanted[pid]
            if isinstance(position, EnqueuedTime):
                after = position.value.astimezone(datetime.timezone.utc)
                return capture.find_time(pid, int(after.timestamp()) * 1_000_000 + after.microsecond)
            return capture.earliest(pid)

        if wanted:  # every partition's files listed and read at once (each a few requests to the storage)
            with ThreadPoolExecutor(max_workers=min(16, len(wanted))) as pool:
                for pid, found in zip(wanted, pool.map(in_capture, wanted), strict=True):
                    if found is not None and found < out[pid]:
                        out[pid] = found
        return out

    def _no_geo(self, partition: str, info: PartitionInfo) -> None:
        if geo_segments.segment_of(info.end) >= 0:
            example = ".option('eventhubs.startingPosition', '{\"offset\": \"-1\"}')"
            raise OptionError(f"eventhubs.capture.location: hub {self.settings.hub!r} is geo-replicated (partition "
                              f"{partition}), and Capture's files carry no replication segment, so a read cannot "
                              f"join them to the hub's sequence; read this hub without eventhubs.capture.*, e.g. "
                              f"{example}", example)  # fmt: skip

    def split(self, partition: str, start: int, end: int, info: PartitionInfo) -> tuple[Range | None, int]:
        """``[start, end)`` as the part read from Capture (None: none) and where the part read from the hub
        begins: Capture holds what the hub no longer does, so the switch is at the partition's first retained
        event. Without Capture, the start after checking it against the retained events."""
        begin = info.beginning_sequence_number if not info.is_empty else info.end
        if self.capture is None or start >= begin or end <= start:
            return None, self.check_data_loss(partition, start, end, info)
        self._no_geo(partition, info)
        cut = min(end, begin)
        return Range(partition, start, cut), cut

    def capture_partitions(self, captured: list[Range], idle_timeout: float = BATCH_IDLE_TIMEOUT,
                           ) -> list[EventHubsPartition]:  # fmt: skip
        """Tasks for the ranges read from Capture: each partition's range cut where its files begin, into runs of
        files of at least :data:`CAPTURE_TASK_EVENTS` events (a long history is read by many tasks at once, a file
        by one), split further by eventhubs.maxEventsPerPartition; each task given the files that hold its range."""
        if self.capture is None:
            return []
        source = self.capture.source
        pieces: list[Range] = []
        for r in (r for r in captured if r.size > 0):
            files = self.capture.covering(r.partition, r.start, r.end)
            cuts = sorted({first for _, first in files if first is not None and r.start < first < r.end})
            begin = r.start
            for cut in cuts:
                if cut - begin >= CAPTURE_TASK_EVENTS:
                    pieces.append(Range(r.partition, begin, cut))
                    begin = cut
            pieces.append(Range(r.partition, begin, r.end))
        out = []
        for r in split_ranges(pieces, self.options.max_events_per_partition):
            files = self.capture.covering(r.partition, r.start, r.end)
            request = RangeRequest(self.settings, self.config, r.partition, r.start, r.end,
                                   self.options.fail_on_data_loss, idle_timeout)  # fmt: skip
            out.append(EventHubsPartition((request,), False, CaptureRead(source, files)))
        return out

    def input_partitions(
        self,
        ranges: list[Range],
        idle_timeout: float = BATCH_IDLE_TIMEOUT,
        owner: str | None = None,
        owned: frozenset[str] | None = None,
    ) -> list[EventHubsPartition]:
        pieces = split_ranges([r for r in ranges if r.size > 0], self.options.max_events_per_partition)
        fail = self.options.fail_on_data_loss

        def request(r: Range) -> RangeRequest:
            return RangeRequest(
                self.settings, self.config, r.partition, r.start, r.end, fail, idle_timeout, owner, owned
            )

        return [
            EventHubsPartition(tuple(request(r) for r in task), self.options.receiver_service)
            for task in pack_ranges(pieces, self.options.min_events_per_task, self.options.max_events_per_partition)
        ]

    def check_data_loss(self, partition: str, start: int, end: int, info: PartitionInfo) -> int:
        """The start to read from, after checking it against the partition's retained events."""
        begin = info.beginning_sequence_number if not info.is_empty else info.end
        if start >= begin or end <= start:  # nothing missing, or nothing to read in this range
            return start
        lost_until = min(begin, end)
        if self.options.fail_on_data_loss:
            raise data_loss_error(self.settings.hub, partition, start, lost_until, begins_at=begin)
        _LOG.warning(
            "hub %s partition %s: %d events [%d, %d) were lost to retention before they were read; continuing "
            "because failOnDataLoss=false",
            self.settings.hub,
            partition,
            geo_segments.count(start, lost_until),
            start,
            lost_until,
        )
        return begin


class EventHubsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("eventhubs")``."""

    def __init__(
        self, options: Mapping[str, str], metadata: _Metadata = None, columns: _Columns = None, schema: Any = None
    ) -> None:
        _worker_logging()  # the stream runner is a Python worker process too
        self.planner = _Planner(options, STREAM, metadata)
        self.avro = _avro(self.planner.options)
        # the query's own schema, when it gave one (arrow.projection)
        self.columns = columns if schema is None else projection(schema, _source_schema(self.avro))
        self.hub = self.planner.settings.hub
        self._initial: dict[str, int] | None = None
        self._last_end: dict[str, int] | None = None
        self._latest: dict[str, int] | None = None
        self._target: dict[str, int] | None = None
        self._infos: dict[str, PartitionInfo] = {}
        self._last_batch_at = time.monotonic()
        self._last_trigger_at: float | None = None
        self._cadence: float | None = None  # seconds between this query's triggers, smoothed
        self._mine: Any = None  # ownership mode: which partitions are this query's (ownership.OwnedPartitions)
        self._answers = 0  # latestOffset answers given without admission control (Spark 4.0/4.1)
        self._driver: QueryDriver | None = None  # the query's key, channel and homes, opened at the first batch
        self._no_driver = False  # it could not listen: not tried again
        self._batches_planned = 0  # batches planned with the driver's channel open
        typed = self.planner.options
        self._lag = LagTracker(self.hub, typed.stalled_after_batches, typed.stalled_after)
        self._lag_files = LagFiles(typed.checkpoint_location, self.hub) if typed.checkpoint_location else None
        if self._lag_files is not None:  # what `eventhubs-spark lag` reads back, given only the location
            settings = self.planner.settings
            try:
                self._lag_files.write_source(shareable_options(options, settings.namespace, self.hub,
                                                               settings.emulator, settings.auth_method))  # fmt: skip
            except OSError as exc:
                _LOG.warning("eventhubs: hub %s: the query's options could not be written under %s: %s", self.hub,
                             self._lag_files.directory, exc)  # fmt: skip
        self._lag_report: LagReport | None = None  # this trigger's figures (reportLatestOffset shows them)
        self._lag_written: tuple[Any, float] | None = None  # what the last lag file said, and when
        self._planned_batch = False  # the last trigger planned a batch (a partition it left counts to a stall)
        self._skipping = False  # the last trigger was skipped for minEventsPerTrigger

    def _refresh(self) -> dict[str, PartitionInfo]:
        self._infos = self.planner.partition_infos(self.planner.options.partition_discovery_interval)
        return self._infos

    def initialOffset(self) -> dict[str, Any]:
        if self._initial is None:
            infos = self._refresh()
            if self.planner.options.ownership is not None:
                self._initial = {}  # partitions join the offsets as this query gains them
            else:
                self._initial = self.planner.resolve(infos, self.planner.starting_positions(infos))
        return SourceOffset(self.hub, self._initial).to_json()

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self._max_events())

    def _max_events(self) -> int:
        configured = self.planner.options.max_events_per_trigger
        if configured:
            return configured
        count = len(self._infos) or len(self._refresh())
        return defaults.EVENTS_PER_PARTITION * max(1, count)

    def prepareForTriggerAvailableNow(self) -> None:
        """Spark 4.2+: the run reads what is there now, in batches of the read limit (admission control);
        eventhubs.triggerAvailableNow is not needed (the batches stay capped)."""
        infos = self._refresh()
        self._target = {pid: info.end for pid, info in infos.items()}
        _LOG.info("hub %s: Trigger.AvailableNow reads up to %s", self.hub, self._target)

    def _note_trigger(self) -> None:
        now = time.monotonic()
        if self._last_trigger_at is not None:
            gap = now - self._last_trigger_at
            self._cadence = gap if self._cadence is None else 0.7 * self._cadence + 0.3 * gap
        self._last_trigger_at = now

    def idle_timeout(self) -> float:
        """How long executors keep an idle receiver of this query: a few trigger intervals, bounded,
        and in ownership mode at most one update interval, so a partition handed over is free in time."""
        cadence = self._cadence if self._cadence is not None else MIN_STREAM_IDLE_TIMEOUT
        timeout = min(max(MIN_STREAM_IDLE_TIMEOUT, 3 * cadence + 2), MAX_STREAM_IDLE_TIMEOUT)
        ownership = self.planner.options.ownership
        if ownership is not None:
            timeout = min(timeout, ownership.update_interval)
        return timeout

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        self._note_trigger()
        infos = self._refresh()
        latest = {pid: info.end for pid, info in infos.items()}
        # Every batch that ended at or before ``start`` is complete (Spark plans one batch at a time); on
        # Spark 4.0/4.1 the same holds for this reader's previous answer.
        if start is not None:
            begin, completed = dict(SourceOffset.from_json(start, self.hub).positions), True
        elif self._last_end is not None:
            begin, completed = dict(self._last_end), True
        else:
            begin, completed = dict(SourceOffset.from_json(self.initialOffset(), self.hub).positions), False
        fresh: dict[str, int] = {}
        ownership = self.planner.ownership()
        if ownership is not None:
            if self._mine is None:
                from eventhubs_spark.checkpoints.query_ownership import OwnedPartitions

                self._mine = OwnedPartitions(ownership, self.planner.mirror, self.planner.configured_starts,
                                             self.planner.resolve, self.hub)  # fmt: skip
            begin, fresh = self._mine.plan(begin, infos)
            latest = {pid: latest[pid] for pid in begin}
        else:
            for pid in latest:
                begin.setdefault(pid, 0)  # a partition added at runtime is read from its first event
        if completed:
            self.planner.mirror.mirror(begin, infos)
        report = self._lag_report = self._lag.observe(begin, infos, self._planned_batch, self._stall_cause)
        if limit is None:
            max_events = self._limit_without_admission_control()
        elif ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            max_events = limit.max_rows
        else:
            max_events = None
        now = time.monotonic()
        plan = plan_trigger(
            begin,
            latest,
            max_events=max_events,
            target=self._target,
            min_events=self.planner.options.min_events_per_trigger,
            max_trigger_delay=self.planner.options.max_trigger_delay,
            now=now,
            last_batch_at=self._last_batch_at,
        )
        self._latest = plan.latest
        self._skipping = plan.skipped
        if plan.skipped:
            _LOG.info("hub %s: %d events waiting, below minEventsPerTrigger=%d; skipping this trigger", self.hub,
                      plan.backlog, self.planner.options.min_events_per_trigger)  # fmt: skip
            self._last_end = begin
            self._planned_batch = False
            self._said_lag(report, 0)
            return SourceOffset(self.hub, begin).to_json()
        end = plan.end
        if end != begin:
            self._last_batch_at = now
        end.update(fresh)  # partitions just gained: an empty range ending where the next batch starts
        self._last_end = end
        self._planned_batch = end != begin
        self._lag.planned(end, infos)
        self._said_lag(report, sum(geo_segments.count(begin[p], end[p]) for p in begin))
        return SourceOffset(self.hub, end).to_json()

    def _said_lag(self, report: LagReport, planned: int) -> None:
        """This trigger's lag: a line in the driver's log, a warning for each partition newly stalled, and a
        file in the checkpoint location (when a batch is planned, the figures changed, or a minute passed)."""
        _LOG.info("hub %s: planned %d events; %s", self.hub, planned, report.log_line())
        for lag in self._lag.newly_stalled(report):
            _LOG.warning("eventhubs: hub %s partition %s is stalled: %s", self.hub, lag.partition, lag.stalled)
        if self._lag_files is None:
            return
        figures = tuple((p, v.events, v.seconds, v.stalled) for p, v in sorted(report.partitions.items()))
        now = time.monotonic()
        last = self._lag_written
        if planned or last is None or last[0] != figures or now - last[1] >= LAG_FILE_EVERY:
            try:
                self._lag_files.write(report)
            except OSError as exc:
                _LOG.warning("eventhubs: hub %s: the lag figures could not be written under %s: %s", self.hub,
                             self._lag_files.directory, exc)  # fmt: skip
            self._lag_written = (figures, now)

    def _stall_cause(self, partition: str) -> str | None:
        """Why a partition with events waiting may not move, where the driver knows."""
        if self._skipping:
            return "the triggers are skipped: fewer events wait than minEventsPerTrigger (see maxTriggerDelay)"
        options = self.planner.options
        driver = self._driver
        if driver is not None and options.receiver_service and options.partition_homes:
            if not driver.live():
                return ("no home executor: no executor's receiver service has told the driver it serves the query "
                        "in the last 30 s (executors lost, or a firewall between them and the driver)")  # fmt: skip
            gone = driver.unreachable()
            if gone:
                return f"executors {sorted(gone)} could not be reached as homes and were dropped"
        return None

    def _limit_without_admission_control(self) -> int | None:
        """Spark 4.0/4.1 have no admission control for Python sources, and Trigger.AvailableNow there takes
        the first answer of a run as the end of the whole run (Spark gives the source no sign of its trigger:
        the calls are the same as for any other). So only an explicit maxEventsPerTrigger caps a batch; and
        with eventhubs.triggerAvailableNow=true the run's first (and only) batch takes everything there is."""
        options = self.planner.options
        self._answers += 1
        if not options.trigger_available_now:
            return options.max_events_per_trigger
        if self._answers == 1:
            _LOG.info("hub %s: eventhubs.triggerAvailableNow=true on Spark without admission control: this run "
                      "reads every event available now in one batch", self.hub)  # fmt: skip
            return None
        if self._answers == 2:
            _LOG.warning("hub %s: eventhubs.triggerAvailableNow=true, but Spark plans another batch: this query's "
                         "trigger is not Trigger.AvailableNow, and its first batch was not capped by "
                         "maxEventsPerTrigger; remove the option for this query", self.hub)  # fmt: skip
        return options.max_events_per_trigger

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The latest positions, as the progress's ``latestOffset`` (Spark 4.2+), with this trigger's lag figures
        beside them under ``"@lag"`` (no hub can have that name): the one place in a progress report a Python
        source can fill, since Spark gives it no metrics hook."""
        if self._latest is None:
            return None
        shown = SourceOffset(self.hub, self._latest).to_json()
        if self._lag_report is not None:
            shown[LAG_KEY] = self._lag_report.progress()
        return shown

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[EventHubsPartition]:
        s = SourceOffset.from_json(start, self.hub).positions
        e = SourceOffset.from_json(end, self.hub).positions
        infos = self._infos if set(e) <= set(self._infos) else self._refresh()
        self._last_end = dict(e)
        ranges = []
        from_capture: list[Range] = []
        for pid in sorted(e, key=int):
            first = s.get(pid)
            if first is None and self.planner.options.ownership is not None:
                first = e[pid]  # just gained: the offset records where it starts, read from the next batch
            elif first is None:  # new partition: from its first retained event, no data loss to report
                first = infos[pid].beginning_sequence_number if pid in infos else 0
            elif pid in infos:
                captured, first = self.planner.split(pid, first, e[pid], infos[pid])
                if captured is not None:
                    from_capture.append(captured)
            ranges.append(Range(pid, first, e[pid]))
        # Ownership mode, once a cycle has run (a re-run batch after a restart comes before one): what
        # this query owns, so executors close idle receivers of partitions it gave up.
        owner, owned = (self._mine.owner, self._mine.owned()) if self._mine is not None else (None, None)
        planned = self.planner.input_partitions(ranges, self.idle_timeout(), owner, owned)
        planned += self.planner.capture_partitions(from_capture, self.idle_timeout())
        running: dict[str, tuple[int, int]] = {}
        for r in ranges + from_capture:  # a partition's range may be split over tasks (maxEventsPerPartition)
            known = running.get(r.partition, (r.start, r.end))
            running[r.partition] = (min(known[0], r.start), max(known[1], r.end))
        self._lag.running(running)
        driver = self.query_driver()
        if driver is None:
            return planned
        self._unheard(driver)
        options = self.planner.options
        # without homes each executor's service reads what it gets; the driver still hears what it must
        homes = options.receiver_service and options.partition_homes
        placed = driver.homes(e) if homes else {}
        query, where = driver.query, driver.address()
        ports, bind = options.executor_ports, options.executor_bind_address

        def placed_request(r: RangeRequest, files: bool) -> RangeRequest:
            home = None if files else placed.get(r.partition)  # Capture files are read where the task runs
            return dataclasses.replace(r, query=query, driver=where, home=home, homes=homes, ports=ports, bind=bind)

        return [dataclasses.replace(split, requests=tuple(placed_request(r, split.capture is not None)
                                                          for r in split.requests)) for split in planned]  # fmt: skip

    def _unheard(self, driver: QueryDriver) -> None:
        """Said once per query: batches ran, and not one of their tasks or services reached the driver's channel
        (a firewall, or a sandbox, between the executors and the driver). They found that out themselves and
        step aside; here the driver says what that turns off, and how to turn it off for good."""
        options = self.planner.options
        if not (options.receiver_service and options.partition_homes):
            return  # without homes a quiet stream's tasks have nothing to tell: silence says nothing
        self._batches_planned += 1
        if self._batches_planned != UNHEARD_AFTER or driver.channel.proven:
            return
        where = driver.address()
        _LOG.warning("eventhubs: hub %s: in %d micro-batches no executor reached the driver's channel (port %d on %s): "
                     "a firewall or a sandbox between them? The executors found it out once each and step aside: "
                     "partitions get no home (each executor's service reads what Spark gives it) and the lag figures "
                     "have events but no seconds. Open that port to the executors (eventhubs.driverChannel.ports, "
                     ".bindAddress), or set eventhubs.driverChannel=false to open none", self.hub, UNHEARD_AFTER - 1,
                     where.port, ", ".join(where.hosts))  # fmt: skip

    def query_driver(self) -> QueryDriver | None:
        """This query's driver side (key, channel, live services, homes), opened at the first batch in the
        stream runner process that plans every batch; None where it cannot listen (the query then reads as
        on one executor: each executor's service opens its own links)."""
        options = self.planner.options
        if self._driver is None and not self._no_driver and not options.driver_channel:
            self._no_driver = True
            _LOG.info("eventhubs: hub %s: eventhubs.driverChannel=false: the driver opens no port and no task connects "
                      "to it; partitions get no home (each executor's service reads what Spark gives it), and the "
                      "lag figures have events but no seconds", self.hub)  # fmt: skip
        if self._driver is None and not self._no_driver:
            try:
                self._driver = QueryDriver(self.hub, on_read=self._lag.read, bind=options.driver_bind_address,
                                           ports=options.driver_ports)  # fmt: skip
                threading.Thread(target=self._watch_batches, args=(self._driver,), name="eventhubs-lag-watch",
                                 daemon=True).start()  # fmt: skip
            except OSError as exc:
                _LOG.warning("eventhubs: hub %s: the driver cannot listen (%s): partitions get no home, and what "
                             "executors would tell the driver stays in their own logs", self.hub, exc)  # fmt: skip
                self._no_driver = True
        return self._driver

    def _watch_batches(self, driver: QueryDriver) -> None:
        """While the query's driver lives: say by name each partition whose range a running batch has not read
        within eventhubs.lag.stalledAfter (such a batch never reaches the next trigger's lag figures); and keep
        the times of what the tasks read in the lag files' reads.json, for the command."""
        every = min(10.0, max(0.5, self._lag.stalled_after / 4))
        written: dict[str, tuple[int, int]] = {}
        while self._driver is driver:
            time.sleep(every)
            reads = self._lag.known_reads()
            if self._lag_files is not None and reads != written:
                with contextlib.suppress(OSError):
                    self._lag_files.write_reads(reads)
                    written = reads
            stalled: dict[str, str] = {}
            for partition, start, end, waited in self._lag.overdue():
                why = self._stall_cause(partition) or (
                    "cause unknown: no failure was reported for it (a slow or throttled read, or a task Spark cannot "
                    "schedule?)"
                )
                stalled[partition] = (f"the batch reading [{geo_segments.show(start)}, {geo_segments.show(end)}) began "
                                      f"{waited:.0f} s ago and no task has read that range; {why}")  # fmt: skip
                _LOG.warning("eventhubs: hub %s partition %s is stalled: %s", self.hub, partition, stalled[partition])
            last = self._lag_report
            if stalled and last is not None and self._lag_files is not None:
                marked = {p: dataclasses.replace(v, stalled=stalled.get(p, v.stalled))
                          for p, v in last.partitions.items()}  # fmt: skip
                with contextlib.suppress(OSError):
                    self._lag_files.write(LagReport(self.hub, datetime.datetime.now(datetime.timezone.utc), marked))

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_driver"] = None  # a listening socket stays in the process that opened it
        return state

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition, self.columns, self.avro)

    def commit(self, end: dict[str, Any]) -> None:
        positions = SourceOffset.from_json(end, self.hub).positions
        _LOG.info("hub %s: committed %s", self.hub, dict(positions))
        self.planner.mirror.mirror(positions, self._infos)

    def stop(self) -> None:
        """Spark rarely calls this (it ends the runner process instead); nothing depends on it."""


class EventHubsBatchReader(DataSourceReader):
    """``spark.read.format("eventhubs")``: from the starting to the ending positions, then done."""

    def __init__(
        self, options: Mapping[str, str], metadata: _Metadata = None, columns: _Columns = None, schema: Any = None
    ) -> None:
        self.planner = _Planner(options, BATCH, metadata)
        self.avro = _avro(self.planner.options)
        # the query's own schema, when it gave one (arrow.projection)
        self.columns = columns if schema is None else projection(schema, _source_schema(self.avro))

    def partitions(self) -> list[EventHubsPartition]:
        planner = self.planner
        infos = planner.partition_infos()
        starts = planner.resolve(infos, planner.starting_positions(infos))
        options = planner.options
        ending = planner.positions_for(
            infos, options.ending_position or Latest(), options.ending_positions, "eventhubs.endingPositions"
        )
        # An ending position names the first event *not* read (as the old connector's translate() used it).
        ends = planner.resolve(infos, ending)
        ranges = []
        from_capture: list[Range] = []
        for pid in sorted(infos, key=int):
            start, end = starts[pid], ends[pid]
            explicit_end = pid in options.ending_positions or options.ending_position is not None
            if end < start and explicit_end:
                example = f".option('eventhubs.endingPositions', '{{\"{pid}\": {{\"seqNo\": {start}}}}}')"
                raise OptionError(
                    f"partition {pid}: the ending position (sequence number {end}) is before the starting position "
                    f"({start}); check eventhubs.startingPosition(s) and eventhubs.endingPosition(s), e.g. {example}",
                    example,
                )
            # A batch read never waits for events that do not exist yet.
            end = min(end, infos[pid].end)
            captured, start = planner.split(pid, min(start, end), end, infos[pid])
            if captured is not None:
                from_capture.append(captured)
            ranges.append(Range(pid, start, end))
        return planner.input_partitions(ranges) + planner.capture_partitions(from_capture)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition, self.columns, self.avro)


class EventHubsDataSource(DataSource):
    """The ``eventhubs`` data source. Options: see docs/pages/options.md (``eventhubs_spark.options``)."""

    @classmethod
    def name(cls) -> str:
        return "eventhubs"

    def schema(self) -> str:
        # Spark calls this at .load(): the first place a bad option can be reported, before any query.
        from eventhubs_spark.options import check_read_options

        try:
            avro = _avro(check_read_options(self.options))
        except OptionError as exc:
            # Spark shows the traceback with the message: keep it to this one frame.
            error: Exception = OptionError(str(exc), exc.example)
        except RegistryError as exc:
            error = RegistryError(str(exc), exc.retriable)
        else:
            return SCHEMA_DDL if avro is None else f"{SCHEMA_DDL}, {avro.ddl()}"
        raise error

    # ``schema``: the query's own (``.schema(...)``: some of the columns, see arrow.projection), else the source's.
    def reader(self, schema: Any) -> DataSourceReader:
        try:
            return EventHubsBatchReader(self.options, schema=schema)
        except (OptionError, RegistryError) as exc:
            return _FailingReader(exc)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        try:
            return EventHubsStreamReader(self.options, schema=schema)
        except (OptionError, RegistryError) as exc:
            return _FailingStreamReader(exc)

    def writer(self, schema: Any, overwrite: bool) -> Any:
        from eventhubs_spark.sink import batch_writer

        _append_only(overwrite)
        return batch_writer(self.options, schema)

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        from eventhubs_spark.sink import stream_writer

        _append_only(overwrite)
        return stream_writer(self.options, schema)


def _avro(options: ReadOptions) -> AvroReading | None:
    """How a read of these options decodes Avro (None: it does not); the reader schema fetched when named by id."""
    return avro_reading(options.settings, options.avro_registry, options.avro_schema, options.avro_schema_id,
                        options.avro_mode, options.avro_corrupt_column)  # fmt: skip


class _Failing:
    """Reports an option error (or a Schema Registry that could not give the reader schema) from a reader's
    first call.

    PySpark's stream runner calls ``reader.stop()`` in a ``finally`` around ``streamReader()``: an
    error raised there is replaced by ``UnboundLocalError: cannot access local variable 'reader'``.
    Returning a reader that raises on use keeps our message the one the user sees.
    """

    def __init__(self, error: OptionError | RegistryError) -> None:
        self.error = error

    def fail(self) -> NoReturn:
        error = self.error
        if isinstance(error, OptionError):
            raise OptionError(str(error), error.example) from None
        raise RegistryError(str(error), error.retriable) from None

    def read(self, partition: InputPartition) -> Iterator[Any]:
        self.fail()


class _FailingStreamReader(_Failing, DataSourceStreamReader):
    def initialOffset(self) -> dict[str, Any]:
        self.fail()

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        self.fail()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        self.fail()

    def stop(self) -> None:
        """Nothing was opened."""


class _FailingReader(_Failing, DataSourceReader):
    def partitions(self) -> list[InputPartition]:
        self.fail()


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise OptionError(
            "an event hub is append-only: it keeps every event it is sent and cannot replace them, so Overwrite (which "
            "Spark suggests beside Append when it refuses its default mode) does not apply. Write with "
            ".mode('append') (a stream: .outputMode('append'))",
            "mode('append')",
        )
