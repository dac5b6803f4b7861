"""A query's progress in the blob checkpoint store: the mirror, and the hand-over of partitions.

Spark's checkpoint is the query's truth; the store mirrors it for monitoring, for SDK processors and for a query
restarted without one. A checkpoint names the last event processed, with that event's own offset.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from eventhubs_spark.auth.credentials import EntraSettings
from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.checkpoints import Checkpoint
from eventhubs_spark.interprocess.task_ranges import ReceiverConfig
from eventhubs_spark.positions import geo_segments
from eventhubs_spark.positions.partition_catalog import PartitionInfo

if TYPE_CHECKING:
    from eventhubs_spark.options import StoreOptions

_LOG = logging.getLogger(__name__)
_KNOWN_PER_PARTITION = 256


class CheckpointMirror:
    """Writes completed progress and hand-overs for one query; reads the store's checkpoints."""

    def __init__(self, store: StoreOptions | None, settings: ConnectionSettings, config: ReceiverConfig) -> None:
        self.store_options = store
        self.settings = settings
        self.config = config
        self._store: Any = None
        self._mirrored: dict[str, int] = {}
        # Offsets seen in partition properties and in what the tasks told of the last event of each range they
        # read, by partition and sequence number: a checkpoint whose event is among them needs no lookup on the hub.
        self._known_offsets: dict[str, OrderedDict[int, str]] = {}
        self._offsets_lock = threading.Lock()  # the tasks' reports come in on the driver channel's threads
        self._failing: str | None = None  # the store's failure as last said, while it lasts
        self._failures = 0
        self._writer: ThreadPoolExecutor | None = None  # writes that overlap a batch (mirror(..., background))
        self._pending: Future[None] | None = None  # the one such write in flight
        self._in_flight: dict[str, int] = {}  # and what it writes

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_offsets_lock"]  # the reader travels to Spark's workers (a lock does not pickle)
        state["_writer"] = state["_pending"] = None  # nor do a thread and its work
        state["_in_flight"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._offsets_lock = threading.Lock()

    @property
    def configured(self) -> bool:
        return self.store_options is not None

    def store(self) -> Any:
        """The configured blob checkpoint store (built once, in this process), or None."""
        options = self.store_options
        if self._store is None and options is not None:
            from eventhubs_spark.checkpoints.blob import BlobCheckpointStore

            network = self.settings.network.http_kwargs()  # the hub's proxy and CA bundle
            if options.account_url:
                # Without a SAS token the store signs in with the same Entra identity as the hub
                # (or DefaultAzureCredential), built here, in this process.
                sas = options.sas_token
                entra = self.settings.entra or EntraSettings()
                credential = sas.reveal() if sas else entra.credential(self.settings.network)
                store = BlobCheckpointStore.from_account_url(
                    options.account_url, options.container, credential, **network
                )
            else:
                assert options.connection_string is not None  # one of the two (checked with the options)
                store = BlobCheckpointStore.from_connection_string(
                    options.connection_string.reveal(), options.container, **network
                )
            store.ensure_container()
            self._store = store
        return self._store

    def checkpoints(self) -> dict[str, Any]:
        """The store's checkpoints of this hub and consumer group, by partition."""
        self.settle()
        listed = self.store().list_checkpoints(self.settings.namespace, self.settings.hub, self.config.consumer_group)
        return {c.partition_id: c for c in listed}

    def note(self, infos: Mapping[str, PartitionInfo]) -> None:
        """Remember each partition's last event and its offset, from fresh partition properties (only where
        progress is mirrored: nothing else asks; a partition's last event already known is passed over)."""
        if not self.configured:
            return
        with self._offsets_lock:  # once a trigger, not once a partition (1,024 of them on a big hub)
            for pid, info in infos.items():
                if not info.is_empty and info.last_enqueued_offset is not None:
                    self._remember(pid, info.last_enqueued_sequence_number, str(info.last_enqueued_offset))

    def note_read(self, partition: str, position: int, offset: str) -> None:
        """A task read a range of ``partition`` whose last event, at ``position``, has ``offset``: where the next
        batch starts, so the checkpoint the next trigger mirrors names that event. Without it a rate-limited
        stream's batch, which ends inside the partition rather than at its last event, made every trigger look
        each partition's checkpoint event up on the hub (an SDK receiver a partition: 59-90 ms a trigger at 4
        partitions, 18 attaches a partition over 10 batches; at 1,024 partitions, 1,024 connections a trigger)."""
        if self.configured:
            with self._offsets_lock:
                self._remember(partition, position, offset)

    def _remember(self, pid: str, position: int, offset: str) -> None:
        """Keep ``position``'s offset among the partition's last few (the caller holds ``_offsets_lock``)."""
        known = self._known_offsets.get(pid)
        if known is None:
            known = self._known_offsets[pid] = OrderedDict()
        if position in known:
            return
        known[position] = offset
        while len(known) > _KNOWN_PER_PARTITION:
            known.popitem(last=False)

    def mirror(self, positions: Mapping[str, int], infos: Mapping[str, PartitionInfo],
               background: bool = False) -> None:  # fmt: skip
        """Write completed progress; a failure is logged and caught up at the next call.

        ``background``: a batch follows (the stream reader's trigger planned one), so the write may overlap it
        instead of holding up the trigger: at 1,024 partitions a trigger's writes (a blob a partition, as every
        SDK keeps them) took 2.2 s of latestOffset on Azurite, twice the issue's bound. The next call waits for it
        first (:meth:`settle`), so there is never more than one write in flight and they land in order. A trigger
        with no batch after it writes before it returns: Spark ends the stream runner with SIGTERM, never
        ``stop()``, and a Trigger.AvailableNow run's last progress is written by its last trigger, which plans
        nothing."""
        if not self.configured:
            return
        flying, pending = self._in_flight, self._pending
        if (
            background
            and pending is not None
            and not pending.done()
            and all(n <= 0 or flying.get(p, self._mirrored.get(p)) == n for p, n in positions.items())
        ):
            return  # the write in flight has them (Spark's commit(end) of the batch the trigger mirrored)
        self.settle()
        todo = {p: n for p, n in positions.items() if n > 0 and self._mirrored.get(p) != n}
        if not todo:
            return
        if not background:
            self._mirror_now(todo, infos)
            return
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="eventhubs-mirror")
        self._in_flight = todo
        self._pending = self._writer.submit(self._mirror_now, todo, dict(infos))

    def settle(self, timeout: float | None = None) -> bool:
        """Wait for the write in flight, if any (its failure was logged by the write itself), at most ``timeout``
        seconds (None: as long as it takes); False when it is still on its way then."""
        pending = self._pending
        if pending is None:
            return True
        try:
            pending.result(timeout)
        except TimeoutError:  # (concurrent.futures raises the builtin one since 3.11)
            return False
        if self._pending is pending:
            self._pending = None
            self._in_flight = {}
        return True

    def _mirror_now(self, todo: dict[str, int], infos: Mapping[str, PartitionInfo]) -> None:
        try:
            self._write(todo, infos, None)
        except Exception as exc:  # the Spark checkpoint stays the source of truth; the mirror catches up
            self._failed(exc, "could not mirror progress to the checkpoint store (retried at every commit)")
            return
        if self._failing is not None:
            _LOG.warning("hub %s: the checkpoint store takes progress again (%d commits were not mirrored)",
                         self.settings.hub, self._failures)  # fmt: skip
            self._failing, self._failures = None, 0
        _LOG.info("hub %s: mirrored checkpoints %s to the checkpoint store", self.settings.hub,
                  {p: n - 1 for p, n in todo.items()})  # fmt: skip

    def _failed(self, exc: BaseException, what: str) -> None:
        """Say a store failure in one line, once while it stays the same (the next ones at debug level)."""
        from eventhubs_spark.checkpoints.blob import describe_store_error

        container = self.store_options.container if self.store_options is not None else None
        said = describe_store_error(exc, container)
        self._failures += 1
        if said == self._failing:
            _LOG.debug("hub %s: %s (again, %d times): %s", self.settings.hub, what, self._failures, said)
            return
        self._failing = said
        _LOG.warning("hub %s: %s: %s", self.settings.hub, what, said)

    def release(self, positions: Mapping[str, int], infos: Mapping[str, PartitionInfo], owner: str) -> bool:
        """Hand partitions over: their final checkpoints, marked as released by ``owner``."""
        self.settle()  # a write in flight must not land after the hand-over's
        try:
            self._write(dict(positions), infos, owner)
        except Exception as exc:
            self._failed(exc, f"could not hand over partitions {sorted(positions, key=int)} (retried at the next "
                              "trigger)")  # fmt: skip
            return False
        _LOG.info("hub %s: handed over partitions %s at checkpoints %s", self.settings.hub,
                  sorted(positions, key=int), {p: n - 1 for p, n in positions.items()})  # fmt: skip
        return True

    def _write(self, todo: dict[str, int], infos: Mapping[str, PartitionInfo], released: str | None) -> None:
        store = self.store()
        with ThreadPoolExecutor(max_workers=min(16, len(todo))) as pool:
            found = list(pool.map(lambda item: self._checkpoint(item[0], item[1], infos, released), todo.items()))
        checkpoints = [c for c in found if c is not None]
        store.update_checkpoints(checkpoints)
        self._mirrored.update({c.partition_id: todo[c.partition_id] for c in checkpoints})

    def _checkpoint(self, pid: str, nxt: int, infos: Mapping[str, PartitionInfo], released_by: str | None) -> Any:
        """The checkpoint for a partition whose next event is ``nxt``: it names event ``nxt - 1``, by its
        sequence number (without its replication segment, as every SDK writes it) and its offset (which on a
        geo-replicated hub carries the segment). None when that event cannot be found (it expired, or a
        new replication segment begins at ``nxt``): the store keeps its older checkpoint until the next
        commit, which re-reads a little and loses nothing."""
        from eventhubs_spark.planning.position_lookup import offset_of

        info = infos.get(pid)
        with self._offsets_lock:
            offsets = self._known_offsets.get(pid)
            known = offsets.get(nxt - 1) if offsets is not None else None
        if nxt <= 0:  # nothing read yet: .NET and Java resume after -1, i.e. from the first event
            offset = None
        elif info is not None and info.end == nxt:
            offset = info.last_enqueued_offset
        elif known is not None:
            offset = known
        else:
            # Read from the hub: an owner-level lookup between micro-batches, which displaces the idle
            # executor receiver of this partition (it reopens at its position; see executor.partition_receiver).
            offset = offset_of(self.settings, self.config, pid, nxt - 1, self.config.receiver_timeout)
            if offset is None:
                _LOG.info("hub %s: partition %s: no event at %s to checkpoint (expired, or a replication segment "
                          "begins after it); the checkpoint store keeps the one before", self.settings.hub, pid,
                          geo_segments.show(nxt - 1))  # fmt: skip
                return None
        ns, hub, group = self.settings.namespace, self.settings.hub, self.config.consumer_group
        return Checkpoint(ns, hub, group, pid, geo_segments.seq_of(nxt - 1), offset, released_by=released_by)
