"""The checkpoint store every Event Hubs SDK shares: records, the store interface, an in-memory store.

A checkpoint names the **last processed event** of a partition (its sequence number and offset);
processors resume just after it. An ownership says which processor (``owner_id``) reads a partition;
an empty owner means released, and an ownership older than the expiry is treated as unowned.

The blob store (:mod:`eventhubs_spark.checkpoints.blob`) writes the layout .NET, Java and Python processors use, so
they and this connector read each other's progress; :class:`InMemoryCheckpointStore` has the same semantics, etags
included, for tests and local runs.
"""

from __future__ import annotations

import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Checkpoint:
    fully_qualified_namespace: str
    eventhub_name: str
    consumer_group: str
    partition_id: str
    sequence_number: int | None
    offset: str | None = None
    # Not part of the shared layout; other SDKs ignore the extra metadata and drop it when they write.
    # ``released_by`` marks the final checkpoint an owner wrote when it handed the partition over (see
    # :mod:`eventhubs_spark.checkpoints.query_ownership`); ``last_modified_time`` is the store's clock, as for
    # ownership.
    released_by: str | None = None
    last_modified_time: float | None = None


@dataclass(frozen=True)
class Ownership:
    fully_qualified_namespace: str
    eventhub_name: str
    consumer_group: str
    partition_id: str
    owner_id: str
    last_modified_time: float | None = None  # seconds since the epoch, as the store reports it
    etag: str | None = None

    @property
    def released(self) -> bool:
        return not self.owner_id


def blob_prefix(namespace: str, hub: str, consumer_group: str, kind: str) -> str:
    """``<namespace>/<hub>/<consumer group>/<kind>/``, lower-cased as every SDK writes it."""
    return f"{namespace}/{hub}/{consumer_group}/{kind}/".lower()


class CheckpointStore(ABC):
    """The four operations every Event Hubs SDK's checkpoint store has."""

    @abstractmethod
    def list_ownership(self, namespace: str, hub: str, consumer_group: str) -> list[Ownership]: ...

    @abstractmethod
    def claim_ownership(self, ownerships: Iterable[Ownership]) -> list[Ownership]:
        """Claim each ownership conditionally on its etag (or on its absence when it has none).

        Returns the claims won, with their new etag and modification time; a claim someone else
        changed in the meantime is left out.
        """

    @abstractmethod
    def list_checkpoints(self, namespace: str, hub: str, consumer_group: str) -> list[Checkpoint]: ...

    @abstractmethod
    def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Unconditional: the last writer wins."""

    def update_checkpoints(self, checkpoints: Iterable[Checkpoint]) -> None:
        for checkpoint in checkpoints:
            self.update_checkpoint(checkpoint)


class InMemoryCheckpointStore(CheckpointStore):
    """The blob store's semantics in memory: etags change on every write; claims are conditional."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._ownerships: dict[tuple[str, str, str, str], Ownership] = {}
        self._checkpoints: dict[tuple[str, str, str, str], Checkpoint] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(namespace: str, hub: str, group: str, partition: str) -> tuple[str, str, str, str]:
        return (namespace.lower(), hub.lower(), group.lower(), partition)

    def list_ownership(self, namespace: str, hub: str, consumer_group: str) -> list[Ownership]:
        prefix = self._key(namespace, hub, consumer_group, "")[:3]
        with self._lock:
            return sorted((o for k, o in self._ownerships.items() if k[:3] == prefix), key=lambda o: o.partition_id)

    def claim_ownership(self, ownerships: Iterable[Ownership]) -> list[Ownership]:
        won = []
        with self._lock:
            now = float(int(self.clock()))  # whole seconds, as blob Last-Modified
            for o in ownerships:
                key = self._key(o.fully_qualified_namespace, o.eventhub_name, o.consumer_group, o.partition_id)
                current = self._ownerships.get(key)
                if (current is None and o.etag is None) or (current is not None and current.etag == o.etag):
                    claimed = replace(o, last_modified_time=now, etag=uuid.uuid4().hex)
                    self._ownerships[key] = claimed
                    won.append(claimed)
        return won

    def list_checkpoints(self, namespace: str, hub: str, consumer_group: str) -> list[Checkpoint]:
        prefix = self._key(namespace, hub, consumer_group, "")[:3]
        with self._lock:
            return sorted((c for k, c in self._checkpoints.items() if k[:3] == prefix), key=lambda c: c.partition_id)

    def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        key = self._key(
            checkpoint.fully_qualified_namespace, checkpoint.eventhub_name, checkpoint.consumer_group,
            checkpoint.partition_id,
        )  # fmt: skip
        with self._lock:
            self._checkpoints[key] = replace(checkpoint, last_modified_time=float(int(self.clock())))
