"""Exactly once into a hub: stamped events, read back by an attempt that may follow another.

Each event the sink writes carries a stamp; a task attempt that may follow an earlier one reads its own stamps
back before it sends, and skips the rows already stored.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.errors import SinkError
from eventhubs_spark.interprocess.task_ranges import RangeRequest, ReceiverConfig
from eventhubs_spark.positions.partition_catalog import PartitionInfo, by_number
from eventhubs_spark.process import runtime
from eventhubs_spark.sink.write_fences import WriteFences

_LOG = logging.getLogger(__name__)

READ_BACK_PARALLELISM = 16  # partitions a read back reads at once (each a link on the worker's connection)
STAMP = "eventhubs-spark-stamp"  # the application property every event written exactly once carries

WRITE_ID_HELP = (
    "df.write with eventhubs.sink.exactlyOnce names the write with eventhubs.sink.writeId, kept the same when the "
    "same job runs again (a stream's writes are named by the query's id): "
    ".option('eventhubs.sink.writeId', 'orders-2026-11-28')"
)


@dataclass(frozen=True)
class TaskStamp:
    """The names a task's rows go by: ``write`` (a stream's query id, or a ``df.write``'s write id), ``batch``
    (a stream's batch id; 0 for ``df.write``), ``partition`` (the task's input partition)."""

    write: str
    batch: int
    partition: int

    @property
    def prefix(self) -> str:
        return f"{self.write}/{self.batch}/{self.partition}/"

    def of(self, row: int, body: bytes | str = b"") -> str:
        """The stamp of row ``row`` of this task, whose body is ``body``."""
        return stamp_of(self.prefix.encode("utf-8"), row, crc_of(body)).decode("utf-8")


def crc_of(body: bytes | str) -> int:
    """A body's CRC-32, the digest its stamp carries (a few hundred MB/s in C: the cost of a stamp is its text)."""
    return zlib.crc32(body.encode("utf-8") if isinstance(body, str) else body)


def stamp_of(prefix: bytes, row: int, crc: int) -> bytes:
    """A stamp's text: the task's ``prefix`` (``<write>/<batch>/<partition>/``), the row, the body's CRC-32 as 8 hex
    digits. The one place the format is written: the sender stamps every event with it."""
    return b"%s%d/%08x" % (prefix, row, crc)


