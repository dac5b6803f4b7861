"""Waiting for sockets to become readable or writable, at any descriptor number.

Why not ``select.select``: it takes descriptors below ``FD_SETSIZE`` (1,024) only, and raises
``ValueError: filedescriptor out of range in select()`` past it. A Python worker that sends to a
1,024-partition hub, or a receiver service serving that many links, holds more descriptors than that,
so every wait in the package goes through ``poll`` here (``selectors``' default where a platform has
no ``poll``), which has no such limit.

And how long a connection that waits on its peer without a time-out of its own may wait for one that is gone
(:func:`watch_peer`).
"""

from __future__ import annotations

import contextlib
import math
import select
import selectors
import socket
from collections.abc import Sequence
from typing import Protocol, TypeVar


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


S = TypeVar("S", bound=_HasFileno)

_HAS_POLL = hasattr(select, "poll")
# Any event counts as ready, as select() counts them: a hang-up or an error makes the next read or the
# connect's SO_ERROR say what happened, instead of the wait hiding it.
_READ = (select.POLLIN | select.POLLPRI) if _HAS_POLL else 0
_WRITE = select.POLLOUT if _HAS_POLL else 0


def readable(socks: Sequence[S], timeout: float | None) -> list[S]:
    """Those of ``socks`` that can be read without waiting (or hung up, or failed), waiting at most ``timeout``
    seconds for one (None: until one is)."""
    return _wait(socks, timeout, _READ, selectors.EVENT_READ)


def writable(socks: Sequence[S], timeout: float | None) -> list[S]:
    """Those of ``socks`` that can be written (a non-blocking connect that finished, well or not), waiting at
    most ``timeout`` seconds for one (None: until one is)."""
    return _wait(socks, timeout, _WRITE, selectors.EVENT_WRITE)


def _wait(socks: Sequence[S], timeout: float | None, poll_mask: int, selector_mask: int) -> list[S]:
    if not socks:
        return []
    if _HAS_POLL:
        poller = select.poll()
        by_fd: dict[int, S] = {}
        for sock in socks:
            fd = sock.fileno()
            by_fd[fd] = sock
            poller.register(fd, poll_mask)
        wait_ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
        return [by_fd[fd] for fd, _ in poller.poll(wait_ms) if fd in by_fd]
    with selectors.DefaultSelector() as selector:  # pragma: no cover - platforms without poll
        for sock in socks:
            selector.register(sock, selector_mask)
        return [key.fileobj for key, _ in selector.select(timeout)]  # type: ignore[misc]


# A served TCP connection whose peer is gone without a word (its host lost or cut off by a firewall: no FIN, no RST)
# and which waits for the peer's next request is found out after KEEP_IDLE seconds of silence and KEEP_COUNT
# unanswered keep-alive probes KEEP_INTERVAL seconds apart: about a minute (Linux's own default is two hours).
KEEP_IDLE = 30
KEEP_INTERVAL = 10
KEEP_COUNT = 3


def watch_peer(sock: socket.socket) -> None:
    """Have the kernel find out when ``sock``'s peer is gone while the connection is idle, for a TCP connection
    served without a time-out of its own: a home's connection from another executor's worker waits for that
    worker's next range for as long as the query runs. Without keep-alive such a connection, its peer's host lost,
    holds its serving thread for ever, and each one counts against the listener's cap on connections served at
    once (MAX_THREADS): a long stream on a cluster that keeps losing hosts would fill it.

    A peer lost while the home is sending to it is left to TCP's own retransmission limit (15-30 minutes), not
    cut shorter with ``TCP_USER_TIMEOUT``: measured here, the kernel then also ends a connection whose peer is alive
    but has not read for that long (its window closed while Spark is busy downstream), acknowledged probes or
    not, and a slow task must not lose its home. Options a platform lacks are left out; a socket that is not TCP
    (a Unix socket) is left as it is."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    idle = getattr(socket, "TCP_KEEPIDLE", None) or getattr(socket, "TCP_KEEPALIVE", None)  # the latter: macOS
    for option, value in (
        (idle, KEEP_IDLE),
        (getattr(socket, "TCP_KEEPINTVL", None), KEEP_INTERVAL),
        (getattr(socket, "TCP_KEEPCNT", None), KEEP_COUNT),
    ):
        if option is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, option, value)
