"""A process's pool of partition receivers, and a range read through it.

A receiver that already stands at a range's start (because it read the previous range of its
partition in this process) is reused, and its prefetched events carry over; otherwise it is
reopened at the start. The pool follows Spark's Kafka consumer pool: keyed by what identifies the
resource, bounded, idle entries expire on an injected clock, an entry in use is never evicted,
clients close outside the lock, and an entry is invalidated after an error or on a task retry.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from eventhubs_spark.amqp import failures
from eventhubs_spark.amqp.messages import RawEvents
from eventhubs_spark.amqp.receive_connections import Connections
from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.executor.partition_receiver import PartitionReceiver
from eventhubs_spark.interprocess.partition_ends import Vouched, vouched
from eventhubs_spark.interprocess.task_ranges import RangeRequest, RangeResult, ReceiverConfig

_LOG = logging.getLogger(__name__)

# Receivers a process keeps: every partition of the largest hub the service allows (1,024, Dedicated), twice
# over. It was 64, and an executor serving more partitions than that evicted and re-attached every one of them
# in every micro-batch (4,096 attaches in 4 micro-batches at 1,024 partitions). Idle receivers close after their
# idle time-out anyway, and what their links hold ahead is bounded for the process as a whole
# (:class:`~eventhubs_spark.amqp.frame_reader.ReadAheadBudget`), so this bound is a backstop, not the memory's limit.
CAPACITY = 2048


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
        capacity: int = CAPACITY,
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
        # What each receiver's link vouches for now (newest_ends), kept as it changes: each receiver tells the pool
        # (_revouch) after anything that may change it, on the thread that changed it (a link's reading thread for
        # its newest event, its end, its read-ahead held back or freed). A driver's question after a batch reads
        # these tuples instead of walking every receiver, its link and its sink on the trigger's path (after a batch
        # none of it is in the CPU's caches; bench `planning`), and none at all while ``vouch_version`` stands
        # (bumped whenever one changes: an idle stream asks many times a second). reap() looks at every receiver
        # again once a second, off that path, so a change nobody told of is seen within a second. Each is kept with
        # its answer row encoded (Vouched), made as it changes on the thread that changed it, so a question that
        # must tell every partition joins bytes.
        # Kept by hub (namespace, hub, credential), then consumer group, then partition: a question copies its hub's
        # dict instead of selecting from every receiver's while the driver's trigger waits for the answer.
        self._vouches: dict[PoolKey, dict[str, dict[str, Vouched]]] = {}
        self.vouch_version = 0
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
                    self._remove(key)
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
        receiver.on_vouch = lambda: self._revouch(key, receiver)
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
                    self._remove(key)
                    self.stats.invalidations += 1
                    to_close.append(receiver)
                else:
                    self._vouch(key, receiver.newest_end())
            else:
                to_close.append(receiver)  # not pooled (the slot was taken): close it
            to_close.extend(self._evict_over_capacity())
        _close_all(to_close)

    def newest_ends(self, settings: ConnectionSettings) -> dict[str, Vouched]:
        """Each partition of ``settings``' hub that a receiver's link vouches for: (the position after its newest
        event, that event's offset and enqueued time, and its answer row), the furthest where several consumer groups'
        receivers do (:meth:`PartitionReceiver.newest_end`, as the pool keeps it). A receiver in a task's use vouches
        as an idle one does: its link's newest event exists whoever reads it, and its link brings later ones all
        the same (one reopened elsewhere by the task vouches for what the new link brings, behind what the driver knew:
        such a partition is asked of Event Hubs, :mod:`eventhubs_spark.planning.executor_ends`)."""
        with self._lock:  # the lock held for a dict's copy (in C) per consumer group reading the hub
            groups = [dict(by_partition) for by_partition in self._vouches.get(settings.pool_key(), {}).values()]
        if len(groups) <= 1:
            return groups[0] if groups else {}
        out = groups[0]
        for group in groups[1:]:
            for partition, vouch in group.items():
                known = out.get(partition)
                if known is None or vouch[0] > known[0]:
                    out[partition] = vouch
        return out

    def _revouch(self, key: PoolKey, receiver: PartitionReceiver) -> None:
        """``receiver`` (pooled under ``key``) says what its link vouches for may have changed. (Called on any
        thread, a link's reading thread among them, some holding its sink's lock: this takes only the pool's, and
        the pool never waits on a sink while it holds its own.)"""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.receiver is receiver:
                self._vouch(key, receiver.newest_end())

    def _vouch(self, key: PoolKey, found: tuple[int, str, int | None] | None) -> None:
        hub, group, partition = key[:-2], key[-2], key[-1]
        groups = self._vouches.get(hub, {})
        by_partition = groups.get(group, {})
        held = by_partition.get(partition)
        if found is None:
            if held is not None:
                del by_partition[partition]
                if not by_partition:
                    del groups[group]
                    if not groups:
                        del self._vouches[hub]
                self.vouch_version += 1
        elif held is None or held[0] != found[0] or held[1] != found[1] or held[2] != found[2]:
            self._vouches.setdefault(hub, {}).setdefault(group, {})[partition] = vouched(partition, *found)
            self.vouch_version += 1

    def _revouch_all(self) -> None:
        """Every receiver looked at again (reap(), off any question's path): what a change nobody told the pool of
        left behind is right again within a second."""
        with self._lock:
            now = {k: e.receiver.newest_end() for k, e in self._entries.items()}
            held = {(*hub, group, partition) for hub, groups in self._vouches.items()
                    for group, by_partition in groups.items() for partition in by_partition}  # fmt: skip
            for key in held - now.keys():
                self._vouch(key, None)
            for key, found in now.items():
                self._vouch(key, found)  # re-encoded, and the version moved, only where it changed

    def _remove(self, key: PoolKey) -> None:
        del self._entries[key]
        self._vouch(key, None)

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
        """Close the idle receivers past their idle time-out; returns how many. (And what every receiver vouches for
        looked at again: see ``_vouches``.)"""
        with self._lock:
            expired = self._expire(self.clock())
        _close_all(expired)
        self._revouch_all()
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
                self._remove(key)
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
                self._remove(key)
                self.stats.evictions += 1
                out.append(entry.receiver)
        return out

    def close_all(self) -> None:
        with self._lock:
            receivers = [e.receiver for e in self._entries.values()]
            self._entries.clear()
            self._vouches.clear()
            self.vouch_version += 1
        _close_all(receivers)

    def __len__(self) -> int:
        return len(self._entries)


def _close_all(receivers: list[PartitionReceiver]) -> None:
    for receiver in receivers:
        receiver.close()
