"""A small authenticated channel from a query's executors to its driver: notices only, never data or code.

Spark gives a Python source no way to report from a task to the driver (no task metrics, no
accumulators), so what an operator must learn on the driver, where they look (a worker reading for
itself because the executor's receiver service could not start or went away), would otherwise stay in
one executor's log among hundreds. A streaming query's driver (its long-lived stream runner process)
listens on a TCP port; every input partition carries where (:class:`ChannelAddress`: the driver's
addresses, the port and a random per-query key) and a task sends its notice there.

Only the query may talk to it: on each connection the driver sends a fresh random challenge, and the
task answers with ``HMAC-SHA256(key, challenge)`` before its notice (the key never crosses the wire); a
wrong or missing answer is refused and logged. A notice is a small JSON object (:data:`MAX_NOTICE`
bytes at most), read as data and logged by the driver, once per executor and kind. The key is a
:class:`~eventhubs_spark.auth.secret.Secret`: never in a log, an error or the plan.

Sending is best effort: a task never fails or waits long because the driver cannot be reached.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import logging
import os
import secrets
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .auth.secret import Secret

_LOG = logging.getLogger("eventhubs_spark")

CHALLENGE_BYTES = 32
MAX_NOTICE = 16 * 1024
_LENGTH = struct.Struct(">I")
_SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


@dataclass(frozen=True)
class ChannelAddress:
    """Where a query's driver listens (every address it may be reached at, tried in order) and its key."""

    hosts: tuple[str, ...]
    port: int
    key: Secret


def prove(key: Secret, challenge: bytes) -> bytes:
    """The answer to ``challenge`` that shows the key is held, without showing the key."""
    return hmac.new(key.reveal().encode("utf-8"), challenge, hashlib.sha256).digest()


def new_key() -> Secret:
    return Secret(secrets.token_urlsafe(32))


def driver_hosts() -> tuple[str, ...]:
    """The addresses executors may reach this host at: Spark's own choice where set (SPARK_LOCAL_HOSTNAME,
    SPARK_LOCAL_IP), the host's name, its interfaces' IPv4 addresses, then loopback (local mode)."""
    found: list[str] = [v for v in (os.environ.get("SPARK_LOCAL_HOSTNAME"), os.environ.get("SPARK_LOCAL_IP")) if v]
    with contextlib.suppress(OSError):
        found.append(socket.getfqdn())
    found.extend(_interface_addresses())
    found.append("127.0.0.1")
    return tuple(dict.fromkeys(h for h in found if (h and not h.startswith("127.")) or h == "127.0.0.1"))


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
    """The driver's end: accepts notices from the query's tasks and hands each to ``on_notice``."""

    def __init__(self, on_notice: Callable[[dict[str, Any]], None], bind: str = "0.0.0.0") -> None:
        self.on_notice = on_notice
        self.key = new_key()
        self._server = socket.create_server((bind, 0))
        self._server.settimeout(1.0)
        self.port = int(self._server.getsockname()[1])
        self.refused = 0
        self._address = ChannelAddress(driver_hosts(), self.port, self.key)  # looked up once: names may be slow
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name="eventhubs-driver-channel", daemon=True).start()

    def address(self) -> ChannelAddress:
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
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True).start()

    def _serve(self, conn: socket.socket, peer: Any) -> None:
        with conn:
            conn.settimeout(5.0)
            try:
                challenge = secrets.token_bytes(CHALLENGE_BYTES)
                conn.sendall(challenge)
                answer = _recv_exactly(conn, hashlib.sha256().digest_size)
                if not hmac.compare_digest(answer, prove(self.key, challenge)):
                    self.refused += 1
                    _LOG.warning("eventhubs: refused a connection to the query's driver channel from %s: it does "
                                 "not hold the query's key", peer[0])  # fmt: skip
                    conn.sendall(b"N")
                    return
                conn.sendall(b"Y")
                (size,) = _LENGTH.unpack(_recv_exactly(conn, _LENGTH.size))
                if size > MAX_NOTICE:
                    raise ValueError(f"a notice of {size} bytes")
                notice = json.loads(_recv_exactly(conn, size).decode("utf-8"))
                if not isinstance(notice, dict):
                    raise ValueError("a notice is a JSON object")
            except (OSError, ValueError) as exc:
                _LOG.debug("eventhubs: driver channel: a connection from %s ended: %s", peer[0], exc)
                return
        self.on_notice(notice)


def send_notice(address: ChannelAddress | None, notice: dict[str, Any], timeout: float = 2.0) -> bool:
    """Send ``notice`` to the query's driver; False when it could not be delivered (never raises)."""
    if address is None:
        return False
    payload = json.dumps(notice, separators=(",", ":")).encode("utf-8")[:MAX_NOTICE]
    for host in address.hosts:
        try:
            with socket.create_connection((host, address.port), timeout=timeout) as sock:
                challenge = _recv_exactly(sock, CHALLENGE_BYTES)
                sock.sendall(prove(address.key, challenge))
                if _recv_exactly(sock, 1) != b"Y":
                    _LOG.warning("eventhubs: the query's driver refused this task's notice (a key mismatch)")
                    return False
                sock.sendall(_LENGTH.pack(len(payload)) + payload)
                return True
        except OSError:
            continue  # not reachable at this address: the next one
    return False


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        if not chunk:
            raise ConnectionResetError("the other side closed the connection")
        buf += chunk
    return bytes(buf)
