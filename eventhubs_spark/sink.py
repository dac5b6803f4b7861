"""The sink: ``df.writeStream.format("eventhubs")`` and ``df.write.format("eventhubs")``.

Rows become events packed into batches up to the hub's maximum message size, grouped by target:
an explicit ``partitionId``, a ``partitionKey`` (the service routes each key to one partition), or
neither, in which case the connector spreads batches over the partitions round-robin itself so it
can count events per partition. Targets are sent concurrently through a producer pooled per
executor process. Delivery is at least once: a failed task is retried by Spark and sends again.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from eventhubs_spark.amqp import failures, sdk_internals
from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.avro.encode import AvroWriting
from eventhubs_spark.avro.encode import writing as avro_writing
from eventhubs_spark.avro.registry import Registry
from eventhubs_spark.codec.encode import encode_event
from eventhubs_spark.errors import EventHubsError, SinkError
from eventhubs_spark.options import write_options
from eventhubs_spark.process import runtime

T = TypeVar("T")

try:  # Spark 4.1+
    from pyspark.sql.datasource import DataSourceStreamArrowWriter

    HAS_STREAM_ARROW_WRITER = True
except ImportError:  # Spark 4.0: the stream sink takes rows
    HAS_STREAM_ARROW_WRITER = False
    DataSourceStreamArrowWriter = DataSourceStreamWriter  # type: ignore[misc,assignment]

_LOG = logging.getLogger(__name__)

COLUMNS_HELP = (
    "the eventhubs sink takes the columns body (string or binary, required), and optionally partitionKey "
    "(string) or partitionId (string or int; 'partition' is accepted too), and properties (map<string,string>)"
)


AVRO_COLUMNS_HELP = (
    "writing Avro (eventhubs.avro.schemaRegistry), the eventhubs sink takes the columns value (a struct, required; "
    "its Avro body is the event's), and optionally partitionKey (string) or partitionId (string or int), and "
    "properties (map<string,string>)"
)


@dataclass(frozen=True)
class SinkLayout:
    """Which input column plays which role, validated on the driver from the DataFrame's schema."""

    body: int
    body_is_text: bool
    partition_key: int | None = None
    partition_id: int | None = None
    properties: int | None = None
    avro: AvroWriting | None = None  # the body column is a struct, written as registered Avro


def layout_for(schema: Any, avro: bool = False) -> SinkLayout:
    """Check the DataFrame's columns; any other column or a wrong type is an error naming it. With ``avro``,
    the body comes from the struct column ``value`` instead of ``body``."""
    from pyspark.sql.types import BinaryType, IntegerType, LongType, MapType, ShortType, StringType, StructType

    names = [f.name for f in schema.fields]
    roles: dict[str, int] = {}
    for index, f in enumerate(schema.fields):
        name = f.name.lower()
        if avro and name == "value":
            if not isinstance(f.dataType, StructType):
                raise SinkError(f"column 'value' must be a struct to be written as Avro, got "
                                f"{f.dataType.simpleString()}; {AVRO_COLUMNS_HELP}")  # fmt: skip
            roles["body"] = index
        elif avro and name == "body":
            raise SinkError(f"column 'body' is not written when writing Avro: {AVRO_COLUMNS_HELP}. Drop it, or drop "
                            "eventhubs.avro.schemaRegistry to send it as is")  # fmt: skip
        elif name == "body":
            if not isinstance(f.dataType, StringType | BinaryType):
                raise SinkError(
                    f"column 'body' must be string or binary, got {f.dataType.simpleString()}; {COLUMNS_HELP}"
                )
            roles["body"] = index
        elif name == "partitionkey":
            if not isinstance(f.dataType, StringType):
                raise SinkError(f"column 'partitionKey' must be string, got {f.dataType.simpleString()}")
            roles["partitionkey"] = index
        elif name in ("partitionid", "partition"):
            if not isinstance(f.dataType, StringType | IntegerType | LongType | ShortType):
                raise SinkError(f"column '{f.name}' must be string or int, got {f.dataType.simpleString()}")
            if "partitionid" in roles:
                raise SinkError("give either 'partitionId' or 'partition', not both")
            roles["partitionid"] = index
        elif name == "properties":
            ok = (
                isinstance(f.dataType, MapType)
                and isinstance(f.dataType.keyType, StringType)
                and isinstance(f.dataType.valueType, StringType)
            )
            if not ok:
                raise SinkError(f"column 'properties' must be map<string,string>, got {f.dataType.simpleString()}")
            roles["properties"] = index
        else:
            raise SinkError(f"unexpected column {f.name!r}: {AVRO_COLUMNS_HELP if avro else COLUMNS_HELP}. Select only "
                            "those columns.")  # fmt: skip
    if "body" not in roles:
        if avro:
            raise SinkError(f"no 'value' column among {names}: {AVRO_COLUMNS_HELP}")
        raise SinkError(f"no 'body' column among {names}: {COLUMNS_HELP}")
    return SinkLayout(
        body=roles["body"],
        body_is_text=not avro and isinstance(schema.fields[roles["body"]].dataType, StringType),
        partition_key=roles.get("partitionkey"),
        partition_id=roles.get("partitionid"),
        properties=roles.get("properties"),
    )


