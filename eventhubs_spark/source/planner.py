"""Driver side: the options of one query turned into partitions' positions, sequence-number ranges and tasks.

Shared by the stream and the batch reader: it resolves starting and ending positions, checks data loss, and cuts
ranges into tasks (Capture's history and the hub's retention apart).
"""

from __future__ import annotations

import datetime
import functools
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from eventhubs_spark.amqp import failures
from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.avro import reading as avro_reading
from eventhubs_spark.avro.decode import AvroReading
from eventhubs_spark.capture.store import CaptureRead
from eventhubs_spark.checkpoints.mirror import CheckpointMirror
from eventhubs_spark.codec.schema import Projection, projection
from eventhubs_spark.errors import AuthenticationFailedError, HubNotFoundError, OptionError, data_loss_error
from eventhubs_spark.interprocess.task_ranges import Home, RangeRequest, ReceiverConfig
from eventhubs_spark.json_bodies.decode import JsonReading
from eventhubs_spark.options import ReadOptions, read_options
from eventhubs_spark.planning.offset_ranges import Range, pack_ranges, split_ranges
from eventhubs_spark.planning.position_lookup import resolve
from eventhubs_spark.positions import geo_segments
from eventhubs_spark.positions.event_positions import Earliest, EnqueuedTime, Position
from eventhubs_spark.positions.partition_catalog import PartitionCatalog, PartitionInfo, PartitionMetadata
from eventhubs_spark.process import runtime
from eventhubs_spark.source.partition_reader import EventHubsPartition, source_schema

if TYPE_CHECKING:
    from eventhubs_spark.capture.index import CaptureIndex
    from eventhubs_spark.interprocess.partition_ends import Vouch
    from eventhubs_spark.planning.executor_ends import KnownEnds


_LOG = logging.getLogger(__name__)


# How long an idle owner-level receiver stays open on an executor, waiting for its partition's next
# range. Open, it saves the next task a link attach and keeps its prefetched events; but it also locks
# non-epoch readers of the consumer group out. A stream keeps it for a few of its own trigger intervals
# (measured), within these bounds, and in ownership mode for at most one ownership update interval; a
# batch read keeps it briefly, for the next range of the same partition.
BATCH_IDLE_TIMEOUT = 10.0


MIN_STREAM_IDLE_TIMEOUT = 10.0


MAX_STREAM_IDLE_TIMEOUT = 120.0


# A first batch's interval is not known when it is planned: it is taken as this many seconds of wall time a
# partition (a task each, Spark's own per-task cost on a small cluster: bench partitions), at least the minimum.
FIRST_BATCH_TASK_SECONDS = 0.05


GROUP_CHECK_TIMEOUT = 10.0  # seconds the driver waits for its consumer-group check's link to attach (else: goes on)

# Events from Capture a task reads at least, in whole files: a partition's long history goes to many tasks at once
# (each file is read by the one task whose range holds its first event), without a task for every small file.
CAPTURE_TASK_EVENTS = 200_000


def _management(settings: ConnectionSettings, operation_timeout: float) -> PartitionMetadata:
    """The management client of the process the reader runs in.

    Looked up at each call, never bound at construction: readers are pickled to the executors and
    (on Spark Connect) between driver processes, and the runtime holds locks and sockets.
    """
    return runtime.current().management(settings, operation_timeout)


# Where the readers ask a hub's partitions' properties (tests give a stand-in; None: the process's client)
MetadataSource = Callable[[], PartitionMetadata] | None


QueryColumns = Projection | None  # the query's own schema, when it gave one (codec.schema.projection)


