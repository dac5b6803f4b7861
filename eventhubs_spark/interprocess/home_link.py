"""The link from one executor to another's receiver service (a partition's home): reached, kept alive, proven.

A task reading from a home and a driver asking where partitions end both open it; the home's side is
:mod:`eventhubs_spark.executor.home_listener`.
"""

from __future__ import annotations

from eventhubs_spark.common import socket_waits
from eventhubs_spark.interprocess.sealed_socket import SealedSocket, client_handshake
from eventhubs_spark.interprocess.sockets import HANDSHAKE_TIMEOUT, first_connect
from eventhubs_spark.interprocess.task_ranges import Home, QueryKey


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