@dataclass
class SendReport(WriterCommitMessage):
    """A task's commit message: events sent per partition, and per partition key (routed by the service)."""

    by_partition: dict[str, int] = field(default_factory=dict)
    by_key: int = 0
    batches: int = 0
    throttled: int = 0  # sends the namespace refused as busy (com.microsoft:server-busy), each retried
    throttled_wait: float = 0.0  # seconds this task waited before those retries
    # events sent again after a send of theirs went unanswered (timed out): the hub may hold them twice
    resent: int = 0


class EventSender:
    """Executor side: turn rows into events, pack batches per target, send them concurrently."""

    def __init__(self, settings: ConnectionSettings, layout: SinkLayout, timeout: float) -> None:
        self.settings = settings
        self.layout = layout
        self.timeout = timeout
        self.report = SendReport()
        self._busy_since: dict[int, float] = {}  # by sending thread: when the namespace last refused a send as busy
        self._client = runtime.current().producers.get(settings)
        self._client_lock = threading.Lock()
        self._partition_ids: list[str] | None = None
        self._next_partition = 0
        self._pending: dict[tuple[str, str], list[Any]] = defaultdict(list)
        self._pending_count = 0
        self._row = 0
        self._content_type = layout.avro.content_type if layout.avro is not None else None

    def add_batch(self, batch: Any) -> None:
        """Add an Arrow record batch's rows (the Avro value column encoded from Arrow, the others as Python values)."""
        avro, body = self.layout.avro, self.layout.body
        columns = [
            avro.encode_arrow(column) if avro is not None and i == body else column.to_pylist()
            for i, column in enumerate(batch.columns)
        ]
        self.add_columns(columns, encoded=True)

    def add_columns(self, columns: list[list[Any]], encoded: bool = False) -> None:
        """Add rows given column-wise (as Arrow's ``to_pylist`` returns them, or rows' values), in the input's order;
        ``encoded``: the Avro value column is already bodies."""
        layout = self.layout
        avro = layout.avro if not encoded else None
        bodies = columns[layout.body] if avro is None else avro.encode(columns[layout.body])
        keys = columns[layout.partition_key] if layout.partition_key is not None else None
        pids = columns[layout.partition_id] if layout.partition_id is not None else None
        props = columns[layout.properties] if layout.properties is not None else None
        for i, body in enumerate(bodies):
            self._row += 1
            if body is None:
                raise SinkError(f"row {self._row}: column 'body' is null; every event needs a string or binary body")
            key = keys[i] if keys is not None else None
            pid = pids[i] if pids is not None else None
            if key is not None and pid is not None:
                raise SinkError(
                    f"row {self._row}: both 'partitionKey' ({key!r}) and 'partitionId' ({pid!r}) are set; give one"
                )
            prop = props[i] if props is not None else None
            event = (body, (dict(prop) if not isinstance(prop, dict) else prop) if prop else None)
            if pid is not None:
                target = ("partition", str(pid))
            elif key is not None:
                target = ("key", key)
            else:
                target = ("partition", "")  # assigned round-robin when sent
            self._pending[target].append(event)
            self._pending_count += 1
        if self._pending_count >= 20_000:
            self.flush()

    def add_rows(self, rows: Iterable[Any]) -> None:
        """Row path (Spark 4.0 stream sink): rows are transposed and go through :meth:`add_columns`."""
        chunk: list[Any] = []
        for row in rows:
            chunk.append(row)
            if len(chunk) >= 5000:
                self._add_row_chunk(chunk)
                chunk = []
        if chunk:
            self._add_row_chunk(chunk)

    def _add_row_chunk(self, rows: list[Any]) -> None:
        width = len(rows[0])
        self.add_columns([[row[c] for row in rows] for c in range(width)])

    def _round_robin(self) -> str:
        if self._partition_ids is None:
            self._partition_ids = self._retrying(
                lambda seconds: self._client.partition_ids(), f"listing the partitions of hub {self.settings.hub!r}"
            )
            self._next_partition = random.randrange(len(self._partition_ids))  # tasks start at different ones
        pid = self._partition_ids[self._next_partition % len(self._partition_ids)]
        self._next_partition += 1
        return pid

    def flush(self) -> None:
        """Pack the pending events into batches and send them, targets concurrently."""
        pending, self._pending, self._pending_count = self._pending, defaultdict(list), 0
        work: dict[tuple[str, str], list[Any]] = defaultdict(list)
        for target, events in pending.items():
            if target == ("partition", ""):
                # deal unaddressed events over the partitions, so batches go out to all of them at once
                dealt: dict[str, list[Any]] = defaultdict(list)
                for event in events:
                    dealt[self._round_robin()].append(event)
                for pid, share in dealt.items():
                    work[("partition", pid)].extend(self._pack(share, partition_id=pid, key=None))
            else:
                kind, value = target
                batches = self._pack(
                    events, partition_id=value if kind == "partition" else None, key=value if kind == "key" else None
                )
                work[target].extend(batches)
        if not work:
            return
        with ThreadPoolExecutor(max_workers=min(8, len(work))) as pool:
            results = list(pool.map(lambda item: self._send_all(*item), work.items()))
        # the report is updated here, on the task's thread, never from the sending threads
        for (kind, value), (sent, sent_batches, resent) in zip(work, results, strict=True):
            self.report.batches += sent_batches
            self.report.resent += resent
            if kind == "partition":
                self.report.by_partition[value] = self.report.by_partition.get(value, 0) + sent
            else:
                self.report.by_key += sent

    def _pack(self, events: list[tuple[Any, Any]], partition_id: str | None, key: str | None) -> list[tuple[Any, int]]:
        """Pack (body, properties) events into full batches (with their event counts), encoded once each
        (client.encode), checking each against the limit."""
        out: list[tuple[Any, int]] = []
        batch = self._client.create_batch(partition_id=partition_id, partition_key=key)
        count = 0
        for body, properties in events:
            message = encode_event(body, properties, key, self._content_type)
            if not sdk_internals.add_encoded(batch, message):
                if count == 0:
                    raise self._too_large(body, len(message), batch.max_size_in_bytes)
                out.append((batch, count))
                batch = self._client.create_batch(partition_id=partition_id, partition_key=key)
                count = 0
                if not sdk_internals.add_encoded(batch, message):
                    raise self._too_large(body, len(message), batch.max_size_in_bytes)
            count += 1
        if count:
            out.append((batch, count))
        return out

    def _too_large(self, body: Any, size: int, limit: int) -> SinkError:
        body_size = len(body.encode("utf-8")) if isinstance(body, str) else len(body)
        return SinkError(
            f"an event of {size} bytes (its body of {body_size} bytes, plus properties and AMQP overhead) exceeds "
            f"the hub's maximum message "
            f"size of {limit} bytes; split or compress the body. Nothing was dropped: the write fails instead."
        )

    def _send_all(self, target: tuple[str, str], batches: list[tuple[Any, int]]) -> tuple[int, int, int]:
        """Send one target's batches in order; returns the events and batches sent, and the events among them
        sent again after an unanswered attempt."""
        sent = resent = 0
        for batch, count in batches:
            if self._send_with_retry(batch, count, target):
                resent += count
            sent += count
        return sent, len(batches), resent

    def _send_with_retry(self, batch: Any, count: int, target: tuple[str, str]) -> bool:
        """Send one batch, retrying transient failures until ``eventhubs.operationTimeout``; whether it was sent
        again after an attempt that went unanswered.

        Why that is told: a send refused (busy, a detached link, a connection refused) was not stored, so
        sending it again repeats nothing; a send that timed out may have been stored all the same (the answer
        was late, or lost with its connection), and Event Hubs has no idempotent send this SDK offers, so the
        next attempt may store it twice. That is the sink's "at least once", and the driver says when it
        happened and for how many events (:meth:`_SinkBase._log_commit`)."""

        from azure.eventhub.exceptions import OperationTimeoutError  # here: importing the sink loads no SDK

        unanswered = False

        def send(seconds: float) -> None:
            nonlocal unanswered
            client = self._client
            try:
                client.send(batch, max(1.0, seconds))
            except Exception as exc:
                if sdk_internals.condition(exc) == sdk_internals.TOO_LARGE:
                    raise SinkError(f"the hub rejected a batch as too large: {exc}") from exc
                if isinstance(exc, TimeoutError | OperationTimeoutError):
                    unanswered = True
                    self._replace_client(client)  # unanswered: the next attempt goes over a new connection
                raise

        self._retrying(send, f"sending {count} events to hub {self.settings.hub!r} ({target[0]} {target[1]!r})")
        return unanswered

    def _replace_client(self, failed: Any) -> None:
        """A send went unanswered (a black-holed connection looks alive until a call times out): drop the
        process's producer and take a new one, once for all the sending threads that used ``failed``."""
        with self._client_lock:
            if self._client is failed:
                pool = runtime.current().producers
                pool.invalidate(self.settings)
                self._client = pool.get(self.settings)

    def _retrying(self, attempt: Callable[[float], T], what: str) -> T:
        """``attempt`` until it succeeds, retrying transient failures until ``eventhubs.operationTimeout``; a
        refused sign-in, or a failure to connect that will not heal, fails at once, said in words that name
        the option to change."""
        from azure.eventhub.exceptions import EventHubError

        def said(seconds: float) -> T:
            since = self._busy_since.pop(threading.get_ident(), None)
            if since is not None:  # the wait after a busy namespace's refusal ends here
                self.report.throttled_wait += time.monotonic() - since
            try:
                done = attempt(seconds)
            except Exception as exc:
                failure = failures.failure(self.settings, exc)
                if failure is not None and failure is not exc:
                    raise failure from None
                raise
            failures.reached(self.settings)
            return done

        early = failures.give_up_early(self.settings)  # a wrong host or port: said within seconds, not minutes

        def transient(error: BaseException) -> bool:
            if isinstance(error, EventHubsError):
                # a refused sign-in or an untrusted certificate does not heal; a namespace this process never
                # reached that refuses its port (or whose host has no address) is a wrong address
                return error.retriable and early(error)
            return isinstance(error, EventHubError | OSError)

        def log(tries: int, error: BaseException) -> None:
            if sdk_internals.condition(error) == sdk_internals.SERVER_BUSY:
                # the namespace is over its throughput units: said once per batch by the driver, with the sums
                self.report.throttled += 1
                self._busy_since[threading.get_ident()] = time.monotonic()
                _LOG.debug("%s: the namespace is busy (attempt %d), retrying", what, tries)
                return
            _LOG.warning("%s failed (attempt %d), retrying: %s", what, tries, error)

        # One attempt waits at most the connection idle time-out: a live connection answers (or shows a frame) within
        # it, so a send unanswered that long went into a black hole and is made again on a new connection.
        idle = self.settings.network.idle_timeout
        return self.settings.retry.call(said, timeout=self.timeout, what=what, is_retriable=transient, on_retry=log,
                                        max_attempt=idle if idle > 0 else None)  # fmt: skip


