"""AMQP over WebSockets, as the service serves it on port 443: ``wss://<namespace>/$servicebus/websocket``
with the subprotocol ``AMQPWSB10``.

Networks that allow only HTTPS reach Event Hubs this way, often through an HTTP proxy (CONNECT). The
AMQP bytes travel as the payload of binary WebSocket messages, cut wherever the sender likes: AMQP is
a byte stream, so the emulator's :class:`~eventhubs_emulator.connection.Connection` reads the joined
payloads exactly as it reads a TCP stream, and everything it writes goes out as one binary message per
write. Written from RFC 6455: the opening handshake, masked frames from the client, fragments, ping
(answered with pong) and close.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import struct
from collections.abc import Callable
from typing import Any

_LOG = logging.getLogger("eventhubs_emulator")

PATH = "/$servicebus/websocket"
SUBPROTOCOL = "AMQPWSB10"
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455, section 1.3
_MAX_HANDSHAKE = 16384
_H = struct.Struct(">H")
_Q = struct.Struct(">Q")

CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def accept_key(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` answer to a client's ``Sec-WebSocket-Key``."""
    return base64.b64encode(hashlib.sha1(key.strip().encode("ascii") + _GUID).digest()).decode("ascii")


def encode_frame(opcode: int, payload: bytes | bytearray | memoryview, mask: bytes | None = None) -> bytes:
    """One final frame; a server sends unmasked frames, a client masked ones (``mask``: 4 bytes)."""
    n = len(payload)
    mask_bit = 0x80 if mask is not None else 0
    if n < 126:
        head = bytes((0x80 | opcode, mask_bit | n))
    elif n < 65536:
        head = bytes((0x80 | opcode, mask_bit | 126)) + _H.pack(n)
    else:
        head = bytes((0x80 | opcode, mask_bit | 127)) + _Q.pack(n)
    if mask is None:
        return head + bytes(payload)
    return head + mask + unmask(payload, mask)


def unmask(data: bytes | bytearray | memoryview, mask: bytes) -> bytes:
    """XOR ``data`` with the repeated 4-byte ``mask`` (masking and unmasking are the same), as one big
    integer operation rather than a loop per byte."""
    n = len(data)
    if n == 0:
        return b""
    key = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")


def parse_frame(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, bool, bytes, int] | None:
    """(opcode, final, payload unmasked, position after the frame) of the frame at ``pos``, or None
    while it is incomplete."""
    end = len(buf)
    if end - pos < 2:
        return None
    b0, b1 = buf[pos], buf[pos + 1]
    n = b1 & 0x7F
    p = pos + 2
    if n == 126:
        if end - p < 2:
            return None
        n = _H.unpack_from(buf, p)[0]
        p += 2
    elif n == 127:
        if end - p < 8:
            return None
        n = _Q.unpack_from(buf, p)[0]
        p += 8
    mask = None
    if b1 & 0x80:
        if end - p < 4:
            return None
        mask = bytes(buf[p : p + 4])
        p += 4
    if end - p < n:
        return None
    payload = bytes(buf[p : p + n])
    if mask is not None:
        payload = unmask(payload, mask)
    return b0 & 0x0F, bool(b0 & 0x80), payload, p + n


class _FramedTransport(asyncio.Transport):
    """What the AMQP connection writes to: each write becomes one binary WebSocket message."""

    def __init__(self, outer: WebSocketServerProtocol, transport: asyncio.Transport) -> None:
        super().__init__()
        self._outer = outer
        self._transport = transport

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._transport.write(encode_frame(BINARY, data))

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
        self.buffer = bytearray()
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
        self.buffer += data
        if not self.upgraded:
            self._handshake()
            if not self.upgraded:
                return
        self._frames()

    # -- the opening handshake --
    def _handshake(self) -> None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > _MAX_HANDSHAKE:
                self._refuse(431, "Request Header Fields Too Large")
            return
        head = bytes(self.buffer[:end]).decode("latin-1")
        del self.buffer[: end + 4]
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if len(parts) != 3 or parts[0] != "GET":
            self._refuse(400, "Bad Request", "expected a WebSocket upgrade (GET)")
            return
        if parts[1].split("?")[0] != self.path:
            self._refuse(404, "Not Found", f"AMQP over WebSockets is served at {self.path}")
            return
        key = headers.get("sec-websocket-key")
        if headers.get("upgrade", "").lower() != "websocket" or not key:
            self._refuse(400, "Bad Request", "expected Upgrade: websocket with a Sec-WebSocket-Key")
            return
        offered = [p.strip() for p in headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
        if self.subprotocol not in offered:
            self._refuse(400, "Bad Request", f"the subprotocol {self.subprotocol} is required")
            return
        assert self.transport is not None
        self.transport.write(
            (
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Accept: {accept_key(key)}\r\nSec-WebSocket-Protocol: {self.subprotocol}\r\n\r\n"
            ).encode("ascii")
        )
        self.upgraded = True
        self.inner.connection_made(_FramedTransport(self, self.transport))

    def _refuse(self, status: int, reason: str, text: str = "") -> None:
        assert self.transport is not None
        body = text.encode()
        self.transport.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
        )
        self.transport.close()

    # -- frames --
    def _frames(self) -> None:
        buf = self.buffer
        pos = 0
        data: list[bytes] = []
        while True:
            frame = parse_frame(buf, pos)
            if frame is None:
                break
            opcode, _final, payload, pos = frame
            if opcode in (BINARY, CONTINUATION, TEXT):
                data.append(payload)
            elif opcode == PING:
                self.pings += 1
                self._send(PONG, payload)
            elif opcode == CLOSE:
                self.close(_H.unpack_from(payload)[0] if len(payload) >= 2 else 1000)
                break
            elif opcode == PONG:
                self.pongs += 1
        del buf[:pos]
        if data:
            self.inner.data_received(b"".join(data))

    def _send(self, opcode: int, payload: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(encode_frame(opcode, payload))

    def ping(self, payload: bytes = b"") -> None:
        """Send a ping (the client answers with a pong); for tests of a client's frame reader."""
        self._send(PING, payload)

    def close(self, code: int = 1000) -> None:
        """The closing handshake's first step from this side (or the answer to the client's), then close."""
        if self.transport is None or self.closing:
            return
        self.closing = True
        self._send(CLOSE, _H.pack(code))
        self.transport.close()


def protocol_factory(inner_factory: Callable[[], asyncio.Protocol]) -> Callable[[], WebSocketServerProtocol]:
    """A factory for ``loop.create_server`` that serves ``inner_factory``'s protocol over WebSockets."""
    return lambda: WebSocketServerProtocol(inner_factory())
