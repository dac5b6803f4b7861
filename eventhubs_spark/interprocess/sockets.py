"""The socket plumbing a query's listeners and connections share.

It covers where this host can be reached, a listening port from a range, a gate on connections not yet proven,
refusals said once a minute, an accept loop, and a connect that tries every address at once and says whether all
of them refused.

Used by the driver's channel (:mod:`eventhubs_spark.interprocess.driver_channel`), a home's listener
(:mod:`eventhubs_spark.executor.home_listener`) and the link to a home
(:mod:`eventhubs_spark.interprocess.home_link`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
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

_LOG = logging.getLogger(__name__)

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


def first_connect(hosts: tuple[str, ...], port: int, timeout: float) -> tuple[str, socket.socket] | None:
    """A TCP connection to the first of ``hosts`` that accepts one on ``port``, every address tried at once, within
    ``timeout`` in all (a dropped packet costs the time-out once, not once per address); None when none did."""
    return connect_or_refused(hosts, port, timeout)[0]


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