def _write(settings: ConnectionSettings, layout: SinkLayout, timeout: float, items: Iterator[Any],
           arrow: bool) -> SendReport:  # fmt: skip
    """One task's write: Arrow record batches (``arrow``) or rows in, a send report out."""
    runtime.task_started()
    sender = EventSender(settings, layout, timeout)
    try:
        with failures.sign_in_errors(settings):
            if arrow:
                for batch in items:
                    sender.add_batch(batch)
            else:
                sender.add_rows(items)
            sender.flush()
    except Exception as exc:
        runtime.current().producers.invalidate(settings)
        if isinstance(exc, EventHubsError):
            # a traceback of one frame, the whole chain in the executor's log: the message comes first in what the
            # user sees (see source.said_first)
            _LOG.info("eventhubs: the write task fails: %s", exc, exc_info=True)
            raise exc.with_traceback(None) from None
        raise
    return sender.report


def _merged(messages: Iterable[Any]) -> SendReport:
    """A write's tasks' reports summed into one (other commit messages, e.g. None from a failed task, skipped)."""
    total = SendReport()
    for m in messages:
        if isinstance(m, SendReport):
            for p, n in m.by_partition.items():
                total.by_partition[p] = total.by_partition.get(p, 0) + n
            total.by_key += m.by_key
            total.batches += m.batches
            total.throttled += m.throttled
            total.throttled_wait += m.throttled_wait
            total.resent += m.resent
    return total


