"""Ownership mode: several streaming queries (and Event Hubs processors) share one consumer group.

Each query runs the processors' load-balancing cycle (:mod:`.checkpoints.balancer`) on a daemon
thread of its long-lived stream runner process, and plans reads only for the partitions it owns.
Spark never calls ``stop()`` (it ends the runner with SIGTERM), so a stopped or crashed query's
partitions are not released: they lapse after ``ownershipExpiration`` and are taken over from the
last checkpoint in the store.

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

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence

from .checkpoints import Checkpoint, CheckpointStore
from .checkpoints.balancer import BalancerConfig, OwnershipManager, Tenure
from .positions import Offset, Position, SequenceNumber

_LOG = logging.getLogger("eventhubs_spark")


def default_owner_id() -> str:
    import socket

    return f"spark-{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


class QueryOwnership:
    """The ownership cycle of one query, renewed on a daemon thread between (and during) batches."""

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
    """Just after a checkpoint's event (by sequence number, else offset), or ``configured`` without one."""
    if checkpoint is not None and checkpoint.sequence_number is not None:
        return SequenceNumber(checkpoint.sequence_number + 1)  # the event after it
    if checkpoint is not None and checkpoint.offset is not None:
        return Offset(str(checkpoint.offset), inclusive=False)  # the event after it
    return configured
