"""A kept connection between a worker and a home, one of whose hosts is lost (no FIN, no RST: the packets stop) while
it is idle, is found out by keep-alive on either side: the home's serving thread is freed, the worker's next range
goes elsewhere at once; a worker that is alive but slow to read is never cut off (socket_waits.watch_peer)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from eventhubs_spark.common import socket_waits

ROOT = Path(__file__).resolve().parents[3]


def _in_namespace(mode: str, wait: float) -> dict:
    """tests/integration/peer_gone_app.py in a network namespace of its own (root, ip and nft: the firewall tests'
    needs; skipped, saying which is missing, elsewhere)."""
    from tests.integration.spark.test_firewall_spark import _namespace

    name = _namespace()
    try:
        done = subprocess.run(["ip", "netns", "exec", name, sys.executable, "-m", "tests.integration.peer_gone_app",
                               mode, str(wait)], cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_lost_host_is_found_out_on_both_sides_of_a_kept_connection():
    """Keep-alive shortened to 1 s idle, 1 s between probes and 2 probes. A home's connections from workers whose
    hosts are lost while they wait between ranges end within seconds (the home then serves one connection: the one
    it was sending on when the packets stopped, left to TCP's retransmission limit, see watch_peer: not cut
    shorter, for a slow reader's sake); and a worker's connection kept to a home whose host is lost knows it (its
    socket's error: a timed-out connection), so its next range is read elsewhere at once rather than after the
    home's silence limit. The same without keep-alive (the control) still serves all three ten seconds later, as it
    would for ever for the idle ones, each holding one of the listener's places for connections served at once,
    and the worker's connection looks healthy."""
    import errno

    watched = _in_namespace("watch", 20.0)
    assert watched["idle"] is not None and watched["idle"] < 12 and watched["serving"] == 1, watched
    assert not watched["sending ended"] and watched["kept"] == errno.ETIMEDOUT, watched
    plain = _in_namespace("plain", 10.0)
    assert plain["idle"] is None and plain["serving"] == 3 and plain["kept"] == 0, plain


@pytest.mark.slow
def test_a_worker_that_is_alive_but_slow_to_read_is_not_cut_off(monkeypatch):
    """The home sends faster than the worker reads (Spark busy with the batches before): the worker's window
    closes for four times the keep-alive's idle limit, yet every byte arrives and the send never fails. (With
    TCP_USER_TIMEOUT at 1 s this failed here: the kernel reset the connection, its peer alive.)"""
    monkeypatch.setattr(socket_waits, "KEEP_IDLE", 1)
    monkeypatch.setattr(socket_waits, "KEEP_INTERVAL", 1)
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    served, _ = server.accept()
    socket_waits.watch_peer(served)
    payload = uuid.uuid4().bytes * (1 << 19)  # 8 MiB: far past both sides' buffers
    failed: list[BaseException] = []

    def push() -> None:
        try:
            served.sendall(payload)
        except OSError as exc:
            failed.append(exc)

    sender = threading.Thread(target=push)
    sender.start()
    time.sleep(4.0)  # the window closed for four times the idle limit
    got = bytearray()
    client.settimeout(30)
    while len(got) < len(payload):
        piece = client.recv(1 << 20)
        assert piece, "the home closed the connection"
        got += piece
    sender.join(30)
    for sock in (client, served, server):
        sock.close()
    assert not failed and bytes(got) == payload


def test_watching_sets_the_kernels_limits_on_tcp_and_leaves_other_sockets_alone():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    served, _ = server.accept()
    try:
        assert served.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
        socket_waits.watch_peer(served)
        assert served.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert served.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == socket_waits.KEEP_IDLE
            assert served.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == socket_waits.KEEP_INTERVAL
            assert served.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == socket_waits.KEEP_COUNT
    finally:
        for sock in (client, served, server):
            sock.close()
    left, right = socket.socketpair()
    with left, right:
        socket_waits.watch_peer(left)  # a Unix socket: nothing to watch, nothing raised
        assert left.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
