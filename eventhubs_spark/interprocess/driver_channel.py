"""What a streaming query's executors tell its driver, and what they ask it: small messages, never data.

Spark gives a Python source no way to report from a task to the driver (no task metrics, no
accumulators) and no way to learn where its tasks run. So a streaming query's driver (its long-lived
stream runner process) listens on a TCP port, and every input partition carries where
(:class:`~eventhubs_spark.interprocess.task_ranges.DriverAddress`) with the query's key. Over it:

* receiver services announce themselves (``service``: their id and where other executors reach them),
  again every few seconds while they serve the query: the driver's list of live services, over which it
  places each partition's home (:mod:`eventhubs_spark.planning.partition_placement`);
* a task whose plan named no home yet (the query's first batch) asks for its partition's home (``home``);
* a task tells what an operator must learn on the driver (``worker_reads``: a worker reads for itself;
  ``home_unreachable``: a home could not be reached), logged once per executor and kind.

Each connection is proven and sealed (:mod:`eventhubs_spark.interprocess.sealed_socket`): the driver and the task or
service both show they hold the query's key, and the messages (JSON objects of at most :data:`MAX_MESSAGE` bytes)
cross encrypted. Asking is best effort: a task never fails because the driver cannot be reached.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from eventhubs_spark.common import socket_waits
from eventhubs_spark.interprocess.sealed_socket import RefusedError, SealedSocket, client_handshake, server_handshake
from eventhubs_spark.interprocess.task_ranges import DriverAddress, Home, QueryKey

_LOG = logging.getLogger(__name__)

MAX_MESSAGE = 64 * 1024
KEPT_IDLE = 600.0  # seconds the driver keeps an idle kept connection (ask_kept) open
# Finding out whether the driver can be reached costs a process at most this long: every address is tried at
# once (a firewall that drops packets makes a connect wait out its time-out; one address after another would
# add them up). A process that found it unreachable asks no more, and checks again in the background every
# RECHECK seconds, so a channel that heals (a firewall rule taken away) is used again within a minute.
PROBE_TIMEOUT = 2.0
RECHECK_ENV = "EVENTHUBS_SPARK_RECHECK"  # seconds between re-checks (tests shorten it: spark.executorEnv.<this>)


def _recheck() -> float:
    try:
        return max(0.1, float(os.environ.get(RECHECK_ENV, "60")))
    except ValueError:
        return 60.0


RECHECK = _recheck()
GIVE_UP_AFTER = 3600.0  # seconds a re-check thread keeps trying (a driver gone that long: its query has ended)
# A probe that found no answer within PROBE_TIMEOUT may have met a busy host (two cores, a starved process) rather
# than a firewall: the first background re-check comes after CONFIRM_AFTER seconds and allows CONFIRM_TIMEOUT, so a
# false alarm costs a few seconds without the driver (or a home), not a RECHECK's minute. No task waits for it.
CONFIRM_AFTER = 2.0
CONFIRM_TIMEOUT = 10.0
HANDSHAKE_TIMEOUT = 5.0  # a connection to a driver or a home must prove itself within this long
MAX_PENDING = 32  # connections not yet proven (a driver's or a home's): past it the oldest is cut off (see Gate)
MAX_THREADS = 256  # connections a driver or a home serves at once
_SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address

Handler = Callable[[dict[str, Any]], dict[str, Any] | None]


def host_addresses(bind: str = "0.0.0.0") -> tuple[str, ...]:
    """The addresses other hosts may reach this one at: the one address a listener was bound to, when it was
    bound to one; else Spark's own choice where set (SPARK_LOCAL_HOSTNAME, SPARK_LOCAL_IP), the host's name, its
    interfaces' IPv4 addresses, then loopback (one machine)."""
    if bind not in ("", "0.0.0.0", "::"):
        return (bind,)
    found: list[str] = [v for v in (os.environ.get("SPARK_LOCAL_HOSTNAME"), os.environ.get("SPARK_LOCAL_IP")) if v]
    with contextlib.suppress(OSError):
        found.append(socket.getfqdn())
    found.extend(_interface_addresses())
    found = [h for h in found if h and h != "localhost" and not h.startswith("127.")]
    return (*dict.fromkeys(found), "127.0.0.1")


