"""The stream reader: offsets, rate limits and admission control, each micro-batch's tasks, lag and homes.

Spark calls it on the driver (``latestOffset``, ``partitions``, ``commit``); on Spark 4.2+ it takes Spark's
admission control and ``Trigger.AvailableNow``, on 4.0 and 4.1 it applies the same limits itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from eventhubs_spark import defaults
from eventhubs_spark.interprocess.task_ranges import Home
from eventhubs_spark.lag.query import QueryLag
from eventhubs_spark.options import STREAM, shareable_options
from eventhubs_spark.planning.executor_ends import KnownEnds
from eventhubs_spark.planning.offset_ranges import OffsetCodec, Packing, Range, SourceOffset, plan_trigger
from eventhubs_spark.planning.partition_homes import QueryDriver
from eventhubs_spark.planning.partition_placement import homes as placement_homes
from eventhubs_spark.positions.partition_catalog import PartitionInfo
from eventhubs_spark.process import runtime
from eventhubs_spark.source.partition_reader import EventHubsPartition, TaskReader, read_batches, worker_logging
from eventhubs_spark.source.planner import (
    FIRST_BATCH_TASK_SECONDS,
    MAX_STREAM_IDLE_TIMEOUT,
    MIN_STREAM_IDLE_TIMEOUT,
    MetadataSource,
    QueryColumns,
    plan_reading,
)
from eventhubs_spark.source.said_first import spark_facing

_LOG = logging.getLogger(__name__)


# Tasks a stream's first batch of small ranges spreads over at least (while no executor has said it serves the query):
# enough for every executor of a small cluster to run one and announce its service before the homes are placed.
FIRST_TASKS = 8
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


FETCHED_FOR = 5.0  # seconds a query's first trigger may plan from the properties its initialOffset fetched

UNHEARD_AFTER = 4  # the driver says no executor reached its channel when planning this batch (three ran before)
# A trigger waits at most this long for the last batch's tasks' reports still on their way (lag.tracker's
# await_reports): they are sent as a task ends and are nearly always here long before Spark's next trigger.
REPORTS_WAIT = 0.5


class EventHubsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("eventhubs")``."""

    def __init__(self, options: Mapping[str, str], metadata: MetadataSource = None,
                 columns: QueryColumns = None, schema: Any = None) -> None:  # fmt: skip
        worker_logging()  # the stream runner is a Python worker process too
        self.planner, self.avro, self.columns = plan_reading(options, STREAM, metadata, columns, schema)
        self.hub = self.planner.settings.hub
        self._initial: dict[str, int] | None = None
        self._last_end: dict[str, int] | None = None
        self._ends_of: tuple[dict[str, PartitionInfo], dict[str, int]] | None = None  # see _ends
        self._offsets = OffsetCodec(self.hub)  # Spark hands back the offsets it was given: known, not parsed again
        self._latest: dict[str, int] | None = None
        self._target: dict[str, int] | None = None
        self._run_infos: dict[str, PartitionInfo] | None = None  # a Trigger.AvailableNow run's (its ends)
        self._infos: dict[str, PartitionInfo] = {}
        self._fetched: tuple[float, dict[str, PartitionInfo]] | None = None  # see _unused_infos
        self._known_ends: KnownEnds | None = None  # a running stream's last plan, against its executors' ends
        self._last_batch_at = time.monotonic()
        self._last_trigger_at: float | None = None
        self._cadence: float | None = None  # seconds between this query's triggers, smoothed
        self._mine: Any = None  # ownership mode: the partitions this query owns (query_ownership.OwnedPartitions)
        self._answers = 0  # latestOffset answers given without admission control (Spark 4.0/4.1)
        self._driver: QueryDriver | None = None  # the query's key, channel and homes, opened at the first batch
        self._groups: tuple[tuple[Any, ...], dict[str, str]] | None = None  # the last batch's packing by home
        self._no_driver = False  # it could not listen: not tried again
        self._batches_planned = 0  # batches planned with the driver's channel open
        typed = self.planner.options
        self._lag = QueryLag(self.hub, typed.stalled_after_batches, typed.stalled_after, typed.checkpoint_location,
                             self._stall_cause)  # fmt: skip
        if self._lag.files is not None:
            settings = self.planner.settings
            self._lag.keep_source(shareable_options(options, settings.namespace, self.hub, settings.emulator,
                                                    settings.auth_method))  # fmt: skip
        self._planned_batch = False  # the last trigger planned a batch (a partition it left counts to a stall)
        self._skipping = False  # the last trigger was skipped for minEventsPerTrigger

    def _refresh(self, vouched: bool = False) -> dict[str, PartitionInfo]:
        """Every partition's properties, fresh from Event Hubs; ``vouched`` (a running stream's trigger): from the
        executors' receiver services where their links vouch for a partition's end, fresh elsewhere
        (:mod:`eventhubs_spark.planning.executor_ends`)."""
        if self._known_ends is None:
            self._known_ends = KnownEnds()
        known = self._known_ends
        vouches = None
        if vouched and known.last and self._driver is not None:
            vouches = self._driver.executor_ends()
        interval = self.planner.options.partition_discovery_interval
        self._infos = self.planner.partition_infos(interval, known, vouches)
        self.planner.check_consumer_group(self._infos)  # the query's first trigger: before any task runs
        if vouches is not None:
            _LOG.debug("hub %s: %d partitions' ends from the executors' links, %d asked of Event Hubs", self.hub,
                       known.vouched, known.asked)  # fmt: skip
        return self._infos

    @spark_facing
    def initialOffset(self) -> dict[str, Any]:
        if self._initial is None:
            infos = self._trigger_infos()
            self._fetched = (time.monotonic(), infos)  # the first trigger plans from them (see _unused_infos)
            if self.planner.options.ownership is not None:
                self._initial = {}  # partitions join the offsets as this query gains them
            else:
                self._initial = self.planner.resolve(infos, self.planner.starting_positions(infos))
        # through the codec: Spark hands this document back as the first trigger's start (a big hub's positions to
        # read again, were it not remembered)
        return self._offsets.to_json(self._initial)

    @spark_facing
    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self._max_events())

    def _max_events(self) -> int:
        configured = self.planner.options.max_events_per_trigger
        if configured:
            return configured
        count = len(self._infos) or len(self._refresh())
        return defaults.EVENTS_PER_PARTITION * max(1, count)

    @spark_facing
    def prepareForTriggerAvailableNow(self) -> None:
        """Spark 4.2+: the run reads what is there now, in batches of the read limit (admission control);
        eventhubs.triggerAvailableNow is not needed (the batches stay capped)."""
        infos = self._unused_infos() or self._refresh()
        self._target = {pid: info.end for pid, info in infos.items()}
        self._ends_of = (infos, self._target)  # the run's ends are its target (plan_trigger: then it caps nothing)
        self._run_infos = infos
        _LOG.info("hub %s: Trigger.AvailableNow reads up to %s", self.hub, self._target)

    def _trigger_infos(self) -> dict[str, PartitionInfo]:
        """The partition properties a trigger plans from: fresh ones, but in a Trigger.AvailableNow run (Spark
        4.2+) those the run fetched when it began. The run's end is fixed then, so nothing a later lookup could
        tell changes what its batches read: at 1,024 partitions each lookup is 1,024 requests (Spark's Kafka
        source likewise plans such a run from the offsets it fetched first). Its lag figures then count what is
        left of the run. Ownership mode asks every time: the partitions it gains need their fresh ends."""
        ownership = self.planner.options.ownership
        if self._run_infos is not None and ownership is None:
            return self._run_infos
        unused = self._unused_infos()
        if unused is not None and ownership is None:
            return unused
        return self._refresh(vouched=ownership is None)

    def _unused_infos(self) -> dict[str, PartitionInfo] | None:
        """The properties a query's first ``initialOffset`` fetched, once, within FETCHED_FOR seconds: Spark calls
        the first trigger's ``latestOffset`` (or ``prepareForTriggerAvailableNow``) right after it, and asking every
        partition again a moment later told nothing new (at 1,024 partitions, 1,024 requests: 57 ms of that trigger
        on the emulator, more on a real namespace)."""
        fetched, self._fetched = self._fetched, None
        if fetched is not None and time.monotonic() - fetched[0] <= FETCHED_FOR:
            return fetched[1]
        return None

    def _ends(self, infos: dict[str, PartitionInfo]) -> dict[str, int]:
        """Each partition's end in ``infos``; kept while the same properties are planned from (a
        Trigger.AvailableNow run plans every batch from those it fetched when it began)."""
        if self._ends_of is None or self._ends_of[0] is not infos:
            self._ends_of = (infos, {pid: info.end for pid, info in infos.items()})
        return self._ends_of[1]

    def _note_trigger(self) -> None:
        now = time.monotonic()
        if self._last_trigger_at is not None:
            gap = now - self._last_trigger_at
            self._cadence = gap if self._cadence is None else 0.7 * self._cadence + 0.3 * gap
        self._last_trigger_at = now

    def idle_timeout(self) -> float:
        """How long executors keep an idle receiver of this query: a few trigger intervals, bounded,
        and in ownership mode at most one update interval, so a partition handed over is free in time."""
        cadence = self._cadence
        if cadence is None:
            # the first trigger: no interval measured yet. Its batch takes at least a task per partition at Spark's
            # own cost (tens of ms of wall time each on a small cluster), and a partition read early in a long
            # first batch must still have its link when the second batch comes: at 1,024 partitions the first
            # batch took 40 s, and every link it opened was closed idle after 10 s and attached again.
            cadence = max(MIN_STREAM_IDLE_TIMEOUT, len(self._infos) * FIRST_BATCH_TASK_SECONDS)
        timeout = min(max(MIN_STREAM_IDLE_TIMEOUT, 3 * cadence + 2), MAX_STREAM_IDLE_TIMEOUT)
        ownership = self.planner.options.ownership
        if ownership is not None:
            timeout = min(timeout, ownership.update_interval)
        return timeout

    @spark_facing
    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        self._note_trigger()
        infos = self._trigger_infos()
        latest = self._ends(infos)
        if self._driver is not None and self._planned_batch:
            # what the batch before read (its tasks told, not asked), before anything here uses it: the lag figures,
            # the checkpoints mirrored and, in ownership mode, those of the partitions handed over
            self._lag.await_reports(REPORTS_WAIT)
        # Every batch that ended at or before ``start`` is complete (Spark plans one batch at a time); on
        # Spark 4.0/4.1 the same holds for this reader's previous answer.
        if start is not None:
            begin, completed = self._offsets.positions(start), True
        elif self._last_end is not None:
            begin, completed = dict(self._last_end), True
        else:
            begin, completed = self._offsets.positions(self.initialOffset()), False
        fresh: dict[str, int] = {}
        ownership = self.planner.ownership()
        if ownership is not None:
            if self._mine is None:
                from eventhubs_spark.checkpoints.query_ownership import OwnedPartitions

                self._mine = OwnedPartitions(ownership, self.planner.mirror, self.planner.configured_starts,
                                             self.planner.resolve, self.hub)  # fmt: skip
            begin, fresh = self._mine.plan(begin, infos)
            latest = {pid: latest[pid] for pid in begin}
        elif not latest.keys() <= begin.keys():  # a set comparison in C, not a setdefault a partition
            for pid in latest:
                begin.setdefault(pid, 0)  # a partition added at runtime is read from its first event
        report = self._lag.observe(begin, infos, self._planned_batch)
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
        if completed:  # the batches before this one, to the checkpoint store: while the batch planned now runs, if
            # one is (ownership mode's hand-overs need them written first), else before the trigger ends
            follows = not plan.skipped and plan.end != begin
            self.planner.mirror.mirror(begin, infos, background=follows and ownership is None)
        if plan.skipped:
            _LOG.info("hub %s: %d events waiting, below minEventsPerTrigger=%d; skipping this trigger", self.hub,
                      plan.backlog, self.planner.options.min_events_per_trigger)  # fmt: skip
            self._last_end = begin
            self._planned_batch = False
            self._lag.say(report, 0)
            return self._offsets.to_json(begin)
        end = plan.end
        if end != begin:
            self._last_batch_at = now
        end.update(fresh)  # partitions just gained: an empty range ending where the next batch starts
        self._last_end = end
        self._planned_batch = end != begin
        self._lag.planned(end, infos)
        self._lag.say(report, plan.planned)
        runtime.stream_runner_planned(self.planner.mirror.settle)  # a store write in flight lands before the end
        return self._offsets.to_json(end, self._packing() if self._planned_batch else None)

    def _packing(self) -> Packing | None:
        """How a batch planned now packs its small ranges, kept in its offset so that the batch run again after a
        restart is packed the same: by the live homes (two or more); over at least :data:`FIRST_TASKS` tasks while
        no home is known (a stream's first batch: each executor that runs one tells the driver of its service, and
        the homes are placed over them all from the start); else by events alone. None: a task a partition."""
        options = self.planner.options
        if options.min_events_per_task <= 0:
            return None
        homes_on = options.receiver_service and options.partition_homes and options.driver_channel
        if not homes_on or self._no_driver:
            return Packing()
        live = [] if self._driver is None else [home.executor for home in self._driver.live()]
        if not live:
            return Packing(spread=FIRST_TASKS)
        return Packing(tuple(live) if len(live) > 1 else ())

    def _home_groups(self, packing: Packing | None, partitions: list[str]) -> dict[str, str] | None:
        """Each partition's home among the executors a batch was packed by (None: packed without homes); a pure
        function of the batch's offset, as :func:`~eventhubs_spark.planning.offset_ranges.pack_ranges` needs. Where
        the tasks then read is the homes of the moment (``driver.homes``), which may have moved on."""
        if packing is None or not packing.homes:
            return None
        key = (packing.homes, tuple(partitions))
        if self._groups is None or self._groups[0] != key:
            self._groups = (key, placement_homes(self.hub, partitions, packing.homes))
        return self._groups[1]

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
        progress = self._lag.progress(self.planner.options.lag_progress_partitions)
        if progress is not None:
            shown[LAG_KEY] = progress
        return shown

    @spark_facing
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[EventHubsPartition]:
        s = self._offsets.positions(start)
        e = self._offsets.positions(end)
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
        stream: dict[str, Any] | None = None
        placed: dict[str, Home] = {}
        driver = self.query_driver()
        if driver is not None:
            self._unheard(driver)
            options = self.planner.options
            # without homes each executor's service reads what it gets; the driver still hears what it must
            homes = options.receiver_service and options.partition_homes
            placed = driver.homes(e) if homes else {}  # Capture files are read where the task runs: no home
            stream = {"query": driver.query, "driver": driver.address(), "homes": homes,
                      "ports": options.executor_ports, "bind": options.executor_bind_address}  # fmt: skip
            if options.receiver_service and self._run_infos is None and options.ownership is None:
                driver.want_ends()  # a running stream's triggers ask the services: connected to as they come
        timeout = self.idle_timeout()
        packing = self._offsets.tasks(end)
        # a batch whose offset does not say how it was packed was planned by a version that kept no such word, with
        # a task a partition unless the options said otherwise: run again, it is planned as it was then
        earlier = packing is None and not self.planner.tasks_option_given
        planned = self.planner.input_partitions(ranges, timeout, owner, owned, stream, placed,
                                                self._home_groups(packing, list(e)),
                                                packing.spread if packing is not None else 1,
                                                0 if earlier else None)  # fmt: skip
        planned += self.planner.capture_partitions(from_capture, timeout, stream)
        running: dict[str, tuple[int, int]] = {}
        for r in ranges + from_capture:  # a partition's range may be split over tasks (maxEventsPerPartition)
            known = running.get(r.partition, (r.start, r.end))
            running[r.partition] = (min(known[0], r.start), max(known[1], r.end))
        self._lag.running(running)
        return planned

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
                self._driver = QueryDriver(self.hub, on_read=self._task_read, bind=options.driver_bind_address,
                                           ports=options.driver_ports)  # fmt: skip
                driver = self._driver
                threading.Thread(target=self._lag.watch, args=(lambda: self._driver is driver,),
                                 name="eventhubs-lag-watch", daemon=True).start()  # fmt: skip
            except OSError as exc:
                _LOG.warning("eventhubs: hub %s: the driver cannot listen (%s): partitions get no home, and what "
                             "executors would tell the driver stays in their own logs", self.hub, exc)  # fmt: skip
                self._no_driver = True
        return self._driver

    def _task_read(self, partition: str, end: int, enqueued_micros: int | None, offset: str | None) -> None:
        """A task read a range of ``partition`` up to ``end`` (on the driver channel's thread): the lag figures take
        its last event's time, the checkpoint mirror its offset (first: the lag's read wakes a trigger waiting for
        it, which then mirrors)."""
        if offset is not None:
            self.planner.mirror.note_read(partition, end - 1, offset)
        self._lag.read(partition, end, enqueued_micros)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled only for the tasks (see :class:`TaskReader`): the listening socket, the planning state and the lag
        figures stay in the stream runner."""
        return TaskReader, (self.columns, self.avro)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_batches(partition, self.columns, self.avro)

    @spark_facing
    def commit(self, end: dict[str, Any]) -> None:
        positions = self._offsets.positions(end)
        _LOG.info("hub %s: committed %s", self.hub, dict(positions))
        # Spark commits a batch as the next one starts: what the trigger before it already mirrors, or the first
        # batch after a restart (overlapping the batch that follows; ownership mode writes before it goes on)
        self.planner.mirror.mirror(positions, self._infos, background=self.planner.options.ownership is None)

    def stop(self) -> None:
        """Spark rarely calls this (it ends the runner process instead, which flushes the same): the lag files
        still waiting are written."""
        self._lag.flush(runtime.TERMINATION_FLUSH)
