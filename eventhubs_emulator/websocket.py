"""AMQP over WebSockets, as the service serves it on port 443: ``wss://<namespace>/$servicebus/websocket``
with the subprotocol ``AMQPWSB10``.

Networks that allow only HTTPS reach Event Hubs this way, often through an HTTP proxy (CONNECT). The
AMQP bytes travel as the payload of binary WebSocket messages, cut wherever the sender likes: AMQP is
a byte stream, so the emulator's :class:`~eventhubs_emulator.connection.Connection` reads the joined
payloads exactly as it reads a TCP stream, and everything it writes goes out as one binary message per
write. The WebSocket protocol itself (the opening handshake, masking, fragments, ping and pong, the
closing handshake) is wsproto's, a maintained implementation of RFC 6455 (a test dependency of the
emulator, imported only when a WebSocket port is served); this module only routes: the path, the
subprotocol, and the bytes to and from the AMQP connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Message,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

_LOG = logging.getLogger("eventhubs_emulator")

PATH = "/$servicebus/websocket"
SUBPROTOCOL = "AMQPWSB10"


class _FramedTransport(asyncio.Transport):
    """What the AMQP connection writes to: each write becomes one binary WebSocket message."""

    def __init__(self, outer: WebSocketServerProtocol, transport: asyncio.Transport) -> None:
        super().__init__()
        self._outer = outer
        self._transport = transport

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._outer.send(Message(data=bytes(data)))

    def close(self) -> None:
        self._outer.close(1000)

    def abort(self) -> None:
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)


class WebSocketServerProtocol(asyncio.Protocol):
    """The server side of one WebSocket connection, carrying one AMQP connection (``inner``)."""

    def __init__(self, inner: asyncio.Protocol, path: str = PATH, subprotocol: str = SUBPROTOCOL) -> None:
        self.inner = inner
        self.path = path
        self.subprotocol = subprotocol
        self.transport: asyncio.Transport | None = None
        self.ws = WSConnection(ConnectionType.SERVER)
        self.upgraded = False
        self.closing = False
        self.pings = 0
        self.pongs = 0

    # -- asyncio callbacks --
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upgraded:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.upgraded:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.upgraded:
            self.inner.resume_writing()

    def data_received(self, data: bytes) -> None:
        try:
            self.ws.receive_data(data)
            events = list(self.ws.events())
        except RemoteProtocolError as exc:  # not a WebSocket request, or a frame RFC 6455 does not allow
            self._protocol_error(exc)
            return
        payload: list[bytes] = []
        for event in events:
            if isinstance(event, BytesMessage | TextMessage):
                text_or_bytes: bytes | bytearray | str = event.data
                payload.append(text_or_bytes.encode() if isinstance(text_or_bytes, str) else bytes(text_or_bytes))
                continue
            if payload:  # in order: what came before a control frame goes first
                self.inner.data_received(b"".join(payload))
                payload = []
            self._event(event)
        if payload:
            self.inner.data_received(b"".join(payload))

    def _event(self, event: Event) -> None:
        if isinstance(event, Request):
            self._upgrade(event)
        elif isinstance(event, Ping):
            self.pings += 1
            self.send(event.response())
        elif isinstance(event, Pong):
            self.pongs += 1
        elif isinstance(event, CloseConnection):
            if self.ws.state is ConnectionState.REMOTE_CLOSING:
                self.send(event.response())
            self.closing = True
            if self.transport is not None:
                self.transport.close()

    # -- the opening handshake --
    def _upgrade(self, request: Request) -> None:
        if request.target.split("?")[0] != self.path:
            self._refuse(404, f"AMQP over WebSockets is served at {self.path}")
            return
        if self.subprotocol not in request.subprotocols:
            self._refuse(400, f"the subprotocol {self.subprotocol} is required")
            return
        self.send(AcceptConnection(subprotocol=self.subprotocol))
        self.upgraded = True
        assert self.transport is not None
        self.inner.connection_made(_FramedTransport(self, self.transport))

    def _refuse(self, status: int, text: str) -> None:
        body = text.encode()
        headers = [(b"content-length", str(len(body)).encode()), (b"connection", b"close")]
        self.send(RejectConnection(status_code=status, headers=headers, has_body=True))
        self.send(RejectData(data=body))
        if self.transport is not None:
            self.transport.close()

    def _protocol_error(self, exc: RemoteProtocolError) -> None:
        """A request that is no WebSocket upgrade is answered with wsproto's rejection (400); a bad frame after
        the upgrade closes the connection with 1002 (protocol error)."""
        _LOG.info("emulator: WebSocket protocol error: %s", exc)
        if not self.upgraded and isinstance(exc.event_hint, RejectConnection):
            self.send(exc.event_hint)
        elif self.upgraded:
            self.close(1002)
        if self.transport is not None:
            self.transport.close()

    # -- sending --
    def send(self, event: Event) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(self.ws.send(event))

    def ping(self, payload: bytes = b"") -> None:
        """Send a ping (the client answers with a pong); for tests of a client's frame reader."""
        self.send(Ping(payload=payload))

    def close(self, code: int = 1000) -> None:
        """The closing handshake's first step from this side, then close."""
        if self.transport is None or self.closing:
            return
        self.closing = True
        if self.ws.state is ConnectionState.OPEN:
            self.send(CloseConnection(code=code))
        self.transport.close()


def protocol_factory(inner_factory: Callable[[], asyncio.Protocol]) -> Callable[[], WebSocketServerProtocol]:
    """A factory for ``loop.create_server`` that serves ``inner_factory``'s protocol over WebSockets."""
    return lambda: WebSocketServerProtocol(inner_factory())