def _interface_addresses() -> list[str]:
    """Each network interface's IPv4 address (Linux), loopback left out."""
    out: list[str] = []
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return out
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for name in names:
            try:
                raw = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # no IPv4 address on it
            address = socket.inet_ntoa(raw[20:24])
            if not address.startswith("127."):
                out.append(address)
    return out


def open_server(bind: str, ports: str, option: str) -> socket.socket:
    """A listening TCP socket on ``bind`` at the first free port of ``ports`` (see :func:`parse_ports`); an
    OSError naming ``option`` when none is free."""
    last: OSError | None = None
    for port in parse_ports(ports):
        try:
            return socket.create_server((bind or "0.0.0.0", port))
        except OSError as exc:
            last = exc
    raise OSError(f"no free port in {option}={ports!r} on address {bind!r}: {last}")


def parse_ports(text: str) -> list[int]:
    """``""`` or ``"0"``: any free port; ``"20000"``; ``"20000-20099"`` (eventhubs.executorPorts)."""
    text = text.strip()
    if text in ("", "0"):
        return [0]
    low, _, high = text.partition("-")
    first, last = int(low), int(high or low)
    return list(range(first, last + 1))


class Gate:
    """What a listener lets in, bounded whatever connects: at most ``max_pending`` connections that have not yet
    proven they hold the query's key (past that the oldest is cut off: a stranger's idle connections cannot keep
    the query's own out, which prove themselves within milliseconds) and at most ``max_serving`` served at once
    (past that a new one is closed at once). Counts what it turned away."""

    def __init__(self, max_pending: int, max_serving: int) -> None:
        self.max_pending = max_pending
        self.max_serving = max_serving
        self.turned_away = 0  # connections closed unserved, or cut off before proving themselves
        self._pending: dict[socket.socket, None] = {}  # oldest first
        self._serving = 0
        self._lock = threading.Lock()

    def admit(self, conn: socket.socket) -> bool:
        """Take ``conn`` in (False: over the cap, and closed); may cut off the oldest connection not yet proven."""
        with self._lock:
            if self._serving >= self.max_serving:
                self.turned_away += 1
                over = True
            else:
                over = False
                self._serving += 1
                self._pending[conn] = None
                oldest = next(iter(self._pending)) if len(self._pending) > self.max_pending else None
                if oldest is not None:
                    del self._pending[oldest]
                    self.turned_away += 1
        if over:
            with contextlib.suppress(OSError):
                conn.close()
            return False
        if oldest is not None:
            with contextlib.suppress(OSError):
                oldest.shutdown(socket.SHUT_RDWR)  # its thread's handshake fails at once, and it ends
        return True

    def proven(self, conn: socket.socket) -> None:
        with self._lock:
            self._pending.pop(conn, None)

    def done(self, conn: socket.socket) -> None:
        with self._lock:
            self._pending.pop(conn, None)
            self._serving -= 1

    def serve(self, conn: socket.socket, target: Callable[[], None], name: str) -> None:
        """Serve ``conn`` on a thread of its own (``target`` must call :meth:`done`); a thread that cannot start
        costs this connection only."""
        if not self.admit(conn):
            return
        try:
            threading.Thread(target=target, name=name, daemon=True).start()
        except BaseException:
            self.done(conn)
            with contextlib.suppress(OSError):
                conn.close()
            raise

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    @property
    def serving(self) -> int:
        """Connections served now (each holds a thread until it ends)."""
        with self._lock:
            return self._serving


