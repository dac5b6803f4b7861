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

import bisect
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from .. import defaults
from ..amqp import failures, sdk
from ..amqp.engine import Connections, Link, LinkSpec, SharedConnection
from ..amqp.messages import RawEvents
from ..auth.settings import ConnectionSettings
from ..errors import EventHubsTimeoutError, NetworkError, ReceiverDisconnectedError, data_loss_error

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReceiverConfig:
    """What a receiver needs besides the connection: all plain data, carried by input partitions."""

    consumer_group: str = defaults.CONSUMER_GROUP
    prefetch: int = defaults.PREFETCH
    receiver_timeout: float = defaults.RECEIVER_TIMEOUT
    exclusive: bool = defaults.EXCLUSIVE_RECEIVER
    owner_level: int = 0
    # How far an idle receiver reads ahead of what its tasks took (events, bytes).
    read_ahead_events: int = defaults.READ_AHEAD_EVENTS
    read_ahead_bytes: int = defaults.READ_AHEAD_BYTES


@dataclass
class RangeResult:
    """Counts a read reports: events read and events found missing (lost to retention)."""

    read: int = 0
    lost: int = 0
    fallbacks: int = 0  # events the SDK's decoder made when the task decoded them (see codec.message)
    # the receiver's life so far (see PartitionReceiver)
    displaced_idle: int = 0
    displaced_reading: int = 0
    closed_idle: int = 0
    reconnects: int = 0


# How long a reader waits on its link before it looks at the clock and the link's state again.
_WAIT_SLICE = 0.5


