"""Ownership mode: several streaming queries (and Event Hubs processors) share one consumer group.

Each query runs the processors' load-balancing cycle (:mod:`eventhubs_spark.checkpoints.balancer`) on a daemon
thread of its long-lived stream runner process, and plans reads only for the partitions it owns.
Spark never calls ``stop()`` (it ends the runner with SIGTERM), so a stopped or crashed query's
partitions are not released: they lapse after ``ownershipExpiration`` and are taken over from the
last checkpoint in the store.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from eventhubs_spark.checkpoints import Checkpoint, CheckpointStore
from eventhubs_spark.checkpoints.balancer import BalancerConfig, OwnershipManager, Tenure
from eventhubs_spark.positions import geo_segments
from eventhubs_spark.positions.event_positions import Offset, Position, SequenceNumber
from eventhubs_spark.positions.partition_catalog import PartitionInfo

_LOG = logging.getLogger(__name__)


def default_owner_id() -> str:
    import socket

    return f"spark-{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


class QueryOwnership:
    """The ownership cycle of one query, renewed on a daemon thread between (and during) batches.

    Handing a partition over between two live queries is exactly once, which plain processors are not:

    1. The thief steals the partition but does not read it yet (its :class:`Tenure` names the victim).
    2. The victim stops planning the partition at its next trigger. Every batch that read it has then
       completed (Spark plans one batch at a time), so it writes that position as the partition's
       checkpoint with a ``releasedby`` marker naming itself.
    3. The thief starts just after the marked checkpoint. A victim that never writes one (crashed, or an
       SDK processor) is waited for until the ownership expiration has passed since the steal.

    An unowned partition keeps no position in the query's offsets; a partition gained begins with an
    empty range ending at its start, so a re-run batch reads exactly what it read the first time.
    """

    def __init__(
        self,
        store: CheckpointStore,
        namespace: str,
        hub: str,
        consumer_group: str,
        owner_id: str,
        partition_ids: Callable[[], Sequence[str]],
        config: BalancerConfig,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.owner_id = owner_id
        self.config = config
        self.manager = OwnershipManager(
            store, namespace, hub, consumer_group, owner_id, partition_ids, config, clock=clock
        )
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tenures: dict[str, Tenure] = {}
        self._renewed_at: float | None = None  # monotonic time of the last successful cycle
        self._last_error: str | None = None

    def _cycle(self) -> float:
        try:
            result = self.manager.cycle()
        except Exception as exc:
            self._last_error = f"{type(exc).__name__}: {exc}"
            _LOG.warning("owner %s: ownership cycle failed (retrying): %s", self.owner_id, self._last_error)
            return min(self.config.interval, 5.0)
        with self._lock:
            before = set(self._tenures)
            self._tenures = dict(self.manager.tenures)
            self._renewed_at = time.monotonic()
            after = set(self._tenures)
        if before != after:
            _LOG.info(
                "owner %s owns %d partition(s) %s (gained %s, lost %s; balanced=%s)",
                self.owner_id,
                len(after),
                sorted(after, key=int),
                sorted(after - before, key=int),
                sorted(before - after, key=int),
                result.balanced,
            )
        return result.next_delay

    def _run(self) -> None:
        while not self._stop.is_set():
            delay = self._cycle()
            if delay > 0:
                self._stop.wait(delay)

    def tenures(self) -> dict[str, Tenure]:
        """The partitions this query may read now. Runs the first cycle itself, then starts the thread.

        When the store has not been reachable for longer than the expiry, others may have taken the
        partitions, so none is reported as owned until a cycle succeeds again.
        """
        if self._thread is None:
            self._cycle()
            self._thread = threading.Thread(target=self._run, name=f"eventhubs-ownership-{self.owner_id}", daemon=True)
            self._thread.start()
        with self._lock:
            if self._renewed_at is None or time.monotonic() - self._renewed_at > self.config.expiry:
                if self._tenures or self._renewed_at is None:
                    _LOG.warning("owner %s: cannot renew ownership (%s); reading no partitions until it can",
                                 self.owner_id, self._last_error)  # fmt: skip
                return {}
            return dict(self._tenures)

    def stop(self) -> None:
        self._stop.set()


def takeover_start(
    tenure: Tenure, checkpoint: Checkpoint | None, configured: Position, now: float, expiry: float
) -> Position | None:
    """Where a partition just gained starts, or None while a live previous owner may still read it."""
    if tenure.taken_from is not None:
        handed_over = (
            checkpoint is not None
            and checkpoint.released_by == tenure.taken_from
            and checkpoint.last_modified_time is not None
            and checkpoint.last_modified_time >= tenure.since
        )
        if not handed_over and now - tenure.since < expiry:
            return None
    return checkpoint_position(checkpoint, configured)


def checkpoint_position(checkpoint: Checkpoint | None, configured: Position) -> Position:
    """Just after a checkpoint's event (by sequence number, else offset), or ``configured`` without one. On a
    geo-replicated hub the offset (``"<segment>:<offset>"``) says which replication segment the sequence
    number is in: after a promotion that lost events, the same number names another event."""
    if checkpoint is not None and checkpoint.sequence_number is not None:
        segment = geo_segments.of_offset(checkpoint.offset)
        return SequenceNumber(geo_segments.pack(segment, checkpoint.sequence_number + 1))  # the event after it
    if checkpoint is not None and checkpoint.offset is not None:
        return Offset(str(checkpoint.offset), inclusive=False)  # the event after it
    return configured


class OwnedPartitions:
    """Which partitions one query reads, trigger by trigger, in ownership mode: the stream reader asks
    :meth:`plan` and reads what it answers.

    Partitions no longer owned are handed over at their completed positions (the mirror writes the
    marked checkpoint); a partition gained starts after the store's checkpoint, once its previous owner
    has handed it over or its ownership has expired.
    """

    def __init__(
        self,
        ownership: QueryOwnership,
        mirror: Any,
        configured_starts: Callable[[Mapping[str, PartitionInfo]], dict[str, Position]],
        resolve: Callable[[dict[str, PartitionInfo], dict[str, Position]], dict[str, int]],
        hub: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ownership = ownership
        self.mirror = mirror  # checkpoints.mirror.CheckpointMirror: release() and checkpoints()
        self.configured_starts = configured_starts  # eventhubs.startingPosition(s) per partition
        self.resolve = resolve  # positions to sequence numbers
        self.hub = hub
        self.clock = clock
        self.owner: str | None = None  # this query's owner id, once its cycle has been asked
        self._tenures: dict[str, Tenure] = {}  # the tenure each planned partition was read under
        self._handover: dict[str, int] = {}  # partitions lost whose hand-over is not written yet
        self._waiting: dict[str, Tenure] = {}  # partitions gained, waiting for their hand-over

    def owned(self) -> frozenset[str]:
        """The partitions planned under the current ownership."""
        return frozenset(self._tenures)

    def plan(self, begin: dict[str, int], infos: dict[str, PartitionInfo]) -> tuple[dict[str, int], dict[str, int]]:
        """(positions of owned partitions read on from ``begin``, starts of partitions gained)."""
        tenures = self.ownership.tenures()
        self.owner = self.ownership.owner_id
        keep: dict[str, int] = {}
        for pid, n in begin.items():
            tenure = tenures.get(pid)
            planned = self._tenures.get(pid)
            if tenure is None:
                self._handover[pid] = n
            elif (planned is None and tenure.resumed) or (planned is not None and planned == tenure):
                keep[pid] = n
            # else: owned again after someone else held it, so its position is stale: start over below
        if self._handover and self.mirror.release(self._handover, infos, self.owner):
            self._handover = {}
        gained = [pid for pid in tenures if pid not in keep and pid in infos]
        fresh: dict[str, int] = {}
        if gained:
            checkpoints = self.mirror.checkpoints()
            configured = self.configured_starts(infos)
            expiry, now = self.ownership.config.expiry, self.clock()
            starts = {}
            for pid in gained:
                pos = takeover_start(tenures[pid], checkpoints.get(pid), configured[pid], now, expiry)
                if pos is None:
                    if self._waiting.get(pid) != tenures[pid]:
                        self._waiting[pid] = tenures[pid]
                        _LOG.info("hub %s partition %s: waiting for %s to hand it over", self.hub, pid,
                                  tenures[pid].taken_from)  # fmt: skip
                else:
                    starts[pid] = pos
            fresh = self.resolve({p: infos[p] for p in starts}, starts) if starts else {}
            if fresh:
                _LOG.info("hub %s: took over partitions %s starting at %s", self.hub, sorted(fresh, key=int), fresh)
        self._tenures = {pid: tenures[pid] for pid in (*keep, *fresh)}
        return keep, fresh
