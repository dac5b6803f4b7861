"""Executor side: a per-process pool of partition receivers that read sequence-number ranges.

A receiver that already stands at a range's start (because it read the previous range of its
partition in this process) is reused, and its prefetched events carry over; otherwise it is
reopened at the start. The pool follows Spark's Kafka consumer pool: keyed by what identifies the
resource, bounded, idle entries expire on an injected clock, an entry in use is never evicted,
clients close outside the lock, and an entry is invalidated after an error or on a task retry.

The SDK's ``receive()`` retries some attach errors forever without raising, so progress is watched
here: a range that makes no progress for ``eventhubs.receiverTimeout`` fails with an error that
names the hub, partition and range, and the link's own error when it has one.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import DataLossError, EventHubsTimeoutError, ReceiverDisconnectedError
from .settings import ConnectionSettings

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReceiverConfig:
    """What a receiver needs besides the connection: all plain data, carried by input partitions."""

    consumer_group: str = "$Default"
    prefetch: int = 500
    receiver_timeout: float = 60.0
    exclusive: bool = True
    owner_level: int = 0


@dataclass
class RangeResult:
    """Counts a read reports: events read and events found missing (lost to retention)."""

    read: int = 0
    lost: int = 0


class PartitionReceiver:
    """One SDK consumer for one partition, positioned by sequence number."""

    def __init__(self, settings: ConnectionSettings, config: ReceiverConfig, partition: str) -> None:
        self.settings = settings
        self.config = config
        self.partition = partition
        self._client = settings.consumer(consumer_group=config.consumer_group)
        self._consumer: Any = None
        self._received: list[Any] = []
        self._carry: list[Any] = []
        self.position: int | None = None  # the next sequence number this receiver will hand out
        self.opens = 0
        self._consumer_error: str | None = None
        self._raw = False  # True: the consumer hands out AMQP messages, not EventData (see _deliver_raw)

    def _on_events(self, events: Any) -> None:
        if isinstance(events, list):
            self._received.extend(events)
        elif events is not None:
            self._received.append(events)

    def open_at(self, sequence_number: int) -> None:
        self._close_consumer()
        self._consumer = self._client._create_consumer(
            self.config.consumer_group,
            self.partition,
            sequence_number,
            self._on_events,
            event_position_inclusive=True,
            owner_level=self.config.owner_level if self.config.exclusive else None,
            prefetch=self.config.prefetch,
        )
        self._raw = _deliver_raw(self._consumer)
        _bounded_reads(self._consumer, self.config.prefetch)
        self._carry = []
        self.position = sequence_number
        self.opens += 1

    def read_range(self, start: int, end: int, fail_on_data_loss: bool, result: RangeResult) -> Iterator[list[Any]]:
        """Yield lists of events with ``start <= sequence number < end``, in order, each once."""
        if self.position != start or self._consumer is None:
            self.open_at(start)
        expected = start
        last_progress = time.monotonic()
        reconnected_after_steal = False
        last_error: str | None = None
        while expected < end:
            events = self._next_events(end - expected)
            if events is None:
                error = self._link_error()
                if error is not None and _is_stolen(error):
                    if not reconnected_after_steal and result.read == 0:
                        # An idle pooled receiver was replaced by a newer reader of this query: reopen once.
                        reconnected_after_steal = True
                        self.open_at(expected)
                        continue
                    raise _link_failure(self, error, expected, end)
                # Other link errors (a dropped connection, a forced detach) the SDK recovers from on the
                # next receive, from the last event it delivered; only lasting silence fails the task.
                last_error = error or last_error
                if time.monotonic() - last_progress > self.config.receiver_timeout:
                    cause = f"; last error: {last_error}" if last_error else ""
                    raise EventHubsTimeoutError(
                        f"no event from hub {self.settings.hub!r} partition {self.partition} for "
                        f"{self.config.receiver_timeout:g} s (eventhubs.receiverTimeout) while reading sequence "
                        f"numbers [{expected}, {end}); the partition may be stalled or unavailable{cause}"
                    )
                continue
            out = []
            for event in events:
                seq = event.message_annotations[_SEQ] if self._raw else event.sequence_number
                if seq < expected:
                    continue  # a reconnect re-delivered what was already read
                if seq > expected:
                    lost = min(seq, end) - expected
                    if fail_on_data_loss:
                        raise DataLossError(
                            f"hub {self.settings.hub!r} partition {self.partition}: sequence numbers "
                            f"[{expected}, {min(seq, end)}) are gone ({lost} events, removed by retention "
                            f"before they were read). Set failOnDataLoss=false to continue past lost events."
                        )
                    _LOG.warning(
                        "hub %r partition %s: %d events [%d, %d) were lost to retention; continuing because "
                        "failOnDataLoss=false",
                        self.settings.hub,
                        self.partition,
                        lost,
                        expected,
                        min(seq, end),
                    )
                    result.lost += lost
                    expected = seq
                if seq >= end:
                    self._carry.append(event)
                    continue
                out.append(event)
                expected = seq + 1
            if out:
                last_progress = time.monotonic()
                result.read += len(out)
                self.position = expected
                yield out
        self.position = end

    def _next_events(self, wanted: int) -> list[Any] | None:
        if self._carry:
            taken, self._carry = self._carry[:wanted], self._carry[wanted:]
            return taken
        self._received = []
        consumer = self._consumer
        frames = max(1, min(wanted, self.config.prefetch))
        # The SDK reads up to ``_prefetch`` frames per call and returns early only when the socket goes quiet,
        # so under a steady trickle of new events it would wait for a whole prefetch window (500 events at
        # 50 events/s: 10 s) although the range needs far fewer. Read no more frames than the range needs;
        # the link credit stays the full prefetch (see _bounded_reads).
        consumer._prefetch = frames
        try:
            consumer.receive(batch=True, max_batch_size=frames, max_wait_time=None)
            _buffer_socket_reads(consumer)
        except Exception as exc:
            text = str(exc)
            if _is_stolen(text):
                self._consumer_error = text
                return None
            raise
        finally:
            consumer._prefetch = self.config.prefetch
        return self._received or None

    def _link_error(self) -> str | None:
        pending = self._consumer_error
        if pending:
            self._consumer_error = None
            return str(pending)
        handler = getattr(self._consumer, "_handler", None)
        link = getattr(handler, "_link", None)
        error = getattr(link, "_error", None)
        return None if error is None else str(error)

    def _close_consumer(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            close_later(consumer)

    def close(self) -> None:
        self._close_consumer()
        close_later(self._client)


def _close(closable: Any) -> None:
    try:
        closable.close()
    except Exception:
        _LOG.debug("closing %s failed", type(closable).__name__, exc_info=True)


def close_later(closable: Any) -> None:
    """Close an SDK consumer or client on a thread of its own, without waiting for it.

    An SDK consumer's ``close()`` joins its keep-alive thread, which wakes once a second: every close
    took up to 1 s. A pooled receiver repositions by closing its consumer and opening another, so a
    task that found its receiver elsewhere in the stream waited that second before reading (most of a
    micro-batch under a 0-second trigger). The consumer being closed has its own connection and is
    never used again, so nothing needs to wait for it; the thread lives at most about a second.
    """
    threading.Thread(target=_close, args=(closable,), name="eventhubs-close", daemon=True).start()


_SEQ = b"x-opt-sequence-number"


class _Delivered:
    """What the SDK consumer remembers of the last event handed out: its offset, to reconnect after it.

    The SDK reads ``offset`` only when it reconnects, so it is decoded then, not for every event.
    """

    __slots__ = ("message",)

    def __init__(self) -> None:
        self.message: Any = None

    @property
    def offset(self) -> str | None:
        from ..arrow import offset_text

        return offset_text((self.message.message_annotations or {}).get(b"x-opt-offset"))


def _deliver_raw(consumer: Any) -> bool:
    """Make an SDK consumer hand out the received AMQP messages themselves instead of ``EventData``.

    Building an ``EventData`` per event costs more CPU than decoding the AMQP frame; the Arrow batch is
    built straight from the messages instead (:func:`eventhubs_spark.arrow.messages_to_batch`). The
    consumer still needs the last delivered event's offset to reconnect after it, which is kept.
    Only for the SDK's own (pyamqp) transport; with another one, events stay ``EventData``.
    """
    transport = getattr(consumer, "_amqp_transport", None)
    buffer = getattr(consumer, "_message_buffer", None)
    if getattr(transport, "KIND", None) != "pyamqp" or buffer is None:
        return False
    last = _Delivered()

    def next_message() -> Any:
        message = buffer.popleft()
        last.message = message
        consumer._last_received_event = last
        return message

    consumer._next_message_in_buffer = next_message
    return True


_READ_CHUNK = 64 * 1024


def _buffer_socket_reads(consumer: Any) -> None:
    """Make the consumer's AMQP transport read the socket in large chunks.

    The SDK's transport reads every frame with two ``recv`` calls of exactly the header's and the
    body's size: two system calls per event, a tenth of a task's read loop. Reading up to 64 KiB at
    a time and serving the frames from that buffer keeps its exact semantics (the transport already
    serves reads from ``_read_buffer`` first, and the socket is only read when that is empty, so a
    timeout or an error never strands buffered bytes). Only the SDK's own socket transport is
    changed, per connection; anything else is left alone.
    """
    handler = getattr(consumer, "_handler", None)
    transport = getattr(getattr(handler, "_connection", None), "_transport", None)
    if transport is None or getattr(transport, "_chunked", False):
        return
    if not any(cls.__name__ == "SSLTransport" for cls in type(transport).__mro__):
        return
    if not all(hasattr(transport, name) for name in ("_read", "_read_buffer", "sock")):
        return  # another SDK version: keep its own reads
    original = transport._read
    chunk = bytearray(_READ_CHUNK)
    chunk_view = memoryview(chunk)

    def read(n: int, initial: bool = False, buffer: Any = None, **kwargs: Any) -> Any:
        view = buffer if buffer is not None else memoryview(bytearray(n))
        got = transport._read_buffer.readinto(view)
        if got == n:
            return view
        if got:  # a partial buffer: let the SDK's own read finish this frame part
            transport._read_buffer = io.BytesIO(bytes(view[:got]))
            return original(n, initial=initial, buffer=buffer, **kwargs)
        try:
            received = transport.sock.recv_into(chunk_view)
        except TimeoutError:
            transport._read_buffer = io.BytesIO()  # as the SDK's read leaves it: nothing read
            raise
        except Exception:
            return original(n, initial=initial, buffer=buffer, **kwargs)  # the SDK's own handling: EINTR, errors
        if not received:
            raise OSError("Server unexpectedly closed connection")
        take = min(received, n)
        view[:take] = chunk_view[:take]
        if take < received:
            transport._read_buffer = io.BytesIO(bytes(chunk_view[take:received]))
            return view
        if take == n:
            return view
        transport._read_buffer = io.BytesIO(bytes(view[:take]))
        return original(n, initial=initial, buffer=buffer, **kwargs)

    transport._read = read
    transport._chunked = True


def _bounded_reads(consumer: Any, prefetch: int) -> None:
    """Links are always created with the full prefetch as their credit, whatever a read asks for."""
    create = consumer._create_handler

    def create_with_full_credit(auth: Any) -> None:
        asked = consumer._prefetch
        consumer._prefetch = prefetch
        try:
            create(auth)
        finally:
            consumer._prefetch = asked

    consumer._create_handler = create_with_full_credit


def _is_stolen(error: str) -> bool:
    return "stolen" in error or "epoch" in error.lower()


def _link_failure(receiver: PartitionReceiver, error: str, start: int, end: int) -> Exception:
    where = f"hub {receiver.settings.hub!r} partition {receiver.partition} (sequence numbers [{start}, {end}))"
    return ReceiverDisconnectedError(
        f"{where}: another reader with an equal or higher owner level (epoch) took this partition in consumer "
        f"group {receiver.config.consumer_group!r}. Give each query its own consumer group, or stop the other "
        f"reader. Service said: {error}"
    )


@dataclass
class PoolStats:
    hits: int = 0  # a pooled receiver already stood at the range's start
    repositions: int = 0  # a pooled receiver was reopened at another position
    creates: int = 0
    evictions: int = 0
    invalidations: int = 0

    def reuse_rate(self) -> float:
        used = self.hits + self.repositions + self.creates
        return self.hits / used if used else 0.0


class _Entry:
    __slots__ = ("in_use", "last_used", "receiver")

    def __init__(self, receiver: PartitionReceiver, now: float) -> None:
        self.receiver = receiver
        self.in_use = False
        self.last_used = now


PoolKey = tuple[Any, ...]


class ReceiverPool:
    """Receivers per (namespace, hub, credentials, consumer group, partition) in this process."""

    def __init__(
        self,
        capacity: int = 64,
        idle_timeout: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        factory: Callable[[ConnectionSettings, ReceiverConfig, str], PartitionReceiver] = PartitionReceiver,
    ) -> None:
        self.capacity = capacity
        self.idle_timeout = idle_timeout
        self.clock = clock
        self.factory = factory
        self.stats = PoolStats()
        self._entries: OrderedDict[PoolKey, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(settings: ConnectionSettings, config: ReceiverConfig, partition: str) -> PoolKey:
        return (*settings.pool_key(), config.consumer_group.lower(), partition)

    def acquire(
        self, settings: ConnectionSettings, config: ReceiverConfig, partition: str, start: int, retry: bool = False
    ) -> PartitionReceiver:
        """A receiver for ``partition``, marked in use; on a task retry the pooled one is discarded."""
        key = self.key(settings, config, partition)
        to_close: list[PartitionReceiver] = []
        with self._lock:
            now = self.clock()
            to_close.extend(self._expire(now))
            entry = self._entries.get(key)
            if entry is not None and (entry.in_use or retry or entry.receiver.config != config):
                if not entry.in_use:
                    del self._entries[key]
                    to_close.append(entry.receiver)
                    self.stats.invalidations += 1
                entry = None
            if entry is None:
                receiver = None
            else:
                receiver = entry.receiver
                entry.in_use = True
                entry.last_used = now
                self._entries.move_to_end(key)
                if receiver.position == start:
                    self.stats.hits += 1
                else:
                    self.stats.repositions += 1
        _close_all(to_close)
        if receiver is not None:
            return receiver
        receiver = self.factory(settings, config, partition)
        with self._lock:
            self.stats.creates += 1
            if key not in self._entries:
                entry = _Entry(receiver, self.clock())
                entry.in_use = True
                self._entries[key] = entry
            to_close = self._evict_over_capacity()
        _close_all(to_close)
        return receiver

    def release(self, receiver: PartitionReceiver, healthy: bool) -> None:
        """Return a receiver; an unhealthy one (it raised) is closed, never reused."""
        key = self.key(receiver.settings, receiver.config, receiver.partition)
        to_close: list[PartitionReceiver] = []
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.receiver is receiver:
                entry.in_use = False
                entry.last_used = self.clock()
                if not healthy:
                    del self._entries[key]
                    self.stats.invalidations += 1
                    to_close.append(receiver)
            else:
                to_close.append(receiver)  # not pooled (the slot was taken): close it
            to_close.extend(self._evict_over_capacity())
        _close_all(to_close)

    def _expire(self, now: float) -> list[PartitionReceiver]:
        out = []
        for key, entry in list(self._entries.items()):
            if not entry.in_use and now - entry.last_used > self.idle_timeout:
                del self._entries[key]
                self.stats.evictions += 1
                out.append(entry.receiver)
        return out

    def _evict_over_capacity(self) -> list[PartitionReceiver]:
        out = []
        for key, entry in list(self._entries.items()):
            if len(self._entries) <= self.capacity:
                break
            if not entry.in_use:
                del self._entries[key]
                self.stats.evictions += 1
                out.append(entry.receiver)
        return out

    def close_all(self) -> None:
        with self._lock:
            receivers = [e.receiver for e in self._entries.values()]
            self._entries.clear()
        _close_all(receivers)

    def __len__(self) -> int:
        return len(self._entries)


def _close_all(receivers: list[PartitionReceiver]) -> None:
    for receiver in receivers:
        receiver.close()


POOL = ReceiverPool()
