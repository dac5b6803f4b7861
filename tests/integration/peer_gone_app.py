"""Run in a network namespace of its own (tests/integration/connector/test_peer_gone.py): a home's listener serves
two connections from a worker, one idle between ranges and one mid-range (the home sending), then an ``nftables``
rule drops every packet the worker sends, as when its host is lost. Prints, as JSON, how many seconds after the drop
the first serving thread ended (``idle``; null: both still served when the wait ran out), whether the sending one
ended too, and how many connections are still served.

``watch``: the listener's connections are watched for a gone peer (the shipped behaviour, its keep-alive shortened
to seconds); ``plain``: not watched (``watch_peer`` a no-op), the control."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.common import socket_waits
from eventhubs_spark.executor.home_listener import Listener
from eventhubs_spark.interprocess import service_protocol
from eventhubs_spark.interprocess.driver_channel import connect_home
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
    deadline = time.monotonic() + 5
    while listener.gate.serving != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert listener.gate.serving == 2, listener.gate.serving
    time.sleep(0.5)  # the handshake's last bytes acknowledged (delayed ACKs): the idle connection owes nothing
    nft("add", "table", "inet", "lost")
    nft("add", "chain", "inet", "lost", "input", "{ type filter hook input priority 0; }")
    for sock in (reading, idle):  # every packet from the worker's side of each connection: its host is gone
        nft("add", "rule", "inet", "lost", "input", "tcp", "sport", str(sock.sock.getsockname()[1]), "drop")
    dropped = time.monotonic()
    first_ended = None
    while time.monotonic() - dropped < wait:
        if listener.gate.serving < 2:
            first_ended = time.monotonic()
            break
        time.sleep(0.05)
    time.sleep(0.5)
    print(json.dumps({
        "idle": None if first_ended is None else round(first_ended - dropped, 2),
        "sending ended": "sending" in ended,
        "serving": listener.gate.serving,
    }))  # fmt: skip
    threading.Thread(target=reading.close, daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