class Refusals:
    """Connections a listener refused (a stranger, a wrong key, no protocol), said in the log at most once per kind
    of refusal and ``every`` seconds: the first of each kind at once, then one line with how many more of it were
    refused since. A flood of strangers (1,000 connections made 386 warnings) must not grow a service's or driver's
    log without bound; the count (``refused``) still counts every one. Kinds are the reasons with their numbers and
    ids taken out, at most ``_KINDS`` of them (any further one counts as the last)."""

    _KINDS = 16

    def __init__(self, every: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.clock = clock
        self.refused = 0
        self._last: dict[str, float] = {}
        self._unsaid: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, log: logging.Logger, why: BaseException | str, message: str, *args: Any) -> None:
        """One refusal for ``why``: counted, and ``message % args`` logged as a warning unless one of its kind was
        said within ``every`` seconds."""
        kind = re.sub(r"[0-9a-fA-F]{8,}|\d+", "#", str(why))[:200]
        with self._lock:
            self.refused += 1
            if kind not in self._last and len(self._last) >= self._KINDS:
                kind = "(another kind)"
            now = self.clock()
            last = self._last.get(kind)
            if last is not None and now - last < self.every:
                self._unsaid[kind] = self._unsaid.get(kind, 0) + 1
                return
            unsaid = self._unsaid.pop(kind, 0)
            self._last[kind] = now
        if unsaid:
            message += f" ({unsaid} more of these refused in the last {self.every:g} s, not said one by one)"
        log.warning(message, *args)


def accept_loop(server: socket.socket, still: Callable[[], bool], take: Callable[[socket.socket, Any], None],
                what: str) -> OSError | None:  # fmt: skip
    """Accept connections on ``server`` while ``still()``, handing each to ``take``; no error ends the loop but the
    socket's own end (returned; None when ``still()`` turned false): a moment without file descriptors, or a
    thread that cannot start, costs one connection. Each connection is watched for a peer gone without a word
    (:func:`~eventhubs_spark.common.socket_waits.watch_peer`): an idle one's thread ends, and frees its place,
    about a minute after the peer's host is lost."""
    while still():
        try:
            conn, peer = server.accept()
        except TimeoutError:
            continue
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED):
                time.sleep(0.05)
                continue
            return exc if still() else None
        try:
            socket_waits.watch_peer(conn)
            take(conn, peer)
        except Exception:
            _LOG.debug("eventhubs: %s: a connection was not served", what, exc_info=True)
            with contextlib.suppress(OSError):
                conn.close()
    return None


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
        while not self._closed.is_set():  # a kept connection (see ask_kept) sends message after message
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


def first_connect(hosts: tuple[str, ...], port: int, timeout: float) -> tuple[str, socket.socket] | None:
    """A TCP connection to the first of ``hosts`` that accepts one on ``port``, every address tried at once, within
    ``timeout`` in all (a dropped packet costs the time-out once, not once per address); None when none did."""
    return connect_or_refused(hosts, port, timeout)[0]


def connect_home(
    home: Home, query: QueryKey, timeout: float, handshake_timeout: float = HANDSHAKE_TIMEOUT
) -> SealedSocket:
    """A proven connection to another executor's receiver service (a home) for ``query``: reached within
    ``timeout`` (OSError naming the executor and where it was looked for otherwise), then proven within
    ``handshake_timeout`` (RefusedError when the home does not know the query or its key). What a task reading from
    a home and a driver asking where partitions end both open."""
    connected = first_connect(home.hosts, home.port, timeout)
    if connected is None:
        raise OSError(f"cannot reach executor {home.executor} at {', '.join(home.hosts)} port {home.port} within "
                      f"{timeout:g} s")  # fmt: skip
    sock = connected[1]
    # kept between tasks (and triggers): a home whose host is lost meanwhile is found out by keep-alive, so the
    # next range fails at once and is read elsewhere, instead of after the home's silence limit
    socket_waits.watch_peer(sock)
    try:
        sock.settimeout(handshake_timeout)
        return client_handshake(sock, query)
    except BaseException:
        sock.close()
        raise