class PartitionReceiver:
    """One partition's receiving link on the process's shared connection, positioned by sequence number.

    ``position`` is the next sequence number it hands out; the events its link read ahead of that
    wait in the link's sink (and in ``_carry``, the part of the last chunk a range did not need).
    """

    def __init__(
        self, settings: ConnectionSettings, config: ReceiverConfig, partition: str, connections: Connections
    ) -> None:
        self.settings = settings
        self.connections = connections  # the process's shared connections its link opens on
        self.config = config
        self.partition = partition
        self._link: Link | None = None
        self._connection: SharedConnection | None = None
        self._carry: RawEvents | None = None
        self.position: int | None = None  # the next sequence number this receiver will hand out
        self.opens = 0
        self.displaced_idle = 0  # reopened because the link was taken while the receiver sat in the pool
        self.displaced_reading = 0  # reopened once because the link was taken during a read
        self.closed_idle = 0  # reopened because the service closed the idle link or connection
        self.reconnects = 0  # reopened during a read after a dropped link or connection
        self._unreachable: NetworkError | None = None  # the last attempt could not connect (see _raise_if_lasting)

    def open_at(self, sequence_number: int, keep: RawEvents | None = None) -> None:
        """Read from ``sequence_number`` on a new link; ``keep``: events before it still to hand out."""
        self._close_link()
        spec = LinkSpec(
            consumer_group=self.config.consumer_group,
            partition=self.partition,
            start=sequence_number,
            owner_level=self.config.owner_level if self.config.exclusive else None,
            prefetch=self.config.prefetch,
            read_ahead_events=self.config.read_ahead_events,
            read_ahead_bytes=self.config.read_ahead_bytes,
        )
        self._connection, self._link = self.connections.open_link(self.settings, spec)
        self._carry = keep if keep else None
        if keep is None:
            self.position = sequence_number
        self.opens += 1

    def _reopen_after_held(self, fallback: int) -> None:
        """Open a new link after every event this receiver still holds (read ahead before its link ended),
        keeping them: nothing is read twice, nothing skipped. Without any, at ``fallback``."""
        held = self._carry or RawEvents()
        self._carry = None
        if self._link is not None:
            sink = self._link.sink
            with sink.cond:
                while (chunk := sink.take(1 << 62)) is not None:
                    held.extend(chunk)
        if held.seqs:
            self.open_at(held.seqs[-1] + 1, keep=held)
        else:
            self.open_at(fallback)

    def read_range(self, start: int, end: int, fail_on_data_loss: bool, result: RangeResult) -> Iterator[RawEvents]:
        """Yield the events with ``start <= sequence number < end``, in order, each once, undecoded: resume
        where the receiver stands, take what its link holds, recover when the link brings nothing, and cut
        each chunk to the range."""
        self._resume(start)
        recovery = _Recovery(self, end)
        expected = start
        while expected < end:
            chunk = self._next_events(end - expected)
            if chunk is None:
                recovery.after_nothing(expected)  # reopens, waits, or fails the read
                continue
            after = yield from self._slice(chunk, expected, end, fail_on_data_loss, result)
            if after > expected:
                recovery.progressed()
            expected = after
        self.position = end

    def _resume(self, start: int) -> None:
        """Stand at ``start`` with a live link: reopen there when the receiver stands elsewhere, or after what
        it holds when its link ended while it sat in the pool."""
        if self.position != start or self._link is None:
            self.open_at(start)
            return
        closed = self._closed_while_idle()
        if closed is None:
            return
        # Another owner-level receiver of the group (usually the driver's own lookup between micro-batches)
        # took the link, or the service closed an idle link or connection, while this receiver sat in the
        # pool: not an error, it reopens after what it holds.
        if sdk.is_stolen(self._link_exception()):
            self.displaced_idle += 1
        else:
            self.closed_idle += 1
        _LOG.info("hub %s partition %s: the receiver's link was closed while idle; reopening at %d (%s)",
                  self.settings.hub, self.partition, start, _first_line(closed))  # fmt: skip
        self._reopen_after_held(start)

    def _slice(
        self, chunk: RawEvents, expected: int, end: int, fail_on_data_loss: bool, result: RangeResult
    ) -> Generator[RawEvents, None, int]:
        """Yield the part of ``chunk`` that is the range's next events, in runs without gaps (a gap is data
        lost to retention), keep what lies past ``end`` for the next range; returns the next expected
        sequence number."""
        seqs = chunk.seqs
        if seqs[0] < expected:  # a reopened link re-delivered what was already read
            chunk.take(bisect.bisect_left(seqs, expected))
            if not chunk.seqs:
                return expected
            seqs = chunk.seqs
        if seqs[0] > expected:  # the events before this chunk are gone
            expected = self._lost(expected, min(seqs[0], end), fail_on_data_loss, result)
            if expected >= end:
                self._hold(chunk)
                return expected
        if seqs[-1] >= end:  # the rest is the next range's: held back
            head = chunk.take(bisect.bisect_left(seqs, end))
            self._hold(chunk)
            chunk = head
        while chunk.seqs:
            gap = _first_gap(chunk.seqs)
            piece = chunk if gap is None else chunk.take(gap)
            expected = piece.seqs[-1] + 1
            result.read += len(piece)
            self.position = expected
            yield piece
            if gap is None:
                break
            expected = self._lost(expected, chunk.seqs[0], fail_on_data_loss, result)
        return expected

    def _lost(self, expected: int, until: int, fail_on_data_loss: bool, result: RangeResult) -> int:
        """Events ``[expected, until)`` are gone: fail, or count them and go on from ``until``."""
        if fail_on_data_loss:
            raise data_loss_error(self.settings.hub, self.partition, expected, until)
        _LOG.warning("hub %r partition %s: %d events [%d, %d) were lost to retention; continuing because "
                     "failOnDataLoss=false", self.settings.hub, self.partition, until - expected, expected,
                     until)  # fmt: skip
        result.lost += until - expected
        return until

    def _hold(self, chunk: RawEvents) -> None:
        """Keep events a range did not need, before anything held already (they come first)."""
        if not chunk.seqs:
            return
        if self._carry is not None and self._carry.seqs:
            chunk.extend(self._carry)
        self._carry = chunk

    def _raise_if_lasting(self, error: str) -> str:
        """A refused sign-in, or a failure to connect that will not heal (an untrusted certificate, a proxy
        that refuses), fails the task at once, as itself; returns the error to report for the others (a
        failure to connect in words that name the option to change)."""
        exc = self._link.sink.exception if self._link is not None else None
        failure = failures.failure(self.settings, exc) if exc is not None else None
        self._unreachable = failure if isinstance(failure, NetworkError) else None
        if failure is None:
            return error
        if not failure.retriable:
            raise failure
        return str(failure)

    def _closed_while_idle(self) -> str | None:
        """Why the link or its connection ended while this receiver sat in the pool, else None. The
        connection's reader notices at once (it reads between tasks too), so this only asks the sink."""
        return self._link.sink.error if self._link is not None else None

    def _next_events(self, wanted: int) -> RawEvents | None:
        """Up to ``wanted`` events, waiting a little for them; None when none came (see ``_link_error``)."""
        carry = self._carry
        if carry is not None and carry.seqs:
            if len(carry) <= wanted:
                self._carry = None
                return carry
            return carry.take(wanted)
        return self._from_link(wanted)

    def _from_link(self, wanted: int) -> RawEvents | None:
        """Up to ``wanted`` events the link decoded, waiting a little for them; None when none came."""
        if self._link is None:
            return None
        sink = self._link.sink
        with sink.cond:
            if not sink.ready and sink.error is None:
                sink.cond.wait(min(_WAIT_SLICE, self.config.receiver_timeout))
            return sink.take(wanted)

    def _link_error(self) -> str | None:
        return self._link.sink.error if self._link is not None else None

    def _link_exception(self) -> BaseException | None:
        """What ended the link, as the SDK raised or reported it (its AMQP condition tells what it means)."""
        return self._link.sink.exception if self._link is not None else None

    def _close_link(self) -> None:
        link, connection = self._link, self._connection
        self._link = self._connection = None
        if link is not None and connection is not None:
            connection.close_link(link)

    def close(self) -> None:
        self._close_link()
        self._carry = None


