"""Helpers shared by the unit tests that came from test_sealed_units.py."""

from __future__ import annotations

import socket
import threading

from eventhubs_spark.interprocess.sealed_socket import client_handshake, server_handshake
from eventhubs_spark.interprocess.task_ranges import QueryKey


def _pair(server_knows: QueryKey | None, client_has: QueryKey):
    a, b = socket.socketpair()
    out: dict[str, object] = {}

    def serve() -> None:
        try:
            out["server"] = server_handshake(
                b, lambda q: server_knows if server_knows and q == server_knows.query else None
            )
        except Exception as exc:
            out["server_error"] = exc

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        out["client"] = client_handshake(a, client_has)
    except Exception as exc:
        out["client_error"] = exc
        a.close()  # as a task does: it reads elsewhere
    thread.join(5)
    return out, a, b
