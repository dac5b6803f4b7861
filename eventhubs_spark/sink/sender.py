"""A write task's sender: rows into events, batched per target, sent, retried and settled.

Targets are sent concurrently; exactly once, a send whose outcome is not known is settled by reading the hub
back.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from pyspark.sql.datasource import WriterCommitMessage

from eventhubs_spark.amqp import conditions, failures, sdk
from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.codec.encode import encode_event, encode_with_property
from eventhubs_spark.errors import EventHubsError, SinkError
from eventhubs_spark.process import runtime
from eventhubs_spark.sink.exactly_once import STAMP, ExactlyOnce, WriteGuard, guard_for, stamp_of
from eventhubs_spark.sink.layout import SinkLayout

T = TypeVar("T")
_LOG = logging.getLogger(__name__)
DEAL_RUN = 256  # the fewest unaddressed events a flush deals to one partition (while it has that many)


class OutEvent(NamedTuple):
    """One event to send: its body and application properties; with exactly once, its row's number in the task and
    its body's CRC-32, which its stamp names (row -1 without)."""

    body: Any  # bytes or str
    properties: dict[str, Any] | None
    row: int = -1
    crc: int = 0


_MOST_SETTLES = 10  # unanswered sends of one target a task settles before it fails (Spark then retries it)


class _Unanswered(Exception):
    """A send of an exactly-once write went unanswered: settled by reading the hub back, never sent blindly again."""


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
    # exactly once (eventhubs.sink.exactlyOnce): the write's name, rows an earlier attempt had stored (not sent
    # again), unanswered sends settled by reading back, and the events read back, in how long
    write: str | None = None
    skipped: int = 0
    differed: int = 0  # rows whose body differed from what an earlier attempt stored at their place: sent
    settled: int = 0
    read_back: int = 0
    read_seconds: float = 0.0