class _Recovery:
    """One read's answer to a link that brought nothing within a wait: after a displacement, one reopen at the
    next unread event (a second one means someone else reads the partition: the read fails); after a dropped
    link or connection, a reopen a little later each time; a refused sign-in or a failure to connect that
    will not heal fails at once; and only ``eventhubs.receiverTimeout`` without progress fails the read."""

    def __init__(self, receiver: PartitionReceiver, end: int) -> None:
        self.receiver = receiver
        self.end = end
        self.reopened = False
        self.backoff = 0.05
        self.last_error: str | None = None
        self.last_progress = time.monotonic()

    def progressed(self) -> None:
        self.last_progress = time.monotonic()
        self.backoff = 0.05  # it reads again: the next reopen need not wait long

    def after_nothing(self, expected: int) -> None:
        r = self.receiver
        error = r._link_error()
        if error is not None:
            error = r._raise_if_lasting(error)
            if sdk.is_stolen(r._link_exception()):
                if self.reopened:
                    raise _link_failure(r, error, expected, self.end)
                # Events handed out so far came before the detach; read on from the next one.
                self.reopened = True
                r.displaced_reading += 1
                _LOG.warning("hub %s partition %s: receiver displaced while reading; reopening once at %d before "
                             "%d (%s)", r.settings.hub, r.partition, expected, self.end,
                             _first_line(error))  # fmt: skip
            else:
                self.last_error = error
                r.reconnects += 1
                time.sleep(self.backoff)
                self.backoff = min(self.backoff * 2, 2.0)
            r._reopen_after_held(expected)
        if time.monotonic() - self.last_progress <= r.config.receiver_timeout:
            return
        if r._unreachable is not None:  # it never got through: say so, and what to change
            raise NetworkError(
                f"could not read hub {r.settings.hub!r} partition {r.partition} for {r.config.receiver_timeout:g} s "
                f"(eventhubs.receiverTimeout): {r._unreachable}"
            )
        cause = f"; last error: {self.last_error}" if self.last_error else ""
        raise EventHubsTimeoutError(
            f"no event from hub {r.settings.hub!r} partition {r.partition} for {r.config.receiver_timeout:g} s "
            f"(eventhubs.receiverTimeout) while reading sequence numbers [{expected}, {self.end}); the partition "
            f"may be stalled or unavailable{cause}"
        )


