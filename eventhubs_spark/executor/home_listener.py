"""A receiver service as a home: it serves other executors' tasks, and says where it is to the driver.

Each partition of a streaming query has a home (:mod:`eventhubs_spark.planning.partition_placement`): the one receiver
service that reads it from Event Hubs for the whole cluster. A task that lands elsewhere reads its
range from the home over TCP, so the namespace sends each event once however often Spark moves the task.
This module is the home's side (how: :class:`Listener`).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.interprocess import service_protocol
from eventhubs_spark.interprocess.driver_channel import ask
from eventhubs_spark.interprocess.partition_ends import NOTHING_NEW, Told, Vouched
from eventhubs_spark.interprocess.sealed_socket import RefusedError, SealedSocket, server_handshake
from eventhubs_spark.interprocess.service_framing import ENDS, MAX_REQUEST, REMOTE_READ, recv, send
from eventhubs_spark.interprocess.sockets import (
    HANDSHAKE_TIMEOUT,
    MAX_PENDING,
    MAX_THREADS,
    Gate,
    Refusals,
    accept_loop,
    host_addresses,
    open_server,
)
from eventhubs_spark.interprocess.task_ranges import DriverAddress, QueryKey, RangeRequest, RemoteRead

_LOG = logging.getLogger(__name__)

HEARTBEAT = 5.0  # seconds between a service's announcements to each query's driver
QUERY_IDLE = 600.0  # a query none of whose tasks came for this long is no longer announced or served
_GIVE_UP = 12  # announcements in a row the driver did not answer: the query has ended


class Listener:
    """The home side of one receiver service: the queries it knows, its TCP port, its announcements.

    * **What it serves.** The queries its own executor's tasks brought (their key and connection settings
      arrive over the private Unix socket): a remote connection must prove it belongs to one of them
      (:mod:`eventhubs_spark.interprocess.sealed_socket`), and then asks for ranges by partition and sequence numbers
      only; the home reads them with the query's settings, through the same pool, read-ahead and recovery as its own
      executor's tasks.
    * **Where.** A TCP port on every address of the host, from ``eventhubs.executorPorts`` (default: any
      free port, so two services on one host never clash), opened when the first streaming task arrives.
    * **Who knows.** Every query's driver hears from the service (``service``: its id, addresses and port)
      at once and then every :data:`HEARTBEAT` seconds while the query's tasks keep coming; the driver
      places homes over the services it heard from lately, so an executor that is gone stops being a home.
    """

    def __init__(
        self,
        executor: str,
        serve: Callable[[SealedSocket, RangeRequest], bool],
        busy: Callable[[int], None],
        clock: Callable[[], float] = time.monotonic,
        jvm: str | None = None,
        ends: Callable[[ConnectionSettings], Mapping[str, Vouched]] | None = None,
        ends_version: Callable[[], int] | None = None,
    ) -> None:
        """``serve(connection, request)`` sends one range (False when the caller went away); ``busy(+1/-1)``
        counts a remote connection's request in and out of the service's activity. ``jvm`` names the
        executor's JVM (``host:pid``), told to the driver: one in the driver's own JVM is local mode.
        ``ends(settings)``: the partitions of that hub the service's links vouch for (a driver asks,
        :mod:`eventhubs_spark.interprocess.partition_ends`; None: it vouches for none); ``ends_version()``: a
        number that changes whenever what ``ends`` would say does (the pool's ``vouch_version``), so a question
        asked while it stands is answered "nothing new" without asking ``ends`` (None: it is always asked)."""
        self.executor = executor
        self.jvm = jvm
        self.serve = serve
        self.busy = busy
        self.ends = ends
        self.ends_version = ends_version
        self.ends_answered = 0  # drivers' questions of where partitions end, answers made (for tests)
        self.clock = clock
        self.port: int | None = None
        self.hosts = host_addresses()
        self.refused = 0  # connections and requests refused
        self.refusals = Refusals()  # strangers refused, said in the log at most once a minute
        self.served = 0
        self._queries: dict[str, tuple[QueryKey, ConnectionSettings, float]] = {}
        self._announcing: set[tuple[DriverAddress, str]] = set()
        self._lock = threading.Lock()
        self._server: socket.socket | None = None
        self._ports = "0"  # eventhubs.executorPorts, as the first streaming task gave it
        self._bind = "0.0.0.0"  # eventhubs.executorBindAddress, likewise
        self.gate = Gate(MAX_PENDING, MAX_THREADS)  # what other hosts may have it serve at once

    def register(self, request: RangeRequest) -> None:
        """A streaming task of this executor brought its query: keep its key and settings, open the port,
        and make sure the query's driver knows this service (the first time, before returning)."""
        query, driver = request.query, request.driver
        if query is None:
            return
        with self._lock:
            if query.query not in self._queries:  # the id is public (it opens every handshake); the key is not
                _LOG.info("receiver service %s: serves query %s (hub %s)", self.executor, query.query,
                          request.settings.hub)  # fmt: skip
            self._queries[query.query] = (query, request.settings, self.clock())
            relisten = self._server is None and self.port is not None
            if self._server is None:  # the first streaming task, or the port was lost (see _accept)
                self._listen(request.ports, request.bind)
            if driver is None:
                return
            if (driver, query.query) in self._announcing:
                if relisten:  # the new port now, not at the next heartbeat
                    threading.Thread(target=self._announce, args=(driver, query), daemon=True).start()
                return
            self._announcing.add((driver, query.query))
        self._announce(driver, query)  # the task may ask for its home right after
        threading.Thread(target=self._heartbeat, args=(driver, query), name="eventhubs-heartbeat", daemon=True).start()

    def key_of(self, query: str) -> QueryKey | None:
        with self._lock:
            known = self._queries.get(query)
        return known[0] if known is not None else None

    def farewell(self, why: str, timeout: float = 2.0) -> int:
        """Tell each query's driver this service announced itself to that it is going (its executor ended, or it
        exits idle): the driver drops it as a home at once, where it would have kept placing partitions here until
        its announcements were 30 s old (every task of a replacement executor paying a connect to a gone home
        meanwhile). Best effort, all drivers at once, within ``timeout`` in all; returns how many answered."""
        with self._lock:
            told = [(driver, self._queries[query][0]) for driver, query in self._announcing if query in self._queries]
        answered: list[bool] = []
        message = {"kind": "gone", "executor": self.executor, "why": why}

        def tell(driver: DriverAddress, query: QueryKey) -> None:
            answered.append(ask(driver, query, message, timeout=timeout) is not None)

        threads = [threading.Thread(target=tell, args=pair, daemon=True) for pair in told]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return sum(answered)

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.close()

    # -- the port --
    def _listen(self, ports: str, bind: str) -> None:
        self._ports, self._bind = ports, bind
        server = open_server(bind, ports, "eventhubs.executorPorts")
        if bind not in ("", "0.0.0.0", "::"):
            self.hosts = (bind,)
        server.settimeout(1.0)
        self._server = server
        self.port = int(server.getsockname()[1])
        _LOG.info("receiver service %s: serving other executors on port %d", self.executor, self.port)
        threading.Thread(target=self._accept, args=(server,), name="eventhubs-home", daemon=True).start()

    def _listen_again(self, exc: OSError) -> None:
        """The port was taken from under the service: listen on a new one at once and tell every query's driver
        (else its partitions would be read elsewhere for the rest of the query). When no port is free, the
        next streaming task of its own executor tries again (:meth:`register`)."""
        old = self.port
        try:
            with self._lock:
                if self._server is None:
                    self._listen(self._ports, self._bind)
        except OSError as again:
            _LOG.error("receiver service %s: its port %d closed under it (%s), and it cannot listen again (%s); "
                       "other executors' tasks read its partitions for themselves meanwhile", self.executor, old,
                       exc, again)  # fmt: skip
            return
        _LOG.error("receiver service %s: its port %d closed under it (%s); it listens again on port %s",
                   self.executor, old, exc, self.port)  # fmt: skip
        with self._lock:
            drivers = [(d, self._queries[q][0]) for d, q in self._announcing if q in self._queries]
        for driver, query in drivers:
            self._announce(driver, query)

    def _accept(self, server: socket.socket) -> None:
        """Take connections until the port is closed (no error ends it but that); a port taken from under the
        service is listened on again."""

        def take(conn: socket.socket, peer: Any) -> None:
            self.gate.serve(conn, lambda: self._remote(conn, peer), "eventhubs-remote")

        exc = accept_loop(server, lambda: self._server is server, take, f"receiver service {self.executor}")
        if exc is None:
            return
        with self._lock:
            lost = self._server is server
            if lost:  # not closed by us: the port was taken from under the service (ss -K, a sandbox)
                self._server = None
        if lost:
            with contextlib.suppress(OSError):
                server.close()
            self._listen_again(exc)

    def _remote(self, conn: socket.socket, peer: Any) -> None:
        """One other executor's connection: proven, then its range requests, each answered as a READ."""
        try:
            with conn:
                conn.settimeout(HANDSHAKE_TIMEOUT)
                try:
                    sealed, query_id = server_handshake(conn, self.key_of)
                except RefusedError as exc:
                    # said before counted: whoever sees the count (a test waits on it) finds the warning logged
                    self.refusals.add(_LOG, exc, "receiver service %s: refused a connection from %s: %s",
                                      self.executor, peer[0], exc)  # fmt: skip
                    self.refused += 1
                    return
                except OSError:
                    return
                self.gate.proven(conn)
                sealed.max_frame = MAX_REQUEST + 64  # the seal's tag
                # the worker's next range may come minutes later: no time-out here, but a worker whose host is lost
                # while it waits is found out by the keep-alive accept_loop set (socket_waits.watch_peer)
                conn.settimeout(None)
                self._requests(sealed, query_id, peer)
        finally:
            self.gate.done(conn)

    def _requests(self, sealed: SealedSocket, query_id: str, peer: Any) -> None:
        told = Told()  # a driver's connection: what it was told of where partitions end
        while True:
            try:
                kind, payload = recv(sealed, MAX_REQUEST)
                if kind == ENDS:
                    if not self._answer_ends(sealed, query_id, told):
                        return
                    continue
                if kind != REMOTE_READ:
                    raise service_protocol.ProtocolError(f"a message of kind {kind!r}")
                asked = service_protocol.decode_request(payload, RemoteRead)
            except (ConnectionError, OSError):
                return  # the task went away: nothing in flight
            except service_protocol.ProtocolError as exc:
                _LOG.error("receiver service %s: refused a request from %s (%s)", self.executor, peer[0], exc)
                self.refused += 1
                return
            with self._lock:
                known = self._queries.get(query_id)
                if known is not None:  # serving a query keeps it announced, local tasks or not
                    self._queries[query_id] = (known[0], known[1], self.clock())
            if known is None:
                return
            request = asked.request(known[1])
            self.busy(+1)
            self.served += 1
            try:
                if not self.serve(sealed, request):
                    return
            finally:
                self.busy(-1)

    def _answer_ends(self, sealed: SealedSocket, query_id: str, told: Told) -> bool:
        """A driver asks where the query's hub's partitions end, as this service's links know it (False: the query
        is no longer known here, or the driver went away)."""
        with self._lock:
            known = self._queries.get(query_id)
        if known is None:
            return False
        # read before what the links vouch for: a change after it makes the next question look again
        version = self.ends_version() if self.ends_version is not None else None
        if version is not None and told.as_of == version:
            payload = NOTHING_NEW  # an idle stream's question, many a second: nothing looked at
        else:
            payload = told.answer(self.ends(known[1]) if self.ends is not None else {})
            told.as_of = version
        self.ends_answered += 1  # before it goes: a driver that has the answer finds it counted
        try:
            send(sealed, ENDS, payload)
        except OSError:
            return False
        return True

    # -- the driver --
    def _announce(self, driver: DriverAddress, query: QueryKey) -> bool:
        with self._lock:
            if self._server is None:
                return True  # no port (lost): announcing the old one would make the driver place partitions here
        message = {"kind": "service", "executor": self.executor, "hosts": list(self.hosts), "port": self.port,
                   "jvm": self.jvm}  # fmt: skip
        return ask(driver, query, message) is not None

    def _heartbeat(self, driver: DriverAddress, query: QueryKey) -> None:
        failures = 0
        while failures < _GIVE_UP:
            time.sleep(HEARTBEAT)
            with self._lock:
                known = self._queries.get(query.query)
            if known is None or self.clock() - known[2] > QUERY_IDLE:
                break
            failures = 0 if self._announce(driver, query) else failures + 1
        with self._lock:
            self._announcing.discard((driver, query.query))
