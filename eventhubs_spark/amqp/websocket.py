"""The AMQP byte stream inside a WebSocket connection, cut from the socket's bytes a large read at a time.

Over WebSockets (port 443), the service sends AMQP as the payload of binary WebSocket messages, cut wherever it
likes. The SDK reads them through websocket-client one message at a time (a few small ``recv`` calls and Python
objects per message); the frame tap (:mod:`eventhubs_spark.amqp.frame_reader`) reads the socket in 256 KiB chunks
and needs only the AMQP bytes, so this decoder strips the WebSocket framing from whatever the socket gave and keeps
an incomplete frame for the next read (RFC 6455, section 5). Control frames are returned to the caller, which
answers a ping with a pong through websocket-client (so writes stay under its lock) and ends the connection on a
close.
"""

from __future__ import annotations

import struct

_H = struct.Struct(">H").unpack_from
_Q = struct.Struct(">Q").unpack_from

CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


class WebSocketClosed(OSError):
    """The service sent a close frame: the connection is over."""


class WebSocketStream:
    """Turns a WebSocket connection's raw bytes (as read from its socket) into the AMQP bytes they carry.

    A data frame's payload is passed on as its bytes arrive, without waiting for the frame's end (AMQP
    is a byte stream, and the service may send frames of megabytes); only a frame's header, and control
    frames (at most 125 bytes), are held until complete.
    """

    __slots__ = ("_control", "_head", "_mask", "_offset", "_opcode", "_remaining", "controls")

    def __init__(self) -> None:
        self._head = b""  # an incomplete frame header from the last read
        self._remaining = 0  # payload bytes of the current frame still to come
        self._opcode = BINARY
        self._mask: bytes | None = None
        self._offset = 0  # payload bytes of the current frame seen so far (for unmasking)
        self._control = b""  # the current control frame's payload so far
        self.controls: list[tuple[int, bytes]] = []  # (opcode, payload) of pings, pongs and closes seen

    def feed(self, data: bytes) -> bytes:
        """The AMQP bytes in ``data`` (the next bytes read from the socket); control frames go to
        :attr:`controls`."""
        if self._head:
            data = self._head + data
            self._head = b""
        end = len(data)
        pos = 0
        out: list[bytes] = []
        while pos < end:
            if self._remaining:
                take = min(self._remaining, end - pos)
                payload = data[pos : pos + take] if take < end or pos else data
                pos += take
                self._remaining -= take
                if self._mask is not None:
                    payload = _unmask(payload, self._mask, self._offset)
                self._offset += take
                if self._opcode <= BINARY:  # binary, its continuations (and text, which AMQP never sends)
                    out.append(payload)
                else:
                    self._control += payload
                    if not self._remaining:
                        self.controls.append((self._opcode, self._control))
                        self._control = b""
                continue
            header = self._header(data, pos, end)
            if header is None:
                self._head = data[pos:]
                break
            pos, self._opcode, self._remaining, self._mask = header
            self._offset = 0
            if not self._remaining and self._opcode > BINARY:
                self.controls.append((self._opcode, b""))
        if len(out) == 1:
            return out[0]
        return b"".join(out)

    @staticmethod
    def _header(data: bytes, pos: int, end: int) -> tuple[int, int, int, bytes | None] | None:
        """(position after the header, opcode, payload length, mask) of the frame at ``pos``, or None
        while its header is incomplete."""
        if end - pos < 2:
            return None
        b0, b1 = data[pos], data[pos + 1]
        n = b1 & 0x7F
        p = pos + 2
        if n == 126:
            if end - p < 2:
                return None
            n = _H(data, p)[0]
            p += 2
        elif n == 127:
            if end - p < 8:
                return None
            n = _Q(data, p)[0]
            p += 8
        mask = None
        if b1 & 0x80:  # a server never masks (RFC 6455 5.1), but a proxy on the way might
            if end - p < 4:
                return None
            mask = data[p : p + 4]
            p += 4
        return p, b0 & 0x0F, n, mask

    @property
    def pending(self) -> int:
        """Bytes of a frame header held for the next read."""
        return len(self._head)


def _unmask(payload: bytes, mask: bytes, offset: int) -> bytes:
    """``payload`` XOR the mask, the key starting ``offset`` bytes into the frame's payload."""
    n = len(payload)
    if not n:
        return payload
    start = offset % 4
    key = ((mask[start:] + mask[:start]) * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")