class Planner:
    """What the stream and batch readers share: settings, receiver config, partition metadata."""

    def __init__(self, raw: Mapping[str, str], mode: str, metadata: MetadataSource = None) -> None:
        """``metadata``: where partition properties come from (default: the hub's management link)."""
        self.options = read_options(dict(raw), mode)
        # the user chose how tasks are sized (an offset of an earlier version is then packed by the option, not as
        # that version's default of a task a partition)
        self.tasks_option_given = any(str(k).lower() == "eventhubs.mineventspertask" for k in raw)
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
        self._group_checked = metadata is not None  # a stand-in hub (tests) has no receivers to check with
        # this process plans the query: where a wrong host or port first meets the namespace, said at once
        failures.first_contact_fails_fast()

    def check_consumer_group(self, infos: Mapping[str, PartitionInfo]) -> None:
        """Once, on the driver, before any task: that the hub has the query's consumer group, by attaching one
        receiving link to one partition (at its end: it reads nothing), with no owner level, so it takes nothing
        from a reader that holds the partition. The management requests that listed ``infos`` found the namespace,
        the sign-in and the hub; only a receiver's attach finds a missing group, which every task then met 35 s into
        the query, told once per task and retry. Said as ConsumerGroupNotFoundError (or the sign-in's error); any
        other answer (a reader of the group holding the partition, a busy link) means the group is there."""
        if self._group_checked or not infos:
            return
        from eventhubs_spark.amqp.receive_connections import LinkSpec

        pid = min(infos, key=int)
        spec = LinkSpec(self.config.consumer_group, pid, infos[pid].end, None, prefetch=1, read_ahead_events=1,
                        read_ahead_bytes=1 << 20)  # fmt: skip
        connection, link = runtime.current().connections.open_link(self.settings, spec)
        try:
            deadline = time.monotonic() + GROUP_CHECK_TIMEOUT
            while link.state == "opening" and link.sink.error is None and time.monotonic() < deadline:
                time.sleep(0.005)
            exc = link.sink.exception
            if link.sink.error is not None and exc is not None:
                found = failures.failure(self.settings, exc)
                if isinstance(found, HubNotFoundError | AuthenticationFailedError):
                    raise found
        finally:
            connection.close_link(link)
        self._group_checked = True

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

    def partition_infos(
        self,
        refresh_ids_after: float | None = None,
        known: KnownEnds | None = None,
        vouches: Mapping[str, Vouch] | None = None,
    ) -> dict[str, PartitionInfo]:
        """Every partition's properties, fresh from Event Hubs; with ``vouches`` (a running stream's executors'
        word on where partitions end) and ``known`` (what it planned from last), fresh only where they do not
        vouch (:mod:`eventhubs_spark.planning.executor_ends`)."""
        if known is not None and vouches is not None:
            # listed again on a thread of its own: such a trigger otherwise asks Event Hubs little or nothing
            ids = self.catalog.listed(refresh_ids_after, background=True)
            infos = known.infos(ids, vouches, self.catalog.properties)
        else:
            infos = self.catalog.infos(refresh_ids_after)
            if known is not None:
                known.asked_all(infos)
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
                           stream: Mapping[str, Any] | None = None) -> list[EventHubsPartition]:  # fmt: skip
        """Tasks for the ranges read from Capture: each partition's range cut where its files begin, into runs of
        files of at least :data:`CAPTURE_TASK_EVENTS` events (a long history is read by many tasks at once, a file
        by one), split further by eventhubs.maxEventsPerPartition; each task given the files that hold its range.
        ``stream``: a stream's fields of each request (see :meth:`input_partitions`; Capture files have no home)."""
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
            request = RangeRequest(
                self.config,
                r.partition,
                r.start,
                r.end,
                self.options.fail_on_data_loss,
                idle_timeout,
                settings=self.settings,
                **(stream or {}),
            )
            out.append(EventHubsPartition((request,), False, CaptureRead(source, files)))
        return out

    def input_partitions(
        self,
        ranges: list[Range],
        idle_timeout: float = BATCH_IDLE_TIMEOUT,
        owner: str | None = None,
        owned: frozenset[str] | None = None,
        stream: Mapping[str, Any] | None = None,
        placed: Mapping[str, Home] | None = None,
        groups: Mapping[str, str] | None = None,
        at_least: int = 1,
        min_events: int | None = None,
    ) -> list[EventHubsPartition]:
        """The tasks reading ``ranges``. ``stream``: a stream's fields of every request (``query``, ``driver``,
        ``homes``, ``ports``, ``bind``), ``placed`` each partition's home: given here, each request is made once
        (at 1,024 partitions two ``dataclasses.replace`` a request were 8 ms of a batch's planning). ``groups``:
        the home each partition's small range is packed by, ``at_least`` the tasks they share at the least, and
        ``min_events`` a task's worth in place of the option's (:func:`pack_ranges`)."""
        pieces = split_ranges([r for r in ranges if r.size > 0], self.options.max_events_per_partition)
        fail = self.options.fail_on_data_loss
        extra = stream or {}
        homes = placed or {}

        def request(r: Range) -> RangeRequest:
            return RangeRequest(self.config, r.partition, r.start, r.end, fail, idle_timeout, owner, owned,
                                settings=self.settings, home=homes.get(r.partition), **extra)  # fmt: skip

        options = self.options
        worth = options.min_events_per_task if min_events is None else min_events
        tasks = pack_ranges(pieces, worth, options.max_events_per_partition, options.max_partitions_per_task, groups,
                            at_least)  # fmt: skip
        return [EventHubsPartition(tuple(request(r) for r in task), options.receiver_service) for task in tasks]

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


BodyDecoding = AvroReading | JsonReading  # what a read decodes bodies with: fields(), ddl(), apply(batch)


def avro_of_options(options: ReadOptions) -> AvroReading | None:
    """How a read of these options decodes Avro (None: it does not); the reader schema fetched when named by id."""
    return avro_reading(options.settings, options.avro_registry, options.avro_schema, options.avro_schema_id,
                        options.avro_mode, options.avro_corrupt_column)  # fmt: skip


def body_decoding(raw: Mapping[str, str], options: ReadOptions, spark_schema: Any = None) -> BodyDecoding | None:
    """How a read decodes its bodies into columns: Avro (eventhubs.avro.*), JSON (eventhubs.json.*), or not (None).
    ``spark_schema``: the schema Spark gave the reader (a JSON read reads its ``value`` column's type)."""
    avro = avro_of_options(options)
    if avro is not None:
        return avro
    from eventhubs_spark.source.json_schema import json_of_options

    return json_of_options(raw, options, Planner, spark_schema)


def plan_reading(
    options: Mapping[str, str], mode: str, metadata: MetadataSource, columns: QueryColumns, schema: Any
) -> tuple[Planner, BodyDecoding | None, QueryColumns]:
    """What both readers start from: the read's planner, how it decodes bodies (Avro, JSON), and the columns the
    query's own schema picks (``schema``, when it gave one: :func:`~eventhubs_spark.codec.schema.projection`)."""
    planner = Planner(options, mode, metadata)
    decoding = body_decoding(options, planner.options, schema)
    return planner, decoding, columns if schema is None else projection(schema, source_schema(decoding))
