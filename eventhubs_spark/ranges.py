"""A task's range and its receiver's settings: plain data the driver plans and an executor reads.

The driver builds these (one :class:`RangeRequest` per input partition, with its
:class:`ReceiverConfig`), the checkpoint mirror and the position lookups read the same config, and
they travel to executors inside input partitions and across the receiver service's socket
(:mod:`eventhubs_spark.executor.protocol`), so they live outside ``executor/``: nothing here opens a
link or holds a client.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import defaults
from .auth.settings import ConnectionSettings


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
