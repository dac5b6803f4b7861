"""What a streaming query's executors tell its driver, and what they ask it: small messages, never data.

Spark gives a Python source no way to report from a task to the driver (no task metrics, no
accumulators) and no way to learn where its tasks run. So a streaming query's driver (its long-lived
stream runner process) listens on a TCP port, and every input partition carries where
(:class:`~eventhubs_spark.ranges.DriverAddress`) with the query's key. Over it:

* receiver services announce themselves (``service``: their id and where other executors reach them),
  again every few seconds while they serve the query: the driver's list of live services, over which it
  places each partition's home (:mod:`.placement`);
* a task whose plan named no home yet (the query's first batch) asks for its partition's home (``home``);
* a task tells what an operator must learn on the driver (``worker_reads``: a worker reads for itself;
  ``home_unreachable``: a home could not be reached), logged once per executor and kind.

Each connection is proven and sealed (:mod:`.sealed`): the driver and the task or service both show
they hold the query's key, and the messages (JSON objects of at most :data:`MAX_MESSAGE` bytes) cross
encrypted. Asking is best effort: a task never fails because the driver cannot be reached.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

from .ranges import DriverAddress, QueryKey
from .sealed import RefusedError, SealedSocket, client_handshake, server_handshake

_LOG = logging.getLogger("eventhubs_spark")

MAX_MESSAGE = 64 * 1024
KEPT_IDLE = 600.0  # seconds the driver keeps an idle kept connection (ask_kept) open
_SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address

Handler = Callable[[dict[str, Any]], dict[str, Any] | None]


def host_addresses() -> tuple[str, ...]:
    """The addresses other hosts may reach this one at: Spark's own choice where set (SPARK_LOCAL_HOSTNAME,
    SPARK_LOCAL_IP), the host's name, its interfaces' IPv4 addresses, then loopback (one machine)."""
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


class DriverChannel:
    """The driver's end: each proven message goes to ``handle``, whose answer (if any) goes back."""

    def __init__(self, query: QueryKey, handle: Handler, bind: str = "0.0.0.0") -> None:
        self.query = query
        self.handle = handle
        self._server = socket.create_server((bind, 0))
        self._server.settimeout(1.0)
        self.port = int(self._server.getsockname()[1])
        self._address = DriverAddress(host_addresses(), self.port)  # looked up once: names may be slow
        self.refused = 0
        self.accepted = 0  # connections taken (a kept one counts once however many messages it carries)
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name="eventhubs-driver-channel", daemon=True).start()

    def address(self) -> DriverAddress:
        return self._address

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, peer = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True).start()

    def _serve(self, conn: socket.socket, peer: Any) -> None:
        with conn:
            conn.settimeout(30.0)  # an answer may wait for the services to settle (see source.Homes)
            try:
                sealed, _ = server_handshake(conn, lambda q: self.query if q == self.query.query else None)
            except RefusedError as exc:
                self.refused += 1
                _LOG.warning("eventhubs: refused a connection to the query's driver from %s: %s", peer[0], exc)
                return
            except OSError as exc:
                _LOG.debug("eventhubs: driver channel: a connection from %s ended: %s", peer[0], exc)
                return
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


class _Refused(Exception):
    """The driver refused this process: no other address will do better."""


def _connect(driver: DriverAddress, query: QueryKey, timeout: float) -> tuple[str, SealedSocket] | None:
    """A proven connection to the driver at the first of its addresses that answers; None when none does.
    Raises :class:`_Refused` (after saying so) when the driver refuses the query's proof."""
    for host in driver.hosts:
        try:
            sock = socket.create_connection((host, driver.port), timeout=timeout)
        except OSError:
            continue  # not reachable at this address: the next one
        try:
            return host, client_handshake(sock, query)
        except RefusedError as exc:
            sock.close()
            _LOG.warning("eventhubs: the query's driver at %s:%d refused this process: %s", host, driver.port, exc)
            raise _Refused from exc
        except OSError:
            sock.close()
    return None


def ask(
    driver: DriverAddress | None, query: QueryKey | None, message: dict[str, Any], timeout: float = 3.0
) -> dict[str, Any] | None:
    """Send ``message`` to the query's driver and return its answer; None when it could not be reached or
    refused (never raises). ``timeout``: for connecting, and for the answer."""
    if driver is None or query is None:
        return None
    payload = _payload(message)
    for host in driver.hosts:
        try:
            connected = _connect(DriverAddress((host,), driver.port), query, timeout)
        except _Refused:
            return None
        if connected is None:
            continue  # not reachable at this address: the next one
        sealed = connected[1]
        try:
            return _exchange(sealed, payload)
        except (OSError, ValueError):
            continue
        finally:
            sealed.close()
    return None


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
    if driver is None or query is None:
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
        try:
            connected = _connect(driver, query, timeout)
        except _Refused:
            return None
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
    """:func:`ask` from a thread of its own, the answer ignored: the caller never waits for the driver."""
    if driver is not None and query is not None:
        threading.Thread(target=ask, args=(driver, query, message), name="eventhubs-tell", daemon=True).start()
