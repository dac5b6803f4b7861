"""What a streaming query's executors tell its driver, and what they ask it: small messages, never data.

Spark gives a Python source no way to report from a task to the driver (no task metrics, no
accumulators) and no way to learn where its tasks run. So a streaming query's driver (its long-lived
stream runner process) listens on a TCP port, and every input partition carries where
(:class:`~eventhubs_spark.interprocess.task_ranges.DriverAddress`) with the query's key. Over it:

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

from eventhubs_spark.interprocess.sealed_socket import RefusedError, SealedSocket, client_handshake, server_handshake
from eventhubs_spark.interprocess.sockets import (
    CONFIRM_TIMEOUT,
    HANDSHAKE_TIMEOUT,
    MAX_PENDING,
    MAX_THREADS,
    PROBE_TIMEOUT,
    RECHECK,
    Gate,
    Refusals,
    accept_loop,
    connect_or_refused,
    host_addresses,
    open_server,
    wait_until_reached,
)
from eventhubs_spark.interprocess.task_ranges import DriverAddress, QueryKey

_LOG = logging.getLogger(__name__)

MAX_MESSAGE = 64 * 1024
KEPT_IDLE = 600.0  # seconds the driver keeps an idle kept connection (ask_kept) open
# A kept connection whose messages the driver's host has not acknowledged for this long is ended by the kernel
# (TCP_USER_TIMEOUT): a told message (tell_kept) waits for no answer, so without it a driver a firewall cut off
# would take every report into the connection's send buffer unsaid, and never be found unreachable (its port is
# probed, and the finding said, when the next message makes a new connection). The driver reads every message at
# once, so its window never stays closed this long.
UNACKED_LIMIT = 3.0
Handler = Callable[[dict[str, Any]], dict[str, Any] | None]


class DriverChannel:
    """The driver's end: each proven message goes to ``handle``, whose answer (if any) goes back.

    Bounded against whatever connects: at most :data:`MAX_PENDING` connections that have not proven
    themselves (each has :data:`HANDSHAKE_TIMEOUT` seconds to), at most :data:`MAX_THREADS` served at once
    (more are closed at once, and counted), a sealed frame of at most :data:`MAX_MESSAGE` bytes (checked before
    anything is allocated for it), and an accept loop that no error ends but closing the channel."""

    def __init__(self, query: QueryKey, handle: Handler, bind: str = "0.0.0.0", ports: str = "0") -> None:
        self.query = query
        self.handle = handle
        self._server = open_server(bind, ports, "eventhubs.driverChannel.ports")
        self._server.settimeout(1.0)
        self.port = int(self._server.getsockname()[1])
        self._address = DriverAddress(host_addresses(bind), self.port)  # looked up once: names may be slow
        self.refusals = Refusals()  # strangers refused, said in the log at most once a minute
        self.accepted = 0  # connections taken (a kept one counts once however many messages it carries)
        self.proven = 0  # connections that proved they hold the query's key
        self.gate = Gate(MAX_PENDING, MAX_THREADS)
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name="eventhubs-driver-channel", daemon=True).start()

    def address(self) -> DriverAddress:
        return self._address

    @property
    def refused(self) -> int:
        return self.refusals.refused

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.close()

    def _accept(self) -> None:
        def take(conn: socket.socket, peer: Any) -> None:
            self.accepted += 1
            self.gate.serve(conn, lambda: self._serve(conn, peer), "eventhubs-driver-channel-conn")

        accept_loop(self._server, lambda: not self._closed.is_set(), take, "driver channel")

    def _serve(self, conn: socket.socket, peer: Any) -> None:
        try:
            with conn:
                conn.settimeout(HANDSHAKE_TIMEOUT)
                try:
                    sealed, _ = server_handshake(conn, lambda q: self.query if q == self.query.query else None)
                except RefusedError as exc:
                    # said before counted: whoever sees the count (a test waits on it) finds the warning logged
                    self.refusals.add(_LOG, exc, "eventhubs: refused a connection to the query's driver from %s: %s",
                                      peer[0], exc)  # fmt: skip
                    return
                except OSError as exc:
                    _LOG.debug("eventhubs: driver channel: a connection from %s ended: %s", peer[0], exc)
                    return
                self.gate.proven(conn)
                sealed.max_frame = MAX_MESSAGE + 64  # the seal's tag
                self.proven += 1
                sealed.settimeout(30.0)  # an answer may wait for the services to settle (see planning.partition_homes)
                self._messages(sealed, peer)
        finally:
            self.gate.done(conn)

    def _messages(self, sealed: SealedSocket, peer: Any) -> None:
        first = True
        while not self._closed.is_set():  # a kept connection (ask_kept, tell_kept) sends message after message
            try:
                frame = sealed.recv_frame()
            except (OSError, ValueError) as exc:
                if first:
                    _LOG.debug("eventhubs: driver channel: a message from %s was not read: %s", peer[0], exc)
                return  # the other end closed it, or it stayed idle past KEPT_IDLE
            try:
                message = json.loads(frame.decode("utf-8"))
                if not isinstance(message, dict):
                    raise ValueError("a message is a JSON object")
                answer = self.handle(message) or {}
                if message.get(QUIET) is not True:  # told, not asked (tell_kept): the sender reads no answer
                    sealed.send_frame(json.dumps(answer).encode("utf-8"))
            except (OSError, ValueError) as exc:
                _LOG.debug("eventhubs: driver channel: a message from %s was not read: %s", peer[0], exc)
                return
            if first:
                first = False
                sealed.settimeout(KEPT_IDLE)


def _payload(message: dict[str, Any]) -> bytes:
    payload = json.dumps(message, separators=(",", ":")).encode("utf-8")
    if len(payload) > MAX_MESSAGE:
        raise ValueError(f"a message to the driver of {len(payload)} bytes")
    return payload


def _exchange(sealed: SealedSocket, payload: bytes) -> dict[str, Any] | None:
    """One message and its answer on a proven connection (OSError, ValueError when it broke)."""
    sealed.send_frame(payload)
    answer = json.loads(sealed.recv_frame().decode("utf-8"))
    return answer if isinstance(answer, dict) else None


def _executor_dir() -> str | None:
    """The executor's first local directory (``SPARK_LOCAL_DIRS``, which all its Python workers share), where a
    worker leaves what it found out for the others; None outside an executor."""
    first = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0].strip()
    return first if first and os.path.isdir(first) else None


class Reach:
    """Whether this process reaches the drivers it talks to: found out once within :data:`PROBE_TIMEOUT`, then
    remembered. While a driver is unreachable nothing here waits for it (every ask answers None at once) and a
    thread of its own tries its port every :data:`RECHECK` seconds; once it answers, asking goes on. Said once
    per process and driver, in the log."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, recheck: float = RECHECK, shared_dir: str | None = None
    ) -> None:
        """``shared_dir``: a folder every process of this executor sees (its local directory), where a process
        that paid a failed probe leaves a note, so its executor's other Python workers (each a process of its
        own, with no receiver service to ask) do not pay it again; None: each process finds out for itself."""
        self.clock = clock
        self.recheck = recheck
        self.shared_dir = shared_dir
        self._down: dict[tuple[tuple[str, ...], int], float] = {}  # driver -> since when it is unreachable
        self._lock = threading.Lock()
        self.probes = 0  # connection attempts that failed (what this process paid)

    def _note(self, driver: DriverAddress) -> str | None:
        if self.shared_dir is None:
            return None
        key = hashlib.sha256(f"{','.join(driver.hosts)}:{driver.port}".encode()).hexdigest()[:16]
        return os.path.join(self.shared_dir, f"eventhubs-driver-unreachable-{key}")

    def _leave_note(self, driver: DriverAddress) -> None:
        note = self._note(driver)
        if note is not None:
            with contextlib.suppress(OSError), open(note, "w") as f:  # read-only: each process finds out itself
                f.write(str(time.time()))

    def _fresh_note(self, driver: DriverAddress) -> bool:
        """Another process of this executor found the driver unreachable lately, and re-checks it (its note is
        renewed at every re-check: one older than that was left by a process that has gone)."""
        note = self._note(driver)
        if note is None:
            return False
        try:
            age = time.time() - os.stat(note).st_mtime
        except OSError:
            return False
        return age < self.recheck + CONFIRM_TIMEOUT + PROBE_TIMEOUT

    def known_down(self, driver: DriverAddress) -> bool:
        """This process found the driver unreachable and has not reached it since (no file looked at)."""
        with self._lock:
            return (driver.hosts, driver.port) in self._down

    def reachable(self, driver: DriverAddress) -> bool:
        if self.known_down(driver):
            return False
        if self._fresh_note(driver):
            self.failed(driver, "another Python worker of this executor found it out", probed=False)
            return False
        return True

    def failed(self, driver: DriverAddress, why: str, probed: bool = True) -> None:
        """A connection to the driver could not be made (``probed``: by this process, which then leaves a note
        for its executor's other processes; else it learned so from them or from its executor's service):
        remember it, say it once, and check in the background."""
        key = (driver.hosts, driver.port)
        if probed:
            self._leave_note(driver)
        with self._lock:
            self.probes += probed
            if key in self._down:
                return
            self._down[key] = self.clock()
        _LOG.warning("eventhubs: the query's driver (port %d on %s) cannot be reached from this process (%s): tasks "
                     "here read on without telling it (no partition homes, no lag times from here); checked again "
                     "every %g s. A cluster whose executors may never reach the driver: set "
                     "eventhubs.driverChannel=false", driver.port, ", ".join(driver.hosts), why,
                     self.recheck)  # fmt: skip
        threading.Thread(target=self._watch, args=(driver,), name="eventhubs-driver-recheck", daemon=True).start()

    def _watch(self, driver: DriverAddress) -> None:
        healed = wait_until_reached(driver.hosts, driver.port, self.recheck, lambda: self._leave_note(driver))
        with self._lock:  # reached again, or an hour unreachable (its query ended, likely: a later ask probes afresh)
            self._down.pop((driver.hosts, driver.port), None)
        note = self._note(driver)
        if note is not None:
            with contextlib.suppress(OSError):
                os.unlink(note)
        if healed:
            _LOG.info("eventhubs: the query's driver (port %d) can be reached again from this process", driver.port)