def _events(report: SendReport) -> int:
    return sum(report.by_partition.values()) + report.by_key


class _SinkBase:
    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        parsed = write_options(dict(options))
        self.settings = parsed.settings
        self.timeout = parsed.operation_timeout
        self.layout = layout_for(schema, avro=bool(parsed.avro_registry))
        if parsed.avro_registry:
            # registered (or found) once per query, here on the driver; the tasks only encode
            registry = Registry.of(parsed.avro_registry, parsed.settings)
            value = schema.fields[self.layout.body]
            self.layout = dataclasses.replace(self.layout, avro=avro_writing(
                registry, str(parsed.avro_group), value.dataType, parsed.avro_schema, parsed.avro_record_name,
                parsed.avro_record_namespace, value.name))  # fmt: skip

    def _log_commit(self, messages: Iterable[Any], batch_id: int | None) -> None:
        report = _merged(messages)
        batch = "-" if batch_id is None else batch_id
        if report.resent:
            _LOG.warning(
                "eventhubs sink hub=%s batch=%s: %d events were sent again after a send of theirs went unanswered "
                "(for eventhubs.connectionIdleTimeout, or until eventhubs.operationTimeout); the first send may have "
                "been stored all the same, so the hub may hold them twice (delivery is at least once)",
                self.settings.hub, batch, report.resent,
            )  # fmt: skip
        if report.throttled:
            _LOG.warning(
                "eventhubs sink hub=%s batch=%s: the namespace is throttling (over its throughput units): it refused "
                "%d sends as busy, and the tasks waited %.1f s in all before sending them again; every event was "
                "sent once. More throughput units (or auto-inflate) would spare the wait; the waits follow "
                "eventhubs.retry.*", self.settings.hub, batch, report.throttled, report.throttled_wait,
            )  # fmt: skip
        detail = ", ".join(f"{p}:{n}" for p, n in sorted(report.by_partition.items(), key=lambda kv: int(kv[0])))
        _LOG.info(
            "eventhubs sink hub=%s batch=%s sent %d events (per partition: %s; routed by partition key: %d)",
            self.settings.hub, batch, _events(report), detail or "none", report.by_key,
        )  # fmt: skip


