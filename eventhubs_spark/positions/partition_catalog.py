"""What planning knows of a hub's partitions, and the small interface it asks through.

The readers plan from partition properties (where each partition begins and ends) and the list of
partition ids; they never talk to the AMQP management link themselves. :class:`PartitionMetadata`
is all they need, :class:`~eventhubs_spark.amqp.management.ManagementClient` provides it over one
kept-open connection, and a test can hand them a table instead. :class:`PartitionCatalog` keeps the
list of ids between triggers and looks for added partitions now and then.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionInfo:
    """A partition's properties; ``end`` is the next sequence number the partition will assign. On a
    geo-replicated hub the sequence numbers here are positions with their replication segment
    (:mod:`eventhubs_spark.positions.geo_segments`); elsewhere positions are sequence numbers."""

    id: str
    beginning_sequence_number: int
    last_enqueued_sequence_number: int
    last_enqueued_offset: str
    last_enqueued_time: dt.datetime | None
    is_empty: bool

    @property
    def end(self) -> int:
        return self.last_enqueued_sequence_number + 1


_new = object.__new__
_set = object.__setattr__


def quick_info(
    pid: str, beginning: int, last: int, offset: str, when: dt.datetime | None, empty: bool
) -> PartitionInfo:
    """``PartitionInfo(pid, beginning, last, offset, when, empty)``, made in a third of the time: a frozen
    dataclass's constructor sets each field through a guarded call, and a running stream's trigger on a busy
    1,024-partition hub makes one for every partition that moved (its executors' vouched ends). Equal to the one
    the constructor makes (a test says so)."""
    info = _new(PartitionInfo)
    _set(info, "__dict__", {"id": pid, "beginning_sequence_number": beginning, "last_enqueued_sequence_number": last,
                            "last_enqueued_offset": offset, "last_enqueued_time": when, "is_empty": empty})  # fmt: skip
    return info


def by_number(partition: str) -> tuple[int, str]:
    """Sort key for partition ids: by number (the service's ids are "0", "1", ...), anything else after."""
    return (int(partition), partition) if partition.isdigit() else (1 << 62, partition)


class PartitionMetadata(Protocol):
    """Where planning learns a hub's partitions and their properties."""

    def partition_ids(self) -> list[str]:
        """The hub's partition ids."""
        ...

    def partition_properties(self, partition_ids: list[str]) -> dict[str, PartitionInfo]:
        """Fresh properties of these partitions (asked all at once)."""
        ...


class PartitionCatalog:
    """A hub's partition ids, listed once and again every ``refresh`` seconds when asked to, and fresh
    properties of all of them on every call (what each trigger plans from).

    ``metadata`` is called for the source each time: the readers that hold a catalog are pickled
    between Spark's processes, and a live client must not travel with them.
    """

    def __init__(
        self, hub: str, metadata: Callable[[], PartitionMetadata], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.hub = hub
        self.metadata = metadata
        self.clock = clock
        self._ids: list[str] | None = None
        self._listed_at = 0.0
        self._listing: Future[list[str]] | None = None  # a listing on its way (see listed)

    @property
    def ids(self) -> list[str]:
        """The ids listed last (empty before the first listing)."""
        return list(self._ids or [])

    def infos(self, refresh_ids_after: float | None = None) -> dict[str, PartitionInfo]:
        """Properties of every partition; the ids are listed again when ``refresh_ids_after`` seconds have
        passed since the last listing (None: listed once, for a batch read)."""
        return self.properties(self.listed(refresh_ids_after))

    def properties(self, partition_ids: list[str]) -> dict[str, PartitionInfo]:
        """Fresh properties of these partitions (a running stream asks only those its executors do not vouch
        for: :mod:`eventhubs_spark.planning.executor_ends`)."""
        return self.metadata().partition_properties(partition_ids)

    def listed(self, refresh_ids_after: float | None = None, background: bool = False) -> list[str]:
        """The partition ids, listed again when ``refresh_ids_after`` seconds have passed (as :meth:`infos`).

        ``background``: a listing after the first runs on a thread of its own, and the call that finds it done
        takes its ids; meanwhile calls get the ids listed before. A running stream's trigger whose executors vouch
        for every partition's end asks Event Hubs nothing else, and the listing (one request, a management round
        trip: 8-10 ms of such a trigger at 1,024 partitions on the bench, once a minute) was then most of it; an
        added partition is read a trigger later. A listing that fails there is logged, and tried again when the
        interval has passed again (the partitions already listed are read meanwhile)."""
        now = self.clock()
        running = self._listing
        if running is not None and running.done():
            self._listing = None
            try:
                self._take(running.result())
            except Exception as exc:  # the planning thread's next due listing tries again
                _LOG.warning("hub %s: listing its partitions again failed (%s: %s); the %d listed before are read, "
                             "and they are listed again in %g s", self.hub, type(exc).__name__, str(exc)[:300],
                             len(self._ids or ()), refresh_ids_after or 0)  # fmt: skip
        if self._ids is None or (refresh_ids_after is not None and now - self._listed_at >= refresh_ids_after):
            self._listed_at = now
            if background and self._ids is not None:
                if self._listing is None:
                    self._listing = self._list_in_background()
            else:
                self._take(self.metadata().partition_ids())
        assert self._ids is not None
        return self._ids

    def _take(self, ids: list[str]) -> None:
        if self._ids is not None and len(ids) > len(self._ids):
            added = sorted(set(ids) - set(self._ids), key=int)
            _LOG.info("hub %s: %d new partition(s) %s", self.hub, len(added), added)
        self._ids = ids

    def _list_in_background(self) -> Future[list[str]]:
        future: Future[list[str]] = Future()
        metadata = self.metadata()  # here: the source's client, made on this thread

        def run() -> None:
            try:
                future.set_result(metadata.partition_ids())
            except BaseException as exc:  # taken by the planning thread's next call
                future.set_exception(exc)

        threading.Thread(target=run, name=f"eventhubs-list-{self.hub}", daemon=True).start()
        return future

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_listing"] = None  # a thread's answer does not travel (the next due call lists again)
        return state