REACH = Reach(shared_dir=_executor_dir())


def _connect(driver: DriverAddress, query: QueryKey, timeout: float) -> tuple[str, SealedSocket] | None:
    """A proven connection to the driver at the first of its addresses that answers; None when none does (or the
    driver is known to be unreachable: then at once), or when it refused the query's proof (said in the log)."""
    if not REACH.reachable(driver):
        return None
    connected, refused = connect_or_refused(driver.hosts, driver.port, min(timeout, PROBE_TIMEOUT))
    if connected is None:
        if refused:
            # Nobody listens on that port (the query stopped, or a new one on the same fixed port has not yet
            # started listening): answered at once, so nothing is remembered and no note is left for the executor's
            # other processes, which would otherwise take a restarted query's driver for unreachable for a minute.
            _LOG.debug("eventhubs: the query's driver (port %d) refused the connection: not listening", driver.port)
            return None
        REACH.failed(driver, f"no answer within {min(timeout, PROBE_TIMEOUT):g} s")
        return None
    host, sock = connected
    try:
        sock.settimeout(timeout)
        return host, client_handshake(sock, query)
    except RefusedError as exc:
        sock.close()
        _LOG.warning("eventhubs: the query's driver at %s:%d refused this process: %s", host, driver.port, exc)
        return None
    except OSError:
        sock.close()  # it answered, so it is reachable: this one connection was cut off (a busy driver)
        return None