def task_stamp(stream: bool, write_id: str | None) -> TaskStamp:
    """The running task's stamp, from what Spark tells it."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise SinkError("eventhubs.sink.exactlyOnce: the write runs outside a Spark task, so its rows have no names")
    if stream:
        query, batch = ctx.getLocalProperty("sql.streaming.queryId"), ctx.getLocalProperty("streaming.sql.batchId")
        if not query or batch is None:
            raise SinkError(
                "eventhubs.sink.exactlyOnce: Spark did not tell this stream's task its query id and batch id "
                "(sql.streaming.queryId, streaming.sql.batchId); write without eventhubs.sink.exactlyOnce"
            )
        return TaskStamp(query, int(batch), ctx.partitionId())
    if not write_id:
        raise SinkError(WRITE_ID_HELP)
    return TaskStamp(write_id, 0, ctx.partitionId())


def stamped_rows(batches: Iterable[Any], prefix: str) -> dict[int, int]:
    """The rows stamped in ``batches`` (Arrow record batches of the source's schema) whose stamps start with
    ``prefix`` (one task's): row number to the stored body's CRC-32, as the sink computes it for the row it
    holds."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows: dict[int, int] = {}
    for batch in batches:
        if not batch.num_rows:
            continue
        stamps = pc.map_lookup(batch.column("properties"), pa.scalar(STAMP), "first")
        ours = stamps.filter(pc.fill_null(pc.starts_with(stamps, prefix), False))
        for stamp in ours.to_pylist():
            row, _, body = stamp[len(prefix) :].partition("/")
            rows[int(row)] = _crc(body)
    return rows


def _crc(digest_text: str) -> int:
    """A stamp's digest (8 hex digits) as the CRC-32 it is; -1, which matches no body, for one that is not hex."""
    try:
        return int(digest_text, 16)
    except ValueError:
        return -1


class WriteGuard:
    """One task attempt's view of what its earlier attempts stored.

    ``partitions`` and ``properties`` ask the hub (the process's management client; replaced in unit tests), and
    ``read`` reads one partition's range as Arrow record batches (the connector's receive path)."""

    def __init__(
        self,
        fences: WriteFences,
        stamp: TaskStamp,
        stream: bool,
        partitions: Callable[[], list[str]],
        properties: Callable[[list[str]], dict[str, PartitionInfo]],
        read: Callable[[str, int, int], Iterable[Any]],
    ) -> None:
        self.fences = fences
        self.stamp = stamp
        self.stream = stream
        self._partitions = partitions
        self._properties = properties
        self._read = read
        self._start: dict[str, int] | None = None  # where this task's rows can be, per partition
        self._lock = threading.Lock()  # the sending threads settle unanswered sends one at a time
        self.read_back = 0  # events read back
        self.read_seconds = 0.0
        self._marking: threading.Thread | None = None  # a first attempt's look-up of the hub's ends and its mark
        self._marking_failed: BaseException | None = None

    def begin(self) -> dict[int, int]:
        """Before the first send: the rows an earlier attempt stored (none when there was none), and this attempt's
        mark written, so that a later attempt looks."""
        mark = self.fences.mark(self.stamp.batch, self.stamp.partition)
        if mark is None:
            fence = self.fences.fence_before(self.stamp.batch) if self.stream else None
            if fence is not None:
                self._start = fence
                self.fences.write_mark(self.stamp.batch, self.stamp.partition, None)
                return {}
            # a stream's first batch, or df.write: this task records where the hub ends, asked of the hub while the
            # task packs its first events (a first attempt has nothing to skip); its sends wait for it (ready)
            self._marking = threading.Thread(target=self._mark_ends, name="eventhubs-sink-mark", daemon=True)
            self._marking.start()
            return {}
        self._start = mark or self.fences.fence_before(self.stamp.batch) or {}
        return self.stored(None)

    def _mark_ends(self) -> None:
        try:
            ends = {p: info.end for p, info in self._properties(self._partitions()).items()}
            self._start = ends
            self.fences.write_mark(self.stamp.batch, self.stamp.partition, ends)
        except BaseException as exc:  # raised by ready(), on the task's thread
            self._marking_failed = exc

    def ready(self) -> None:
        """Before this attempt's first send: its mark is written (with where the hub ended, when it had to ask), so
        an attempt after it looks; raises what the look-up or the write raised."""
        marking = self._marking
        if marking is None:
            return
        marking.join()
        self._marking = None
        if self._marking_failed is not None:
            raise self._marking_failed

    def stored(self, partitions: list[str] | None) -> dict[int, int]:
        """This task's rows stored in ``partitions`` (None: all the hub's) since the fence, with their bodies'
        digests."""
        with self._lock:
            started = time.monotonic()
            assert self._start is not None, "begin() first"
            infos = self._properties(sorted(partitions or self._partitions(), key=by_number))
            ranges = []
            for pid, info in infos.items():
                # a partition the fence does not know (added to the hub since): from its first event
                start = self._start.get(pid, info.beginning_sequence_number)
                if info.is_empty or start >= info.end:
                    continue
                self.read_back += info.end - start
                ranges.append((pid, start, info.end))
            prefix = self.stamp.prefix

            def stamped(r: tuple[str, int, int]) -> dict[int, int]:
                return stamped_rows(self._read(*r), prefix)

            rows: dict[int, int] = {}
            if len(ranges) <= 1:
                for r in ranges:
                    rows.update(stamped(r))
            else:
                # Partitions at once: a round-robin or keyed write stores a task's rows in every partition, and one
                # after another a retried task on a 1,024-partition hub attached and read 1,024 links in turn
                # before it sent a row. Merged in partition order, as read one by one.
                with ThreadPoolExecutor(min(READ_BACK_PARALLELISM, len(ranges)), "eventhubs-read-back") as pool:
                    for found in pool.map(stamped, ranges):
                        rows.update(found)
            self.read_seconds += time.monotonic() - started
            return rows


def guard_for(
    settings: ConnectionSettings,
    consumer_group: str,
    location: str,
    stream: bool,
    write_id: str | None,
    timeout: float,
    partition_ids: Callable[[], list[str]],
) -> WriteGuard:
    """The running task's guard, asking the hub through this process's clients."""
    stamp = task_stamp(stream, write_id)
    fences = WriteFences(location, stamp.write, target_of(settings))
    config = ReceiverConfig(consumer_group=consumer_group, exclusive=False)

    def properties(pids: list[str]) -> dict[str, PartitionInfo]:
        return runtime.current().management(settings, timeout).partition_properties(pids)

    def read(pid: str, start: int, end: int) -> Iterable[Any]:
        request = RangeRequest(config=config, partition=pid, start=start, end=end, fail_on_data_loss=False,
                               idle_timeout=0.0, settings=settings)  # fmt: skip
        return runtime.current().read(request, False, {})

    return WriteGuard(fences, stamp, stream, partition_ids, properties, read)


def target_of(settings: ConnectionSettings) -> str:
    return f"{settings.namespace}/{settings.hub}"


def record_fence(
    settings: ConnectionSettings,
    location: str,
    write_id: str,
    batch: int,
    timeout: float,
    figures: Mapping[str, float] | None = None,
) -> dict[str, int]:
    """On the driver, when a stream's batch commits: where the target hub's partitions end now, recorded as the
    fence of the batches after it (with the batch's ``figures`` added to the write's totals)."""
    client = runtime.current().management(settings, timeout)
    ends = {p: info.end for p, info in client.partition_properties(client.partition_ids()).items()}
    WriteFences(location, write_id, target_of(settings)).write_fence(batch, ends, figures)
    return ends


@dataclass(frozen=True)
class ExactlyOnce:
    """What a task of an exactly-once write needs (plain data, pickled into the tasks): where the fences and marks
    are kept, whether it is a stream's, a ``df.write``'s write id, and the consumer group it reads back with."""

    location: str
    stream: bool
    write_id: str | None
    consumer_group: str


def exactly_once_of(parsed: Any, stream: bool) -> ExactlyOnce | None:
    """The exactly-once settings of a write (None: at least once), checked on the driver."""
    from eventhubs_spark.errors import OptionError

    if not parsed.exactly_once:
        if parsed.write_id is not None:
            example = ".option('eventhubs.sink.exactlyOnce', 'true')"
            raise OptionError(f"eventhubs.sink.writeId names an exactly-once write: also set {example}", example)
        return None
    if parsed.checkpoint_location is None:
        example = ".option('eventhubs.checkpointLocation', '/dbfs/checkpoints/orders-out')"
        raise OptionError(
            "eventhubs.sink.exactlyOnce keeps where each batch's events can be under eventhubs.checkpointLocation, "
            f"a path every executor reaches (Spark does not tell a Python sink its own checkpoint location), e.g. "
            f"{example}",
            example,
        )
    if stream and parsed.write_id is not None:
        example = ".option('eventhubs.sink.exactlyOnce', 'true')"
        raise OptionError(f"eventhubs.sink.writeId is for df.write: a stream's writes are named by its query id; "
                          f"drop it, e.g. keep only {example}", example)  # fmt: skip
    if not stream and parsed.write_id is None:
        raise OptionError(WRITE_ID_HELP, ".option('eventhubs.sink.writeId', 'orders-2026-11-28')")
    return ExactlyOnce(parsed.checkpoint_location, stream, parsed.write_id, parsed.consumer_group)
