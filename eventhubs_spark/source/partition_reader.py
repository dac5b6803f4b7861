"""Executor side: one task's range of one partition read into Arrow record batches (Kafka's partition reader).

The task reads through its executor's receiver service, or from its partition's home on another executor, or
from Capture files; it tells the driver what it read, and raises the connector's own errors with one frame of
traceback so a user sees the error, not the worker's machinery.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from eventhubs_spark.codec.schema import ARROW_SCHEMA, SCHEMA_DDL, Projection
from eventhubs_spark.interprocess import driver_channel
from eventhubs_spark.interprocess.task_ranges import RangeRequest
from eventhubs_spark.process import runtime
from eventhubs_spark.source.said_first import batches_said_first

_LOG = logging.getLogger(__name__)

if TYPE_CHECKING:
    from eventhubs_spark.avro.decode import AvroReading
    from eventhubs_spark.capture.store import CaptureRead
    from eventhubs_spark.json_bodies.decode import JsonReading


def worker_logging() -> None:
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


@dataclass(frozen=True)
class EventHubsPartition(InputPartition):
    """One Spark task: one range of an Event Hubs partition (or a few small ones, see
    ``eventhubs.minEventsPerTask``), and where to read them. Plain data only."""

    requests: tuple[RangeRequest, ...]
    service: bool = True  # through the executor's receiver service (eventhubs.receiverService)
    capture: CaptureRead | None = None  # the one range is read from these Capture files, not from the hub


def read_partition(split: EventHubsPartition, needed: frozenset[int] | None = None) -> Iterator[Any]:
    """Executor side: read the task's ranges through the executor's receiver service (which sends the
    undecoded frames' spans; they are decoded here into Arrow record batches), or in this worker when
    there is none, and log what each took. A task of several ranges (small ones packed together, see
    ``eventhubs.minEventsPerTask``) reads up to RANGE_READERS of them at once, ahead of the one it hands Spark,
    and hands them over in its plan's order, small batches joined: the same rows in the same order on every run of
    the task (the exactly-once sink names rows by their place), in about the time of its largest range.

    ``needed``: the columns (by index) the task hands on; the others may be left null.

    (When planning finds nothing to read, Spark still runs one task with a placeholder partition;
    the readers answer that with no rows.)
    """
    from pyspark import TaskContext

    worker_logging()
    ctx = TaskContext.get()
    runtime.task_started()
    retry = ctx is not None and ctx.attemptNumber() > 0
    requests = [dataclasses.replace(r, retry=True) if retry else r for r in split.requests if r.end > r.start]
    # each range read: [partition, end, its last event's enqueued time (µs), and its offset when it is the event at
    # end - 1 (a plain position: the checkpoint the next trigger mirrors names it)]; [partition, end] when it had
    # no event left to read
    done: list[list[Any]] = []
    if len(requests) > 1:
        batches = _joined(_read_ahead(split, requests, done, needed))
    elif requests:
        batches = _read_range(split, requests[0], done, needed)
    else:
        return
    held = None  # each batch is handed over once the next is here: the last one is known before it goes
    for batch in batches:
        if held is not None:
            yield held
        held = batch
    first = split.requests[0]
    if done and first.driver is not None:
        # The stream's driver works out how far behind the query is in time from each range's last event (lag/),
        # and the checkpoint the next trigger mirrors names its offset. Told before the last batch goes, and not
        # waited for: the driver waits at its next trigger for the running batch's reports it lacks.
        driver_channel.tell_kept(first.driver, first.query, {"kind": "read", "ranges": done}, _TELL_READ_TIMEOUT)
    if held is not None:
        yield held


def _read_range(
    split: EventHubsPartition, request: RangeRequest, done: list[list[Any]], needed: frozenset[int] | None = None
) -> Iterator[Any]:
    """One range's record batches, noting in ``done`` where it ended, and logging what it took."""
    stats: dict[str, Any] = {}
    started = time.monotonic()
    last = None
    try:
        if split.capture is not None:
            from eventhubs_spark.capture.reader import read_capture

            reads = read_capture(split.capture, request.settings, request.partition, request.start, request.end,
                                 request.fail_on_data_loss, stats)  # fmt: skip
        else:
            reads = runtime.current().read(request, split.service, stats, needed)
        for last in reads:
            yield last
        if last is not None and last.num_rows:
            row = last.num_rows - 1
            entry = [request.partition, request.end, last.column(_ENQUEUED)[row].value]
            if last.column(_SEQUENCE)[row].as_py() == request.end - 1:
                entry.append(last.column(_OFFSET)[row].as_py())
            done.append(entry)
        else:  # nothing was left of it to read (expired, with failOnDataLoss=false): read all the same
            done.append([request.partition, request.end])
    finally:
        if stats.get("fallbacks"):
            slow_path_taken(request, int(stats["fallbacks"]), int(stats.get("read", 0)))
        if _LOG.isEnabledFor(logging.INFO):
            figures = " ".join(f"{key}={stats.get(key, 0)}" for key in _LOGGED)
            _LOG.info("eventhubs read hub=%s partition=%s range=[%d,%d) seconds=%.3f via=%s %s worker_pid=%d",
                      request.settings.hub, request.partition, request.start, request.end,
                      time.monotonic() - started, stats.get("via", "-"), figures, os.getpid())  # fmt: skip


def _read_ahead(
    split: EventHubsPartition, requests: list[RangeRequest], done: list[list[Any]], needed: frozenset[int] | None
) -> Iterator[Any]:
    """The ranges' batches in ``requests``' order, each range read whole on one of the process's range readers, up
    to RANGE_READERS of them at once ahead of the one handed over (a packed task's ranges are small by its plan).
    A failure is raised as the range's own when its turn comes; the ranges not yet begun are not begun."""
    readers = runtime.current().range_readers()
    notes: list[list[list[Any]]] = [[] for _ in requests]

    def whole(i: int) -> list[Any]:
        return list(_read_range(split, requests[i], notes[i], needed))

    ahead = runtime.RANGE_READERS
    futures = [readers.submit(whole, i) for i in range(min(ahead, len(requests)))]
    try:
        for i in range(len(requests)):
            batches = futures[i].result()
            if i + ahead < len(requests):
                futures.append(readers.submit(whole, i + ahead))
            done.extend(notes[i])
            yield from batches
    finally:
        for future in futures:
            future.cancel()


JOIN_ROWS = 8192  # a packed task hands Spark record batches of about this many rows: Spark pays per batch


def _joined(batches: Iterator[Any]) -> Iterator[Any]:
    """``batches`` in order, consecutive small ones joined into one of up to about JOIN_ROWS rows."""
    held: list[Any] = []
    rows = 0
    for batch in batches:
        if rows and rows + batch.num_rows > JOIN_ROWS:
            yield _concat(held)
            held, rows = [], 0
        held.append(batch)
        rows += batch.num_rows
    if held:
        yield _concat(held)


def _concat(batches: list[Any]) -> Any:
    if len(batches) == 1:
        return batches[0]
    concat = getattr(pa, "concat_batches", None)  # pyarrow 19+
    if concat is not None:
        return concat(batches)
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


_ENQUEUED = ARROW_SCHEMA.get_field_index("enqueuedTime")
_SEQUENCE = ARROW_SCHEMA.get_field_index("sequenceNumber")
_OFFSET = ARROW_SCHEMA.get_field_index("offset")


_TELL_READ_TIMEOUT = 2.0  # seconds a task may take to tell the driver what it read (best effort: never fails it)


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


class TaskReader:
    """What a task gets of a reader: its ``read``, the columns it hands Spark and how it decodes bodies; nothing of
    the planning. Spark pickles a reader only to send its ``read`` to the tasks (its planner process makes a reader
    and pickles the read function, which calls ``reader.read``; the stream runner makes its own from the data
    source), so the batch and the stream reader pickle as one of these: a task's worker then unpickles a few hundred
    bytes and imports the read path alone, not the planning, the lag figures and the management client (a fresh
    worker's first task imported 60 ms less on 2 cores; every task unpickled 4 KB)."""

    def __init__(self, columns: Projection | None, avro: AvroReading | JsonReading | None) -> None:
        self.columns = columns
        self.avro = avro

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_batches(partition, self.columns, self.avro)


def read_batches(
    partition: InputPartition, columns: Projection | None, avro: AvroReading | JsonReading | None = None
) -> Iterator[Any]:
    """A reader's ``read``: the task's batches (with the Avro or JSON bodies decoded into ``value``, when asked), with
    only the columns the query asked for."""
    if not isinstance(partition, EventHubsPartition):
        return iter(())
    batches = read_partition(partition, None if columns is None else columns.needed)
    if avro is not None:
        batches = map(avro.apply, batches)
    return batches_said_first(batches if columns is None else map(columns.apply, batches))


def source_schema(avro: AvroReading | JsonReading | None) -> pa.Schema:
    """The source's columns: its own, then (decoding Avro or JSON) ``value`` and the corrupt-record (rescue) column;
    a JSON read leaves the body out unless told to keep it (``eventhubs.json.keepBody``)."""
    if avro is None:
        return ARROW_SCHEMA
    return pa.schema(avro.source_fields(ARROW_SCHEMA))


def source_ddl(avro: AvroReading | JsonReading | None) -> str:
    """:func:`source_schema` as the DDL Spark is told (the source's own columns spelt as the old connector's)."""
    if avro is None:
        return SCHEMA_DDL
    own = SCHEMA_DDL if "body" in source_schema(avro).names else SCHEMA_DDL.removeprefix("body binary, ")
    return f"{own}, {avro.ddl()}"


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
