"""Unit tests of :mod:`eventhubs_spark.common.socket_waits`."""

from __future__ import annotations

import fcntl
import resource
import socket
import time

from eventhubs_spark.common import socket_waits


def _high_pair() -> tuple[socket.socket, socket.socket]:
    """A connected pair whose descriptors are numbered past 1,024 (dup'ed there)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(2048, hard), hard))
    high = []
    for s in socket.socketpair():
        high.append(socket.socket(fileno=fcntl.fcntl(s.fileno(), fcntl.F_DUPFD, 1500)))
        s.close()
    return high[0], high[1]


def test_readable_past_1024_waits_then_sees_bytes_and_a_hang_up():
    a, b = _high_pair()
    try:
        assert a.fileno() > 1024
        started = time.monotonic()
        assert socket_waits.readable([a], 0.05) == []
        assert time.monotonic() - started >= 0.04
        b.sendall(b"x")
        assert socket_waits.readable([a, b], 1.0) == [a]
        assert a.recv(1) == b"x"
        b.close()
        assert socket_waits.readable([a], 1.0) == [a]  # the peer hung up: reading says so (b"")
        assert a.recv(1) == b""
    finally:
        a.close()
        b.close()


def test_writable_reports_a_refused_connect_as_ready_for_its_error_to_be_read():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    try:
        assert socket_waits.writable([s], 2.0) == [s]
        assert s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0
    finally:
        s.close()


def test_nothing_to_wait_on_returns_at_once():
    assert socket_waits.readable([], None) == []
