"""Where partitions end, as the executors' receiver services know it: a driver asks each once a trigger.

The receiver services' open links learn of each new event as it is enqueued, so a driver asks each service once a
trigger for the partitions its links vouch for (:class:`EndsClient` asks, :class:`Told` answers), and Event Hubs
only for the rest. A vouched end is never past the partition's real end, and at most a moment behind it.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Mapping
from typing import NamedTuple

from eventhubs_spark.interprocess.home_link import connect_home
from eventhubs_spark.interprocess.sealed_socket import SealedSocket
from eventhubs_spark.interprocess.service_framing import ENDS, recv, send
from eventhubs_spark.interprocess.sockets import HANDSHAKE_TIMEOUT
from eventhubs_spark.interprocess.task_ranges import Home, QueryKey

MAX_ANSWER = 16 << 20  # bytes of an answer a driver takes (1,024 partitions all new: about 40 KB)


class Vouch(NamedTuple):
    """A partition's end as a receiver service's open link knows it: ``end`` is the position after the newest event
    the link brought, ``offset`` and ``enqueued_ms`` that event's. (A tuple: a driver takes 1,024 of them a trigger
    at 1,024 partitions.)"""

    end: int
    offset: str
    enqueued_ms: int | None


class Vouched(NamedTuple):
    """A vouch as a receiver service keeps it: :class:`Vouch`'s fields and its answer row, encoded once when the vouch
    changes (:func:`vouched`). A question after a batch at 1,024 partitions is answered with every row: encoding them
    then (a list and ``json.dumps`` of 1,024 rows) took 1.5-4.8 ms of the service's CPU on the trigger's path, while
    joining rows encoded as they came takes a fraction of that."""

    end: int
    offset: str
    enqueued_ms: int | None
    row: bytes


def vouched(partition: str, end: int, offset: str, enqueued_ms: int | None) -> Vouched:
    """The vouch with its answer row ``[partition, end, offset, enqueued_ms]`` as JSON. Partition ids and offsets are
    digits on Event Hubs: formatted directly (~0.5 us; a character ``str.isdigit`` accepts is never one JSON escapes);
    anything else goes through ``json.dumps``."""
    if partition.isdigit() and offset.isdigit():
        when = "null" if enqueued_ms is None else int(enqueued_ms)
        row = f'["{partition}",{int(end)},"{offset}",{when}]'
    else:
        row = json.dumps([partition, end, offset, enqueued_ms], separators=(",", ":"))
    return Vouched(end, offset, enqueued_ms, row.encode())


class Told:
    """What a receiver service told one driver's connection last: each vouched partition's vouch. Each answer says
    only what changed since (changed vouches, and the partitions it no longer vouches for), so a trigger in which few
    partitions moved costs both sides little however many partitions there are; a new connection starts with
    everything untold."""

    def __init__(self) -> None:
        self.ends: dict[str, Vouched] = {}
        # the receiver pool's vouch_version when this connection was last told everything (while it stands,
        # nothing new is told without looking: executor.home_listener)
        self.as_of: int | None = None

    def answer(self, newest: Mapping[str, Vouched]) -> bytes:
        """The answer to this connection's question, ``newest`` being what the service's links vouch for now
        (partition -> its vouch: the position after the newest event its link brought, that event's offset and
        enqueued time, as the link read them when the event came,
        :attr:`eventhubs_spark.amqp.frame_reader.LinkSink.newest`, and their row encoded then): JSON
        ``{"ends": [[partition, end, offset, enqueued_ms], ...], "gone": [partition, ...]}``, the changed rows joined
        as they are."""
        told = self.ends
        # one pass over the partitions (a tuple comparison in C each): a vouch kept unchanged is the same object
        rows = [vouch.row for partition, vouch in newest.items() if told.get(partition) != vouch]
        gone = sorted(told.keys() - newest.keys())
        self.ends = dict(newest)
        return b'{"ends":[%b],"gone":%b}' % (b",".join(rows), json.dumps(gone, separators=(",", ":")).encode())


NOTHING_NEW = json.dumps({"ends": [], "gone": []}, separators=(",", ":")).encode()


def apply_answer(known: dict[str, Vouch], payload: bytes) -> None:
    """A service's answer applied to what it said before (``known``, changed in place). Entries that do not have
    the expected form vouch for nothing (the partition is asked of Event Hubs)."""
    message = json.loads(payload)
    rows = message.get("ends") if isinstance(message, dict) else None
    gone = message.get("gone") if isinstance(message, dict) else None
    if not isinstance(rows, list) or not isinstance(gone, list):
        raise ValueError("an answer without its lists of ends and of partitions gone")
    for partition in gone:
        known.pop(partition, None)
    for row in rows:
        try:
            partition, end, offset, when = row
        except (TypeError, ValueError):
            continue
        if type(partition) is str and type(end) is int and end > 0 and type(offset) is str:
            known[partition] = Vouch(end, offset, when if type(when) is int else None)
        elif isinstance(partition, str):
            known.pop(partition, None)


class EndsClient:
    """A driver's kept connection to one receiver service, asking where its links' partitions end."""

    def __init__(self, home: Home, query: QueryKey) -> None:
        self.home = home
        self.query = query
        self._conn: SealedSocket | None = None
        self._known: dict[str, Vouch] = {}  # what the service said over this connection, its changes applied
        self._lock = threading.Lock()  # a connection made ahead (connect) and a trigger's question take turns
        # held only to set or take the connection (never across a connect): close() does not wait for a connect in
        # flight, and a connection made after close() is closed by whoever made it instead of kept open unseen
        self._state = threading.Lock()
        self._closed = False

    def ask(self, timeout: float) -> dict[str, Vouch]:
        """The partitions the service's links vouch for now; raises OSError (or ValueError for an answer that is
        not one) when it cannot be had within ``timeout`` seconds a step; the connection is then closed."""
        with self._lock:
            try:
                conn = self._connection(timeout)
                conn.settimeout(timeout)
                send(conn, ENDS)
                kind, payload = recv(conn, MAX_ANSWER)
                if kind != ENDS:
                    raise ValueError(f"an answer of kind {kind!r} to a question of where partitions end")
                apply_answer(self._known, bytes(payload))
                return self._known
            except BaseException:
                self._drop()
                raise

    def connect(self, timeout: float) -> None:
        """The connection made (and proven) now, ahead of the first question: a trigger that asks then does not wait
        for the connect and the handshake (~2.5 ms at a busy moment, the trigger after a query's first batch). Raises
        OSError as :meth:`ask` does (the connection is then closed; a question tries again)."""
        with self._lock:
            try:
                self._connection(timeout)
            except BaseException:
                self._drop()
                raise

    def _connection(self, timeout: float) -> SealedSocket:
        conn = self._conn
        if conn is not None:
            return conn
        conn = connect_home(self.home, self.query, timeout, min(timeout, HANDSHAKE_TIMEOUT))
        conn.max_frame = MAX_ANSWER + 64
        with self._state:
            closed = self._closed
            if not closed:
                self._conn = conn
                self._known = {}  # a new connection: the service tells everything again
        if closed:  # closed for good while this connected (the driver dropped the service)
            with contextlib.suppress(OSError):
                conn.close()
            raise OSError(f"the connection to receiver service {self.home.executor} was closed")
        return conn

    def _drop(self) -> None:
        """The connection closed after a failure; the next question connects again."""
        with self._state:
            conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.close()

    def close(self) -> None:
        """Closed for good (the driver dropped this service), at once: a connect in flight is closed as it ends."""
        with self._state:
            self._closed = True
        self._drop()
