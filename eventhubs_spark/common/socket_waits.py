"""Waiting for sockets to become readable or writable, at any descriptor number.

Why not ``select.select``: it takes descriptors below ``FD_SETSIZE`` (1,024) only, and raises
``ValueError: filedescriptor out of range in select()`` past it. A Python worker that sends to a
1,024-partition hub, or a receiver service serving that many links, holds more descriptors than that,
so every wait in the package goes through ``poll`` here (``selectors``' default where a platform has
no ``poll``), which has no such limit.
"""

from __future__ import annotations

import math
import select
import selectors
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
