"""Run in a network namespace of its own (tests/integration/connector/test_peer_gone.py): a home's listener serves
three connections from workers: one idle between ranges and one mid-range (the home sending), whose workers' hosts
are then lost (an ``nftables`` rule drops every packet they send), and one a worker keeps between tasks whose home's
host is lost (every packet the home sends it dropped). Prints, as JSON, how many seconds after the drop the home
served one connection only (``idle``; null: not within the wait), whether the sending one ended, how many
connections are still served, and whether the worker's kept connection knows its home is gone (its socket's
error, ``kept``: 0 when it does not).

``watch``: the listener's connections are watched for a gone peer (the shipped behaviour, its keep-alive shortened
to seconds); ``plain``: not watched (``watch_peer`` a no-op), the control."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.common import socket_waits
from eventhubs_spark.executor.home_listener import Listener
from eventhubs_spark.interprocess import service_protocol
from eventhubs_spark.interprocess.home_link import connect_home
from eventhubs_spark.interprocess.service_framing import RAW, REMOTE_READ, recv, send
from eventhubs_spark.interprocess.task_ranges import Home, RangeRequest, ReceiverConfig, RemoteRead, new_query_key

CONN = "Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub;UseDevelopmentEmulator=true"


def nft(*args: str) -> None:
    subprocess.run(["nft", *args], check=True)


def main(mode: str, wait: float) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    if mode == "watch":
        socket_waits.KEEP_IDLE, socket_waits.KEEP_INTERVAL, socket_waits.KEEP_COUNT = 1, 1, 2
    else:
        socket_waits.watch_peer = lambda sock: None  # type: ignore[assignment]
    ended: dict[str, float] = {}

    def serve(sealed, request) -> bool:  # a range that never ends: sends until the connection fails
        chunk = b"x" * 65536
        try:
            while True:
                send(sealed, RAW, chunk)
        except OSError:
            ended["sending"] = time.monotonic()
            return False

    listener = Listener("home", serve, lambda delta: None)
    query = new_query_key()
    settings = parse_connection_string(CONN)
    listener.register(RangeRequest(ReceiverConfig(), "0", 0, 10, True, query=query, homes=True, settings=settings,
                                   bind="127.0.0.1"))  # fmt: skip
    home = Home("home", ("127.0.0.1",), int(listener.port or 0))
    reading = connect_home(home, query, 5.0)
    send(reading, REMOTE_READ, service_protocol.encode_request(RemoteRead.of(
        RangeRequest(ReceiverConfig(), "0", 0, 10, True, settings=settings))))  # fmt: skip
    for _ in range(4):  # the range flows
        kind, _payload = recv(reading, 1 << 20)
        assert kind == RAW, kind
    idle = connect_home(home, query, 5.0)  # proven, then no request: a worker between two tasks
    kept = connect_home(home, query, 5.0)  # likewise, on the worker's side of a home that will be lost
    deadline = time.monotonic() + 5
    while listener.gate.serving != 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert listener.gate.serving == 3, listener.gate.serving
    time.sleep(0.5)  # the handshake's last bytes acknowledged (delayed ACKs): the idle connection owes nothing
    nft("add", "table", "inet", "lost")
    nft("add", "chain", "inet", "lost", "input", "{ type filter hook input priority 0; }")
    for sock in (reading, idle):  # every packet from the worker's side of each connection: its host is gone
        nft("add", "rule", "inet", "lost", "input", "tcp", "sport", str(sock.sock.getsockname()[1]), "drop")
    # every packet the home sends the kept connection's worker: the home's host is gone, as the worker sees it
    nft("add", "rule", "inet", "lost", "input", "tcp", "dport", str(kept.sock.getsockname()[1]), "drop")
    dropped = time.monotonic()
    one_left = None
    kept_error = 0
    while time.monotonic() - dropped < wait and (one_left is None or not kept_error):
        if listener.gate.serving <= 1 and one_left is None:
            one_left = time.monotonic()
        kept_error = kept_error or kept.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)  # read once: it clears
        time.sleep(0.05)
    time.sleep(0.5)
    print(json.dumps({
        "idle": None if one_left is None else round(one_left - dropped, 2),
        "sending ended": "sending" in ended,
        "serving": listener.gate.serving,
        "kept": kept_error,
    }))  # fmt: skip
    threading.Thread(target=reading.close, daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
