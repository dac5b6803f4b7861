"""A task's range and its receiver's settings: plain data the driver plans and an executor reads.

The driver builds these (one :class:`RangeRequest` per input partition, with its
:class:`ReceiverConfig`), the checkpoint mirror and the position lookups read the same config, and
they travel to executors inside input partitions and across the receiver service's socket
(:mod:`eventhubs_spark.interprocess.service_protocol`), so they live outside ``executor/``: nothing here opens a
link or holds a client.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import threading
from dataclasses import dataclass
from typing import Any

from eventhubs_spark import defaults
from eventhubs_spark.auth.secret import Secret
from eventhubs_spark.auth.settings import ConnectionSettings


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


@dataclass(frozen=True)
class QueryKey:
    """A streaming query's identity between its processes: ``query`` is public (hex), ``key`` the secret
    the driver made for it, with which its tasks, its driver and the receiver services that serve it prove
    themselves to each other (HMAC over a challenge: the key never crosses a network)."""

    query: str
    key: Secret


def new_query_key() -> QueryKey:
    return QueryKey(os.urandom(16).hex(), Secret(os.urandom(32).hex()))


@dataclass(frozen=True)
class Home:
    """A partition's home: the receiver service that reads it from Event Hubs for the whole cluster
    (``executor``: the service's id), and where other executors' tasks reach it."""

    executor: str
    hosts: tuple[str, ...]
    port: int


@dataclass(frozen=True)
class DriverAddress:
    """Where a streaming query's driver listens for what its executors
    tell it (:mod:`eventhubs_spark.interprocess.driver_channel`)."""

    hosts: tuple[str, ...]
    port: int


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

    def counts(self) -> dict[str, int]:
        """Its fields by name (what ``dataclasses.asdict`` gives, without the deep copy: 20 us of a small range)."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class RemoteRead:
    """A range of one partition to read, and nothing else: what a task asks of another executor's receiver service
    (the partition's home), so no credentials. The home reads it with the settings its own executor's tasks gave it
    for the query the connection proved it belongs to.

    ``idle_timeout``: how long the receiver may sit idle afterwards; ``owner``/``owned`` (ownership mode): the
    query's owner id and the partitions it owns now; ``retry``: the task is a retry (a pooled receiver is not trusted
    then); ``range_id``: the asker's name for this very request (every chunk of the answer carries it)."""

    config: ReceiverConfig
    partition: str
    start: int
    end: int
    fail_on_data_loss: bool
    idle_timeout: float | None = None
    owner: str | None = None
    owned: frozenset[str] | None = None
    retry: bool = False
    range_id: int = 0

    @classmethod
    def of(cls, request: RemoteRead) -> RemoteRead:
        """What a task asks of a home for ``request``: its range alone (a :class:`RangeRequest`'s settings and
        stream fields left out)."""
        return RemoteRead(**_range_fields(request))

    def request(self, settings: ConnectionSettings) -> RangeRequest:
        """The range the home reads, with the settings its own executor's tasks gave it."""
        return RangeRequest(**_range_fields(self), settings=settings)


def _range_fields(read: RemoteRead) -> dict[str, Any]:
    """The range's own fields of ``read`` (a :class:`RangeRequest` too), by name."""
    return {f.name: getattr(read, f.name) for f in dataclasses.fields(RemoteRead)}


@dataclass(frozen=True)
class RangeRequest(RemoteRead):
    """One task's range (the fields of :class:`RemoteRead`) with the settings to read it by: plain data, it travels
    to the executor's receiver service too. ``query``, ``driver`` and ``home`` (streams): see :class:`QueryKey`,
    :class:`DriverAddress`, :class:`Home`."""

    settings: ConnectionSettings = dataclasses.field(kw_only=True)
    # A streaming query's (None for a batch read): its key, its driver, and the partition's home
    query: QueryKey | None = None
    driver: DriverAddress | None = None
    home: Home | None = None
    homes: bool = False  # the stream places partitions at homes (eventhubs.partitionHomes); None above: ask
    ports: str = ""  # eventhubs.executorPorts: where a home listens ("": any free port)
    bind: str = "0.0.0.0"  # eventhubs.executorBindAddress: the address it listens on

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its own range and the rest once: every input partition of a batch carries the same settings,
        config, query key and driver address (ten objects, 1,370 bytes pickled), and Spark pickles each partition
        on its own, so at 1,024 partitions that rest was pickled 1,024 times a batch in the stream runner (50 ms of
        a batch's planning; 17 ms this way). The rest travels as bytes pickled once per batch (kept while the same
        objects come), and an executor unpickles them once per worker while the same bytes come."""
        shared = tuple(getattr(self, name) for name in SHARED_FIELDS)
        return _rebuild_request, (_shared_bytes(shared), *(getattr(self, name) for name in OWN_FIELDS))


# A range request's own fields (pickled with each) and the rest (pickled once, RangeRequest.__reduce__; encoded
# once for the receiver service and decoded once there, interprocess.service_protocol).
OWN_FIELDS = ("partition", "start", "end", "home", "retry", "range_id")
SHARED_FIELDS = tuple(f.name for f in dataclasses.fields(RangeRequest) if f.name not in OWN_FIELDS)
_loaded_lock = threading.Lock()
_last_shared: tuple[tuple[Any, ...], bytes] = ((), b"")  # the objects last pickled, and their bytes
_loaded: dict[bytes, tuple[Any, ...]] = {}  # bytes -> the objects, on the unpickling side
_LOADED_KEPT = 8  # distinct shared parts a worker keeps unpickled (a few queries' at a time)


def same_objects(last: tuple[Any, ...], shared: tuple[Any, ...]) -> bool:
    """Whether ``shared`` holds the very objects ``last`` does (what a batch's requests share: compared by identity,
    which the callers' caches of ``last`` make safe by holding its objects, so no id is reused)."""
    return len(last) == len(shared) and all(a is b for a, b in zip(last, shared, strict=True))


def _shared_bytes(shared: tuple[Any, ...]) -> bytes:
    """``shared`` pickled: the last bytes again while the very same objects come (a batch's partitions share
    them; compared by identity, the objects held so no id is reused), else pickled anew."""
    global _last_shared
    last, blob = _last_shared
    if same_objects(last, shared):
        return blob
    blob = pickle.dumps(shared, protocol=pickle.HIGHEST_PROTOCOL)
    _last_shared = (shared, blob)  # one assignment: a thread reading it sees the old pair or the new one
    return blob


def _rebuild_request(blob: bytes, *own: Any) -> RangeRequest:
    """A :class:`RangeRequest` from its pickled parts: the shared bytes and its own fields in the order of
    ``OWN_FIELDS`` (see :meth:`RangeRequest.__reduce__`)."""
    shared = _loaded.get(blob)
    if shared is None:
        shared = pickle.loads(blob)
        with _loaded_lock:  # the bound and the entry together
            if len(_loaded) >= _LOADED_KEPT:
                _loaded.clear()
            _loaded[blob] = shared
    return RangeRequest(**dict(zip(SHARED_FIELDS, shared, strict=True)), **dict(zip(OWN_FIELDS, own, strict=True)))