def ask(
    driver: DriverAddress | None, query: QueryKey | None, message: dict[str, Any], timeout: float = 3.0
) -> dict[str, Any] | None:
    """Send ``message`` to the query's driver and return its answer; None when it could not be reached or
    refused (never raises). ``timeout``: for connecting, and for the answer."""
    if driver is None or query is None:
        return None
    payload = _payload(message)
    connected = _connect(driver, query, timeout)
    if connected is None:
        return None
    sealed = connected[1]
    try:
        return _exchange(sealed, payload)
    except (OSError, ValueError):
        return None  # connected and proven, then no answer in time: the driver is slow, not unreachable
    finally:
        sealed.close()


# this process's kept connections to query drivers, by (host, port, query, key): proven with that very key
KeptKey: TypeAlias = tuple[str, int, str, int]  # (host, port, query, hash of its key)
_KEPT: dict[KeptKey, SealedSocket] = {}
_KEPT_LOCK = threading.Lock()


def ask_kept(
    driver: DriverAddress | None, query: QueryKey | None, message: dict[str, Any], timeout: float = 3.0
) -> dict[str, Any] | None:
    """:func:`ask` over a connection this process keeps to the query's driver, made (and proven) once: a message then
    costs a sealed frame each way, not a connection and a handshake. A kept connection that broke (the driver closed
    it idle, or restarted: a send into it still succeeds, the answer does not come) is made again once; None when the
    driver cannot be reached (never raises)."""
    if driver is None or query is None or REACH.known_down(driver):
        return None
    payload = _payload(message)
    return _over_kept(driver, query, timeout, lambda sealed: _exchange(sealed, payload))