class EventHubsBatchWriter(_SinkBase, DataSourceArrowWriter):
    """``df.write.format("eventhubs")``: Arrow batches in, events out."""

    def write(self, iterator: Iterator[Any]) -> SendReport:
        return _write(self.settings, self.layout, self.timeout, iterator, arrow=True)

    def commit(self, messages: list[Any]) -> None:
        self._log_commit(messages, None)

    def abort(self, messages: list[Any]) -> None:
        _LOG.warning("eventhubs sink hub=%s: write aborted after %d events were sent (at least once)",
                     self.settings.hub, _events(_merged(messages)))  # fmt: skip


class _StreamCommits(_SinkBase):
    """Commit and abort of both stream writers: log the batch's counts (delivery is at least once)."""

    def commit(self, messages: list[Any], batchId: int) -> None:
        self._log_commit(messages, batchId)

    def abort(self, messages: list[Any], batchId: int) -> None:
        _LOG.warning(
            "eventhubs sink hub=%s batch=%d aborted after %d events were sent; Spark re-runs it (at least once)",
            self.settings.hub, batchId, _events(_merged(messages)),
        )  # fmt: skip


class EventHubsStreamArrowWriter(_StreamCommits, DataSourceStreamArrowWriter):
    """``df.writeStream.format("eventhubs")`` on Spark 4.1+: Arrow batches per micro-batch."""

    def write(self, iterator: Iterator[Any]) -> SendReport:
        return _write(self.settings, self.layout, self.timeout, iterator, arrow=True)


class EventHubsStreamRowWriter(_StreamCommits, DataSourceStreamWriter):
    """``df.writeStream.format("eventhubs")`` on Spark 4.0, which has no Arrow stream writer."""

    def write(self, iterator: Iterator[Any]) -> SendReport:
        return _write(self.settings, self.layout, self.timeout, iterator, arrow=False)


def batch_writer(options: Mapping[str, str], schema: Any) -> DataSourceWriter:
    return EventHubsBatchWriter(options, schema)


def stream_writer(options: Mapping[str, str], schema: Any) -> DataSourceStreamWriter:
    if HAS_STREAM_ARROW_WRITER:
        return EventHubsStreamArrowWriter(options, schema)
    return EventHubsStreamRowWriter(options, schema)
