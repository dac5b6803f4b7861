"""The sink's producers in one process: a few AMQP connections per namespace, a link per partition on them.

The SDK's producer client opens a connection per partition it sends to, so a Python worker writing to a
1,024-partition hub held 1,028 sockets, and a namespace's connection quota refuses such a sink long before
that. Here a :class:`SharedProducer` keeps ``lanes`` SDK clients (default 4), each with every one of its
links on one connection (:class:`~eventhubs_spark.amqp.sdk.SendConnection`), as the other SDKs send to every
partition over one connection. A partition (or a partition key) always goes to the same lane, so its
batches stay in order; lanes send concurrently; one thread at a time uses a lane (the SDK's synchronous
connection is read by the thread that sends on it).
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

from eventhubs_spark.amqp import conditions, sdk
from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.defaults import PARTITION_DISCOVERY_INTERVAL

_LOG = logging.getLogger(__name__)

LANES = 4  # connections per process and namespace (and hub, credential, network) for the sink
# Refusals that concern one send or link, not the connection (the service answered): the lane keeps its connection.
_LINK_ONLY = (conditions.SERVER_BUSY, conditions.TOO_LARGE, conditions.DETACH_FORCED)


class _Lane:
    __slots__ = ("client", "lock", "shared")

    def __init__(self, settings: ConnectionSettings) -> None:
        self.lock = threading.Lock()
        self.renew(settings)

    def renew(self, settings: ConnectionSettings) -> None:
        """A new SDK client and connection manager (the caller closes the old client)."""
        # No retries inside the SDK: sends and partition lookups are retried by the sink itself, under
        # eventhubs.operationTimeout, and a refused sign-in fails at once (the SDK would retry ~13 s).
        self.client = settings.producer(retry_total=0)
        self.shared = sdk.share_send_connection(self.client)


class SharedProducer:
    """A process's producer for one (namespace, hub, credential, network): ``lanes`` connections, a link per
    partition; safe to use from several threads."""

    def __init__(
        self, settings: ConnectionSettings, lanes: int = LANES, lookup: Callable[[float], list[str]] | None = None
    ) -> None:
        """``lookup(timeout)``: the hub's partition ids, over the process's kept management connection (the
        lanes' SDK clients are told them: see :meth:`send`); None: each client asks the hub itself, as the SDK
        does."""
        if lanes < 1:
            raise ValueError(f"lanes must be at least 1, got {lanes}")
        self.settings = settings
        self._lookup = lookup
        # no connection until a lane is used; partition lookups are the process's management client's (never a
        # lane's: a lane's connection may be black-holed, and a lookup on it would wait with no time-out)
        self._lanes = [_Lane(settings) for _ in range(lanes)]
        self._ids: tuple[float, list[str]] | None = None  # (when looked up, the hub's partition ids)
        self._ids_lock = threading.Lock()

    def _lane(self, partition_id: str | None, key: str | None) -> _Lane:
        if partition_id:
            index = int(partition_id) if partition_id.isdigit() else zlib.crc32(partition_id.encode("utf-8"))
        elif key is not None:
            index = zlib.crc32(key.encode("utf-8"))
        else:
            index = 0
        return self._lanes[index % len(self._lanes)]

    def partition_ids(self, lookup: Callable[[], list[str]] | None = None, timeout: float = 60.0) -> list[str]:
        """The hub's partition ids: ``lookup()`` (default: the producer's own lookup, given ``timeout``; the process's
        management client) at most once every :data:`~eventhubs_spark.defaults.PARTITION_DISCOVERY_INTERVAL` seconds
        per producer, not once per task: a kept management connection that fell into a black hole would hold up every
        task's first send until its attempt timed out, where a task with the ids at hand sends, times out on the lane
        in the connection idle time, and goes on over a new connection. A partition added meanwhile is written from
        the next look."""
        if lookup is None:
            own = self._lookup
            if own is None:
                raise ValueError("a SharedProducer made without a lookup needs one to list the hub's partitions")
            lookup = lambda: own(timeout)  # noqa: E731
        with self._ids_lock:
            now = time.monotonic()
            if self._ids is None or now - self._ids[0] >= PARTITION_DISCOVERY_INTERVAL:
                self._ids = (now, list(lookup()))
            return list(self._ids[1])

    def create_batch(
        self, partition_id: str | None = None, partition_key: str | None = None, timeout: float = 60.0
    ) -> Any:
        """An empty ``EventDataBatch`` for a partition, a key, or neither (the service's choice); a lane's first
        opens its connection, giving up after ``timeout``."""
        lane = self._lane(partition_id, partition_key)
        with lane.lock, sdk.opening_bound(self.settings.network.idle_timeout):
            try:
                return sdk.create_batch(
                    lane.client, lane.shared, timeout=timeout, partition_id=partition_id, partition_key=partition_key
                )
            except Exception as exc:
                # The first batch of a lane opens its connection (and signs in) to learn the hub's maximum
                # message size: a connection that falls into a black hole then fails it ("Authorization
                # timeout"), and the next attempt must not find the same dead connection.
                self._renew_unless_link_only(lane, exc)
                raise

    def send(self, batch: Any, timeout: float) -> None:
        """Send a batch made by :meth:`create_batch` once, on its partition's (or key's) lane."""
        lane = self._lane(batch._partition_id, batch._partition_key)
        try:
            self._tell_partitions(lane, batch._partition_id, timeout)
        except Exception as exc:
            sdk.mark_unsent(exc)  # a lookup before the send: nothing of it went out
            raise
        with lane.lock, sdk.opening_bound(self.settings.network.idle_timeout):
            try:
                sdk.send_once(lane.client, batch, timeout, lane.shared)
            except Exception as exc:
                self._renew_unless_link_only(lane, exc)
                raise

    def _tell_partitions(self, lane: _Lane, partition_id: str | None, timeout: float) -> None:
        """Before a lane's client starts a producer, tell it the hub's partitions (a partition it does not know yet,
        after a discovery interval): it would otherwise ask the hub over a management connection of its own, once
        per client (0.36 s a lane on the emulator, with that connection's opening); this process keeps one. A
        partition still unknown is left to the SDK, which says it is not the hub's."""
        if self._lookup is None or sdk.knows_partition(lane.client, partition_id):
            return
        ids = self.partition_ids(timeout=timeout)
        with lane.lock:
            sdk.know_partitions(lane.client, ids)

    def _renew_unless_link_only(self, lane: _Lane, exc: BaseException) -> None:
        """After a failure on ``lane`` (its lock held): a new client and connection, unless the service refused
        one send or link only. The SDK's own producers open a new connection after any failure; here every link
        of the lane shares one, which may be dead without saying so (a black hole): the lane starts over."""
        if conditions.condition(exc) not in _LINK_ONLY:
            old = lane.client
            lane.renew(self.settings)
            _close(old)

    def connections(self) -> int:
        """Connections open now (for tests and benchmarks)."""
        return sum(1 for lane in self._lanes if lane.shared.live() is not None)

    def close(self) -> None:
        """Close every lane's links and connection (without waiting for a send in progress: it fails, and the
        sink retries on a new producer)."""
        for lane in self._lanes:
            _close(lane.client)


def _close(client: Any) -> None:
    try:
        client.close()
    except Exception:
        _LOG.debug("closing a producer failed", exc_info=True)