class EventSender:
    """Executor side: turn rows into events, pack batches per target, send them concurrently."""

    def __init__(
        self, settings: ConnectionSettings, layout: SinkLayout, timeout: float, once: ExactlyOnce | None = None
    ) -> None:
        self.settings = settings
        self.layout = layout
        self.timeout = timeout
        self.report = SendReport()
        self._busy_since: dict[int, float] = {}  # by sending thread: when the namespace last refused a send as busy
        self._client = runtime.current().producers.get(settings)
        self._client_lock = threading.Lock()
        self._partition_ids: list[str] | None = None
        self._next_partition = 0
        self._pending: dict[tuple[str, str], list[OutEvent]] = defaultdict(list)
        self._pending_count = 0
        self._row = 0
        self._content_type = layout.encoder.content_type if layout.encoder is not None else None
        self._once = once
        self._guard: WriteGuard | None = None
        # rows (0-based) an earlier attempt of this task stored, with their bodies' digests: skipped when the body is
        # the same
        self._stored: dict[int, int] = {}
        self._prefix = b""  # the stamp of this task's rows, less the row number (UTF-8)

    def _begin_once(self, once: ExactlyOnce) -> WriteGuard:
        """Name this task's rows, and learn which of them an earlier attempt stored."""
        guard = guard_for(self.settings, once.consumer_group, once.location, once.stream, once.write_id, self.timeout,
                          self._partition_list)  # fmt: skip
        self._stored = guard.begin()
        self._prefix = guard.stamp.prefix.encode("utf-8")
        self.report.write = guard.stamp.write
        self._guard = guard
        return guard

    def add_batch(self, batch: Any) -> None:
        """Add an Arrow record batch's rows (a registry's value column encoded from Arrow, the others as Python
        values)."""
        encoder, body = self.layout.encoder, self.layout.body
        columns = [
            encoder.encode_arrow(column) if encoder is not None and i == body else column.to_pylist()
            for i, column in enumerate(batch.columns)
        ]
        self.add_columns(columns, encoded=True)

    def add_columns(self, columns: list[list[Any]], encoded: bool = False) -> None:
        """Add rows given column-wise (as Arrow's ``to_pylist`` returns them, or rows' values), in the input's order;
        ``encoded``: a registry's value column is already bodies."""
        layout = self.layout
        encoder = layout.encoder if not encoded else None
        bodies = columns[layout.body] if encoder is None else encoder.encode(columns[layout.body])
        keys = columns[layout.partition_key] if layout.partition_key is not None else None
        pids = columns[layout.partition_id] if layout.partition_id is not None else None
        props = columns[layout.properties] if layout.properties is not None else None
        once = self._once
        if once is not None and self._guard is None:
            self._begin_once(once)
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
            properties = (dict(prop) if not isinstance(prop, dict) else prop) if prop else None
            if once is not None:
                index = self._row - 1
                raw = body.encode("utf-8") if isinstance(body, str) else body
                crc = zlib.crc32(raw)
                found = self._stored.get(index)
                if found == crc:
                    self.report.skipped += 1
                    continue
                if found is not None:  # an earlier attempt stored another body here: not deterministic; sent, not lost
                    self.report.differed += 1
                # stamped when packed (:meth:`_stamped`): a stamp the input carried (events read from a hub written
                # exactly once) is replaced
                event = OutEvent(raw, properties, index, crc)
            else:
                event = OutEvent(body, properties)
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

    def _partition_list(self) -> list[str]:
        if self._partition_ids is None:
            # over the process's kept management connection (a few ms: the producer's lookup), and kept by the
            # process's producer: the SDK's lookup opened a connection for each call (0.37 s on the emulator), a
            # seventh of a 2.5 s write per task
            self._partition_ids = self._retrying(
                lambda seconds: self._client.partition_ids(timeout=self.timeout),
                f"listing the partitions of hub {self.settings.hub!r}",
            )
            self._next_partition = random.randrange(len(self._partition_ids))  # tasks start at different ones
        return self._partition_ids

    def _round_robin(self) -> str:
        partition_ids = self._partition_list()
        pid = partition_ids[self._next_partition % len(partition_ids)]
        self._next_partition += 1
        return pid

    def _deal(self, events: list[OutEvent]) -> dict[str, list[OutEvent]]:
        """Unaddressed events dealt over the partitions in turn, a run of them each, so their batches go out at
        once: runs as even as the partitions allow, but of at least :data:`DEAL_RUN` events. Dealt one by one,
        12,800 events over a 1,024-partition hub made 1,024 batches of 12 events, and a warm write to it took
        1.8x as long as to 32 partitions; a partition-less send of the SDKs likewise puts a whole batch in one
        partition. Where the runs start turns, as before, so the partitions even out over a stream's writes."""
        ids = self._partition_list()
        runs = min(len(ids), max(1, len(events) // DEAL_RUN))
        size = -(-len(events) // runs)
        dealt: dict[str, list[OutEvent]] = defaultdict(list)
        for first in range(0, len(events), size):
            dealt[self._round_robin()].extend(events[first : first + size])
        return dealt

    def flush(self) -> None:
        """Pack the pending events into batches and send them, targets concurrently."""
        pending, self._pending, self._pending_count = self._pending, defaultdict(list), 0
        work: dict[tuple[str, str], list[Any]] = defaultdict(list)
        for target, events in pending.items():
            if target == ("partition", ""):
                dealt = self._deal(events)
                for pid, share in dealt.items():
                    work[("partition", pid)].extend(self._pack(share, partition_id=pid, key=None))
            else:
                kind, value = target
                batches = self._pack(
                    events, partition_id=value if kind == "partition" else None, key=value if kind == "key" else None
                )
                work[target].extend(batches)
        if work:
            self._send(work)
        if self._guard is not None:
            self.report.read_back, self.report.read_seconds = self._guard.read_back, self._guard.read_seconds

    def _send(self, work: dict[tuple[str, str], list[Any]]) -> None:
        """Send each target's batches, targets concurrently (exactly once: after this attempt's mark is written)."""
        if self._guard is not None:
            self._guard.ready()
        with ThreadPoolExecutor(max_workers=min(8, len(work))) as pool:
            results = list(pool.map(lambda item: self._send_all(*item), work.items()))
        # the report is updated here, on the task's thread, never from the sending threads
        for (kind, value), (sent, sent_batches, resent, settled) in zip(work, results, strict=True):
            self.report.batches += sent_batches
            self.report.resent += resent
            self.report.settled += settled
            if kind == "partition":
                self.report.by_partition[value] = self.report.by_partition.get(value, 0) + sent
            else:
                self.report.by_key += sent

    def _pack(
        self, events: list[OutEvent], partition_id: str | None, key: str | None
    ) -> list[tuple[Any, int, list[OutEvent]]]:
        """Pack (body, properties[, row, digest]) events into full batches (with their event counts and events),
        encoded once each (client.encode), checking each against the limit."""
        out: list[tuple[Any, int, list[Any]]] = []
        batch = self._new_batch(partition_id, key)
        start = 0
        content_type, stamped = self._content_type, self._once is not None
        for n, event in enumerate(events):
            body = event.body
            message = self._stamped(event, key) if stamped else encode_event(body, event.properties, key, content_type)
            if not sdk.add_encoded(batch, message):
                if n == start:
                    raise self._too_large(body, len(message), batch.max_size_in_bytes)
                out.append((batch, n - start, events[start:n]))
                batch = self._new_batch(partition_id, key)
                start = n
                if not sdk.add_encoded(batch, message):
                    raise self._too_large(body, len(message), batch.max_size_in_bytes)
        if start < len(events):
            out.append((batch, len(events) - start, events[start:]))
        return out

    def _stamped(self, event: OutEvent, key: str | None) -> bytes:
        """An exactly-once event's bytes (body, properties, row, CRC-32 of the body), with its stamp
        (:data:`~eventhubs_spark.sink.exactly_once.STAMP`) ``<task's prefix><row>/<crc as 8 hex digits>``."""
        stamp = stamp_of(self._prefix, event.row, event.crc)
        return encode_with_property(event.body, event.properties, key, self._content_type, STAMP, stamp)

    def _new_batch(self, partition_id: str | None, key: str | None) -> Any:
        """An empty batch for a target, retried as sends are: a lane's first batch opens its connection and signs
        in (to learn the hub's maximum message size), which fails like a send when the connection is lost or
        falls into a black hole ("Authorization timeout"); the producer then starts that lane over."""
        target = (
            f"key {key!r}" if key is not None else f"partition {partition_id!r}" if partition_id else "any partition"
        )
        return self._retrying(
            lambda seconds: self._client.create_batch(partition_id=partition_id, partition_key=key, timeout=seconds),
            f"opening a batch for hub {self.settings.hub!r} ({target})",
        )

    def _too_large(self, body: Any, size: int, limit: int) -> SinkError:
        body_size = len(body.encode("utf-8")) if isinstance(body, str) else len(body)
        return SinkError(
            f"an event of {size} bytes (its body of {body_size} bytes, plus properties and AMQP overhead) exceeds "
            f"the hub's maximum message "
            f"size of {limit} bytes; split or compress the body. Nothing was dropped: the write fails instead."
        )

    def _send_all(
        self, target: tuple[str, str], batches: list[tuple[Any, int, list[Any]]]
    ) -> tuple[int, int, int, int]:
        """Send one target's batches in order; returns the events and batches sent, the events among them sent
        again after an unanswered attempt, and (exactly once) the unanswered sends settled by reading back."""
        sent = resent = settled = 0
        queue = list(batches)
        sent_batches = len(queue)
        while queue:
            batch, count, events = queue.pop(0)
            try:
                if self._send_with_retry(batch, count, target):
                    resent += count
                sent += count
            except _Unanswered as unanswered:
                # Which of this target's events did the hub store? Ask it (this target's partition; a key's
                # partition is the service's choice: all of them), then send the rest, packed again.
                assert self._guard is not None
                settled += 1
                if settled > _MOST_SETTLES:
                    raise SinkError(
                        f"sending to hub {self.settings.hub!r} ({target[0]} {target[1]!r}) failed {settled} times in a "
                        f"row without an answer, each settled by reading the hub back (exactly once): {unanswered}"
                    ) from unanswered
                stored = self._guard.stored([target[1]] if target[0] == "partition" else None)
                waiting = [event for _, _, chunk in [(batch, count, events), *queue] for event in chunk]
                rest = [event for event in waiting if not _is_stored(event, stored)]
                sent += len(waiting) - len(rest)
                kind, value = target
                queue = self._pack(rest, partition_id=value if kind == "partition" else None,
                                   key=value if kind == "key" else None)  # fmt: skip
                sent_batches += len(queue)
        return sent, sent_batches, resent, settled

    def _send_with_retry(self, batch: Any, count: int, target: tuple[str, str]) -> bool:
        """Send one batch, retrying transient failures until ``eventhubs.operationTimeout``; whether it was sent
        again after an attempt that went unanswered.

        Why that is told: a send refused (busy) or one that failed before anything of it was written (its link
        or connection could not open) was not stored, so sending it again repeats nothing; a send that timed out
        may have been stored all the same (the answer was late, or lost with its connection), and Event Hubs has
        no idempotent send this SDK offers, so the next attempt may store it twice. That is the sink's "at least
        once", and the driver says when it happened and for how many events (:meth:`_SinkBase._log_commit`).
        With exactly once, every send whose outcome is not known is settled by reading back instead."""

        from azure.eventhub.exceptions import OperationTimeoutError  # here: importing the sink loads no SDK

        unanswered = False

        def send(seconds: float) -> None:
            nonlocal unanswered
            client = self._client
            try:
                client.send(batch, max(1.0, seconds))
            except Exception as exc:
                condition = conditions.condition(exc)
                if condition == conditions.TOO_LARGE:
                    raise SinkError(f"the hub rejected a batch as too large: {exc}") from exc
                if isinstance(exc, TimeoutError | OperationTimeoutError):
                    unanswered = True
                    self._replace_client(client)  # unanswered: the next attempt goes over a new connection
                # Exactly once: a send whose outcome is not known is settled by reading back, never by its error's
                # type. Only a failure before anything of it was written (its link or connection opening, the
                # sign-in: sdk.unsent) or the service's refusal of the send itself (busy) says for
                # certain that nothing was stored; a send unanswered, or whose link was detached or connection
                # lost on the way (the SDK reports those as ConnectionLostError, ConnectError, EventDataSendError
                # or a bare EventHubError, depending on where it was), may have been stored.
                if self._once is not None and not sdk.unsent(exc) and condition != conditions.SERVER_BUSY:
                    raise _Unanswered(str(exc)) from exc
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
            if conditions.condition(error) == conditions.SERVER_BUSY:
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


def _is_stored(event: OutEvent, stored: dict[int, int]) -> bool:
    """Whether the hub holds this attempt's ``event`` (its row, with the same body's CRC-32)."""
    return stored.get(event.row) == event.crc


def write_task(settings: ConnectionSettings, layout: SinkLayout, timeout: float, items: Iterator[Any],
               arrow: bool, once: ExactlyOnce | None = None) -> SendReport:  # fmt: skip
    """One task's write: Arrow record batches (``arrow``) or rows in, a send report out."""
    runtime.task_started()
    sender = EventSender(settings, layout, timeout, once)
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