def _first_gap(seqs: list[int]) -> int | None:
    """The index of the first sequence number that does not follow the one before it, or None when they
    run on without a gap (the usual case, found without a loop)."""
    if seqs[-1] - seqs[0] == len(seqs) - 1:
        return None
    for i in range(1, len(seqs)):
        if seqs[i] != seqs[i - 1] + 1:
            return i
    return None


def _first_line(text: str) -> str:
    return text.splitlines()[0][:300] if text else text


def _link_failure(receiver: PartitionReceiver, error: str, start: int, end: int) -> Exception:
    where = f"hub {receiver.settings.hub!r} partition {receiver.partition} (sequence numbers [{start}, {end}))"
    return ReceiverDisconnectedError(
        f"{where}: another reader with an equal or higher owner level (epoch) took this partition in consumer "
        f"group {receiver.config.consumer_group!r}. Give each query its own consumer group, or stop the other "
        f"reader. Service said: {error}"
    )


@dataclass(frozen=True)
class RangeRequest:
    """One task's range: read ``[start, end)`` of ``partition``. Plain data: it travels to the
    executor's receiver service too. ``idle_timeout``: how long the receiver may sit idle afterwards;
    ``owner``/``owned`` (ownership mode): the query's owner id and the partitions it owns now;
    ``retry``: the task is a retry (a pooled receiver is not trusted then)."""

    settings: ConnectionSettings
    config: ReceiverConfig
    partition: str
    start: int
    end: int
    fail_on_data_loss: bool
    idle_timeout: float | None = None
    owner: str | None = None
    owned: frozenset[str] | None = None
    retry: bool = False


def read_here(request: RangeRequest, result: RangeResult, pool: ReceiverPool) -> Generator[RawEvents, None, None]:
    """Read a range through this process's receiver pool; the receiver goes back to the pool after a
    read that ended well, and is closed after any failure (or a read stopped half-way)."""
    receiver = pool.acquire(
        request.settings,
        request.config,
        request.partition,
        request.start,
        retry=request.retry,
        idle_timeout=request.idle_timeout,
        scope=request.owner,
        owned=request.owned,
    )
    healthy = False
    started = time.monotonic()
    try:
        with failures.sign_in_errors(request.settings):
            yield from receiver.read_range(request.start, request.end, request.fail_on_data_loss, result)
        healthy = True
    finally:
        pool.release(receiver, healthy)
        _LOG.debug("hub %s partition %s: [%d, %d) read here in %.3f s (%d events, %d lost)", request.settings.hub,
                   request.partition, request.start, request.end, time.monotonic() - started, result.read,
                   result.lost)  # fmt: skip
        result.displaced_idle = receiver.displaced_idle
        result.displaced_reading = receiver.displaced_reading
        result.closed_idle = receiver.closed_idle
        result.reconnects = receiver.reconnects


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
        connections: Connections | None = None,
        capacity: int = 64,
        idle_timeout: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        factory: Callable[[ConnectionSettings, ReceiverConfig, str], PartitionReceiver] | None = None,
        reap_every: float = 0.0,
    ) -> None:
        """``connections``: where receivers open their links (a factory of receivers instead, for tests)."""
        if factory is None:
            if connections is None:
                raise ValueError("a receiver pool needs the process's connections (or a factory of receivers)")
            opened_on = connections

            def factory(settings: ConnectionSettings, config: ReceiverConfig, partition: str) -> PartitionReceiver:
                return PartitionReceiver(settings, config, partition, opened_on)

        self.connections = connections
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

    def stats_dict(self) -> dict[str, Any]:
        """The pool's counts, for the task's log line."""
        stats = self.stats
        return {
            "pool_hits": stats.hits,
            "pool_repositions": stats.repositions,
            "pool_creates": stats.creates,
            "pool_reuse_rate": round(stats.reuse_rate(), 3),
            "link_attaches": self.connections.attaches if self.connections is not None else 0,
        }

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