def connect_or_refused(
    hosts: tuple[str, ...], port: int, timeout: float
) -> tuple[tuple[str, socket.socket] | None, bool]:
    """:func:`first_connect`, and whether every address refused the connection at once (nobody listens on that
    port there: a driver that stopped, or has not started yet), which says nothing of a firewall: one that
    drops the packets lets the time-out run out instead."""
    pending: dict[socket.socket, str] = {}
    refusals = attempts = 0
    for host in dict.fromkeys(hosts):
        try:
            infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM)
        except OSError:
            continue
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        attempts += 1
        started = sock.connect_ex(address)
        if started in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            pending[sock] = host
        else:
            refusals += started == errno.ECONNREFUSED
            sock.close()
    deadline = time.monotonic() + timeout
    won: tuple[str, socket.socket] | None = None
    try:
        while pending and won is None:
            left = max(0.0, deadline - time.monotonic())
            ready = socket_waits.writable(list(pending), left)
            if not ready and left == 0.0:
                break  # one last look past the deadline: a connection made while this thread waited for a CPU counts
            for sock in ready:
                host = pending.pop(sock)
                error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if won is None and error == 0:
                    sock.setblocking(True)
                    won = (host, sock)
                else:
                    refusals += error == errno.ECONNREFUSED
                    sock.close()
    finally:
        for sock in pending:
            sock.close()
    return won, won is None and attempts > 0 and refusals == attempts


def reaches(hosts: tuple[str, ...], port: int, timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether this process can connect to ``port`` at one of ``hosts`` (a connect, nothing sent; all at once)."""
    connected = first_connect(hosts, port, timeout)
    if connected is not None:
        connected[1].close()
    return connected is not None


def wait_until_reached(
    hosts: tuple[str, ...], port: int, every: float, still_down: Callable[[], None] | None = None
) -> bool:
    """Try ``port`` until it answers (True) or :data:`GIVE_UP_AFTER` has passed (False): the background re-check of
    something found unreachable. The first try comes soon and waits long (:data:`CONFIRM_AFTER`,
    :data:`CONFIRM_TIMEOUT`: a probe that met a busy host is corrected in seconds), then one every ``every``
    seconds; ``still_down`` is called after each try that found it unreachable still."""
    time.sleep(min(every, CONFIRM_AFTER))
    if reaches(hosts, port, CONFIRM_TIMEOUT):
        return True
    for _ in range(max(1, int(GIVE_UP_AFTER / every))):
        if still_down is not None:
            still_down()
        time.sleep(every)
        if reaches(hosts, port):
            return True
    return False


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

    def reachable(self, driver: DriverAddress) -> bool:
        with self._lock:
            if (driver.hosts, driver.port) in self._down:
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
_KEPT: dict[tuple[str, int, str, int], SealedSocket] = {}
_KEPT_LOCK = threading.Lock()


def ask_kept(
    driver: DriverAddress | None, query: QueryKey | None, message: dict[str, Any], timeout: float = 3.0
) -> dict[str, Any] | None:
    """:func:`ask` over a connection this process keeps to the query's driver, made (and proven) once: what a
    task says after every range (its reads, for the lag figures) then costs a sealed frame each way, not a
    connection and a handshake. A kept connection that broke (the driver closed it idle, or restarted) is
    made again once; None when the driver cannot be reached (never raises)."""
    if driver is None or query is None or not REACH.reachable(driver):
        return None
    payload = _payload(message)
    proof = hash(query.key.reveal())
    with _KEPT_LOCK:  # tasks of one worker come one after another; a second thread waits its turn
        for key in [k for k in _KEPT if k[1:] == (driver.port, query.query, proof)]:
            sealed = _KEPT.pop(key)
            try:
                sealed.settimeout(timeout)
                answer = _exchange(sealed, payload)
                _KEPT[key] = sealed
                return answer
            except (OSError, ValueError):
                sealed.close()  # broken: made again below
        connected = _connect(driver, query, timeout)
        if connected is None:
            return None
        host, sealed = connected
        try:
            answer = _exchange(sealed, payload)
        except (OSError, ValueError):
            sealed.close()
            return None
        _KEPT[(host, driver.port, query.query, proof)] = sealed
        return answer


def tell(driver: DriverAddress | None, query: QueryKey | None, message: dict[str, Any]) -> None:
    """:func:`ask` from a thread of its own, the answer ignored: the caller never waits for the driver (and no
    thread starts for a driver known to be unreachable)."""
    if driver is not None and query is not None and REACH.reachable(driver):
        threading.Thread(target=ask, args=(driver, query, message), name="eventhubs-tell", daemon=True).start()
