"""Helpers shared by the unit tests that came from test_network_units.py."""

from __future__ import annotations

import asyncio

from wsproto import ConnectionType, WSConnection
from wsproto.events import Request

from eventhubs_emulator import websocket as server_ws
from eventhubs_spark.auth.network import NetworkSettings
from eventhubs_spark.options import read_options

CONN = "Endpoint=sb://myns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub"


def net(**options: str) -> NetworkSettings:
    return read_options({"eventhubs.connectionString": CONN, **options}, "batch").settings.network


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default


class _Inner:
    def __init__(self) -> None:
        self.data = b""
        self.transport = None

    def connection_made(self, transport: object) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data

    def connection_lost(self, exc: object) -> None:
        pass


def _served() -> tuple[_Inner, _Transport, server_ws.WebSocketServerProtocol]:
    """The emulator's WebSocket side on a recording transport, carrying a recording AMQP connection."""
    inner, transport = _Inner(), _Transport()
    proto = server_ws.WebSocketServerProtocol(inner)  # type: ignore[arg-type]
    proto.connection_made(transport)
    return inner, transport, proto


def _client(protocol: str = "AMQPWSB10", path: str = "/$servicebus/websocket") -> tuple[WSConnection, bytes]:
    """A WebSocket client (wsproto, independent of the server under test) and its upgrade request."""
    client = WSConnection(ConnectionType.CLIENT)
    return client, client.send(Request(host="x", target=path, subprotocols=[protocol]))