QUIET = "quiet"  # a message whose this is true gets no answer (tell_kept)


def tell_kept(
    driver: DriverAddress | None, query: QueryKey | None, message: dict[str, Any], timeout: float = 3.0
) -> bool:
    """``message`` sent over the kept connection (:func:`ask_kept`) with no answer asked for or waited on: what a
    task read goes so, the moment before it hands Spark its last batch, and the task ends without waiting for the
    driver's thread to wake (0.3-0.7 ms of a small task on a busy executor, issue 87). The driver, not the task,
    makes sure it has the reports before it plans on them (:meth:`~eventhubs_spark.lag.tracker.LagTracker.
    await_reports` at the next trigger). A kept connection that carries no answers has nothing to read: one that has
    something (its end) was closed by the driver, and is made again; one whose messages a firewall drops is ended by
    the kernel after :data:`UNACKED_LIMIT` seconds, and the next message probes the driver's port (and says it cannot
    be reached). False when it could not be sent (never raises)."""
    if driver is None or query is None or REACH.known_down(driver):
        return False
    payload = _payload({**message, QUIET: True})

    def send(sealed: SealedSocket) -> bool:
        if sealed.ready():
            raise ConnectionResetError("the driver closed the kept connection")
        sealed.send_frame(payload)
        return True

    return _over_kept(driver, query, timeout, send) is True


R = TypeVar("R")


def _over_kept(driver: DriverAddress, query: QueryKey, timeout: float, use: Callable[[SealedSocket], R]) -> R | None:
    """``use(connection)`` on the connection kept to the driver for this query and key, or (there is none, or it
    broke: ``use`` raised OSError or ValueError) once on a new one, kept after; None when neither could be used."""
    proof = hash(query.key.reveal())
    kept = _take_kept(driver, query, proof)
    if kept is not None:
        used, result = _use(kept, timeout, use)
        if used:
            return result
    made = _new(driver, query, proof, timeout)
    return None if made is None else _use(made, timeout, use)[1]


def _use(kept: tuple[KeptKey, SealedSocket], timeout: float, use: Callable[[SealedSocket], R]) -> tuple[bool, R | None]:
    """(True, what ``use`` gave) with the connection kept again; (False, None) with it closed when it broke."""
    key, sealed = kept
    try:
        sealed.settimeout(timeout)
        result = use(sealed)
    except (OSError, ValueError):
        sealed.close()
        return False, None
    _keep(key, sealed)
    return True, result


def _take_kept(driver: DriverAddress, query: QueryKey, proof: int) -> tuple[KeptKey, SealedSocket] | None:
    """A kept connection to this driver for this query and key, now this caller's alone (:func:`_keep` gives it
    back); None when there is none."""
    with _KEPT_LOCK:
        for key in _KEPT:
            if key[1:] == (driver.port, query.query, proof):
                return key, _KEPT.pop(key)
    return None


def _new(driver: DriverAddress, query: QueryKey, proof: int, timeout: float) -> tuple[KeptKey, SealedSocket] | None:
    """A new proven connection to the driver, to be kept; None when it cannot be made (or the driver is known to be
    unreachable: the file other processes may leave is looked up only here, a kept connection having shown it is
    reached)."""
    if not REACH.reachable(driver):
        return None
    connected = _connect(driver, query, timeout)
    if connected is None:
        return None
    host, sealed = connected
    user_timeout = getattr(socket, "TCP_USER_TIMEOUT", None)  # Linux
    if user_timeout is not None and sealed.sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sealed.sock.setsockopt(socket.IPPROTO_TCP, user_timeout, int(UNACKED_LIMIT * 1000))
    return (host, driver.port, query.query, proof), sealed


def _keep(key: KeptKey, sealed: SealedSocket) -> None:
    with _KEPT_LOCK:
        other = _KEPT.get(key)
        _KEPT[key] = sealed
    if other is not None:  # another thread made one meanwhile: one is kept
        other.close()


def tell(driver: DriverAddress | None, query: QueryKey | None, message: dict[str, Any]) -> None:
    """:func:`ask` from a thread of its own, the answer ignored: the caller never waits for the driver (and no
    thread starts for a driver known to be unreachable)."""
    if driver is not None and query is not None and REACH.reachable(driver):
        threading.Thread(target=ask, args=(driver, query, message), name="eventhubs-tell", daemon=True).start()
