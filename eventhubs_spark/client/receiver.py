"""Executor side: a per-process pool of partition receivers that read sequence-number ranges.

A receiver that already stands at a range's start (because it read the previous range of its
partition in this process) is reused, and its prefetched events carry over; otherwise it is
reopened at the start. The pool follows Spark's Kafka consumer pool: keyed by what identifies the
resource, bounded, idle entries expire on an injected clock, an entry in use is never evicted,
clients close outside the lock, and an entry is invalidated after an error or on a task retry.

The SDK's ``receive()`` retries some attach errors forever without raising, so progress is watched
here: a range that makes no progress for ``eventhubs.receiverTimeout`` fails with an error that
names the hub, partition and range, and the link's own error when it has one.

Owner-level (epoch) receivers are claims on a partition, so two rules keep them from hurting anyone:

- Displacement. Any newer owner-level receiver of the consumer group takes the partition: the
  driver's own position lookups between micro-batches do, and so does another reader. A receiver
  displaced while it sat idle in the pool is simply reopened at its position when its next task
  starts (nothing was lost: every event it handed out was before the detach, and it hands out no
  other). A displacement during a read is answered by one reopen at the next unread event; a second
  one in the same task means someone else really reads the partition, and the task fails.
- Release. An idle owner-level receiver shuts out every non-epoch reader of its consumer group (the
  Python SDK's processors among them), so an idle one is closed after the short time its input
  partition says (tied to the query's trigger cadence, at most its ownership update interval), by a
  reaper thread of the pool, even when no further task comes; in ownership mode every task also
  carries the partitions its query owns, and idle receivers of the others are closed at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import EventHubsTimeoutError, ReceiverDisconnectedError, data_loss_error, link_stolen
from . import sdk
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
        self.displaced_idle = 0  # reopened because the link was taken while the receiver sat in the pool
        self.displaced_reading = 0  # reopened once because the link was taken during a read
        self.closed_idle = 0  # reopened because the service closed the idle link or connection
        self._consumer_error: str | None = None
        self._raw = False  # True: the consumer hands out AMQP messages, not EventData (see sdk.deliver_raw)

    def _on_events(self, events: Any) -> None:
        if isinstance(events, list):
            self._received.extend(events)
        elif events is not None:
            self._received.append(events)

    def open_at(self, sequence_number: int) -> None:
        self._close_consumer()
        self._consumer = sdk.create_consumer(
            self._client,
            self.config.consumer_group,
            self.partition,
            sequence_number,
            self._on_events,
            inclusive=True,
            owner_level=self.config.owner_level if self.config.exclusive else None,
            prefetch=self.config.prefetch,
        )
        self._raw = sdk.deliver_raw(self._consumer)
        sdk.bounded_reads(self._consumer, self.config.prefetch)
        self._carry = []
        self.position = sequence_number
        self.opens += 1

    def read_range(self, start: int, end: int, fail_on_data_loss: bool, result: RangeResult) -> Iterator[list[Any]]:
        """Yield lists of events with ``start <= sequence number < end``, in order, each once."""
        if self.position != start or self._consumer is None:
            self.open_at(start)
        else:
            closed = self._closed_while_idle()
            if closed is not None:
                # Another owner-level receiver of the group (usually the driver's own lookup between
                # micro-batches) took the link, or the service closed an idle link or connection, while
                # this receiver sat in the pool: not an error, it reopens where it stands.
                if link_stolen(closed):
                    self.displaced_idle += 1
                else:
                    self.closed_idle += 1
                _LOG.info("hub %s partition %s: the receiver's link was closed while idle; reopening at %d (%s)",
                          self.settings.hub, self.partition, start, _first_line(closed))  # fmt: skip
                self.open_at(start)
        expected = start
        last_progress = time.monotonic()
        reopened = False
        last_error: str | None = None
        while expected < end:
            events = self._next_events(end - expected)
            if events is None:
                error = self._link_error()
                if error is not None and link_stolen(error):
                    if not reopened:
                        # Events handed out so far came before the detach; read on from the next one.
                        reopened = True
                        self.displaced_reading += 1
                        _LOG.warning("hub %s partition %s: receiver displaced while reading [%d, %d); reopening "
                                     "once at %d (%s)", self.settings.hub, self.partition, start, end, expected,
                                     _first_line(error))  # fmt: skip
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
                        raise data_loss_error(self.settings.hub, self.partition, expected, min(seq, end))
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

    def _closed_while_idle(self) -> str | None:
        """Why the link or its connection was closed while this receiver sat in the pool, else None.

        Nothing reads the connection between tasks, so a detach (another owner took the partition, the
        service's idle timer) or a close sent then is still waiting on the socket: process what is
        already there, without waiting for more, and look at the link and the connection.
        """
        sdk.drain_pending_frames(self._consumer, limit=4 * self.config.prefetch + 16)
        error = self._link_error()
        return error if error is not None else sdk.connection_error(self._consumer)

    def _next_events(self, wanted: int) -> list[Any] | None:
        if self._carry:
            taken, self._carry = self._carry[:wanted], self._carry[wanted:]
            return taken
        self._received = []
        try:
            # no more frames than the range needs (see sdk.receive_frames)
            sdk.receive_frames(self._consumer, max(1, min(wanted, self.config.prefetch)), self.config.prefetch)
        except Exception as exc:
            text = str(exc)
            if link_stolen(text):
                self._consumer_error = text
                return None
            raise
        return self._received or None

    def _link_error(self) -> str | None:
        pending = self._consumer_error
        if pending:
            self._consumer_error = None
            return str(pending)
        return sdk.link_error(self._consumer)

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


def _first_line(text: str) -> str:
    return text.splitlines()[0][:300] if text else text


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
    __slots__ = ("idle_timeout", "in_use", "last_used", "receiver", "scope")

    def __init__(self, receiver: PartitionReceiver, now: float, idle_timeout: float, scope: str | None) -> None:
        self.receiver = receiver
        self.in_use = False
        self.last_used = now
        self.idle_timeout = idle_timeout
        self.scope = scope


PoolKey = tuple[Any, ...]


class ReceiverPool:
    """Receivers per (namespace, hub, credentials, consumer group, partition) in this process.

    Each entry keeps the idle time-out its last task gave it; :meth:`reap` closes the idle entries past
    it, and a daemon thread calls it every ``reap_every`` seconds once the pool is used (``0``: only
    when called, as unit tests do with their own clock).
    """

    def __init__(
        self,
        capacity: int = 64,
        idle_timeout: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        factory: Callable[[ConnectionSettings, ReceiverConfig, str], PartitionReceiver] = PartitionReceiver,
        reap_every: float = 0.0,
    ) -> None:
        self.capacity = capacity
        self.idle_timeout = idle_timeout
        self.clock = clock
        self.factory = factory
        self.reap_every = reap_every
        self.stats = PoolStats()
        self._entries: OrderedDict[PoolKey, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._reaper: threading.Thread | None = None

    @staticmethod
    def key(settings: ConnectionSettings, config: ReceiverConfig, partition: str) -> PoolKey:
        return (*settings.pool_key(), config.consumer_group.lower(), partition)

    def acquire(
        self,
        settings: ConnectionSettings,
        config: ReceiverConfig,
        partition: str,
        start: int,
        retry: bool = False,
        idle_timeout: float | None = None,
        scope: str | None = None,
        owned: frozenset[str] | None = None,
    ) -> PartitionReceiver:
        """A receiver for ``partition``, marked in use; on a task retry the pooled one is discarded.

        ``idle_timeout``: how long the receiver may sit idle after this task (default: the pool's).
        ``scope`` and ``owned`` (ownership mode): the owner reading, and every partition it owns now;
        idle receivers this owner left on partitions it no longer owns are closed here and now.
        """
        key = self.key(settings, config, partition)
        timeout = self.idle_timeout if idle_timeout is None else idle_timeout
        to_close: list[PartitionReceiver] = []
        with self._lock:
            self._start_reaper()
            now = self.clock()
            to_close.extend(self._expire(now))
            if owned is not None:
                to_close.extend(self._release_unowned(key[:-1], scope, owned))
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
                entry.idle_timeout = timeout
                entry.scope = scope
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
                entry = _Entry(receiver, self.clock(), timeout, scope)
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

    def reap(self) -> int:
        """Close the idle receivers past their idle time-out; returns how many."""
        with self._lock:
            expired = self._expire(self.clock())
        _close_all(expired)
        return len(expired)

    def _start_reaper(self) -> None:
        if self.reap_every > 0 and (self._reaper is None or not self._reaper.is_alive()):
            self._reaper = threading.Thread(target=self._reap_forever, name="eventhubs-receiver-reaper", daemon=True)
            self._reaper.start()

    def _reap_forever(self) -> None:
        while True:
            time.sleep(self.reap_every)
            try:
                self.reap()
            except Exception:  # never let the reaper die: an idle receiver left open locks readers out
                _LOG.warning("closing idle receivers failed", exc_info=True)

    def _evict_idle(self, which: Callable[[PoolKey, _Entry], bool]) -> list[PartitionReceiver]:
        """Remove the idle entries ``which`` selects; returns their receivers, to close outside the lock."""
        out = []
        for key, entry in list(self._entries.items()):
            if not entry.in_use and which(key, entry):
                del self._entries[key]
                self.stats.evictions += 1
                out.append(entry.receiver)
        return out

    def _expire(self, now: float) -> list[PartitionReceiver]:
        return self._evict_idle(lambda key, entry: now - entry.last_used > entry.idle_timeout)

    def _release_unowned(self, prefix: PoolKey, scope: str | None, owned: frozenset[str]) -> list[PartitionReceiver]:
        return self._evict_idle(lambda key, entry: key[:-1] == prefix and entry.scope == scope and key[-1] not in owned)

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


POOL = ReceiverPool(reap_every=1.0)
