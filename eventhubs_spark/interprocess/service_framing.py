"""The receiver service's framing: how messages cross its socket.

Each message is a kind byte and a payload length, then the payload; a range comes back as ``RAW`` chunks of the
undecoded AMQP frames with each message's span, which the worker decodes into record batches.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import socket
import struct
from typing import TYPE_CHECKING, TypeAlias

from eventhubs_spark.common import socket_waits
from eventhubs_spark.interprocess.sealed_socket import SealedSocket

if TYPE_CHECKING:  # the receiver service sends bytes only: pyarrow is the worker's (30 ms of the service's start)
    import pyarrow as pa

WIRE_VERSION = 5  # raised whenever a message below changes: old services and new workers never meet
MESSAGE = struct.Struct(">cQ")  # kind, payload length
# the request's range id (8 bytes), the next sequence number (8), message count n (8), each message's start and
# end (n + n int64, native order), then the buffer they are in: the frames as they arrived, undecoded
# (amqp.messages.RawEvents.spans)
RAW = b"W"
SPANS = struct.Struct("=qqq")  # 24 bytes: the offsets that follow stay 8-byte aligned
DONE = b"D"  # the range's counts (JSON, with its range id under "range")
ERROR = b"E"  # the range's failure (JSON: type, message, example, retriable; see protocol.encode_error)
Conn: TypeAlias = "socket.socket | SealedSocket"  # a worker's Unix socket, or another executor's sealed one
READ = b"R"  # a RangeRequest (its shared JSON line, then its own fields: see protocol.encode_request): data only
HELLO = b"H"  # a RangeRequest of a stream whose first batch knows no homes yet: register, answer DONE at once
REMOTE_READ = b"r"  # between executors, sealed: a RemoteRead (JSON), answered as a READ
# from a driver, sealed: empty, answered as ENDS with where the service's links' partitions end (JSON, see
# interprocess.partition_ends)
ENDS = b"n"
ALIVE = b"A"  # empty: the service is still at the range (see ALIVE_EVERY)
# A service at a range says so at least this often, even while Event Hubs sends it nothing...
ALIVE_EVERY = 1.0
# ...so a worker that hears nothing for this long knows the service stopped answering (a stopped process, a
# firewall that drops): it reads the rest itself rather than wait out the receiver time-out and a minute more.
# Generous against a starved CPU: a healthy service's keep-alive thread wakes every ALIVE_EVERY seconds.
SILENT_LIMIT = 10.0

_IOV_MAX = 512  # pieces per sendmsg call, well under Linux's 1024


Part: TypeAlias = "bytes | memoryview | pa.Buffer"
Message: TypeAlias = "tuple[bytes, tuple[Part, ...]]"  # kind, parts


def send(sock: Conn, kind: bytes, *parts: Part) -> None:
    send_messages(sock, (kind, parts))


def send_messages(sock: Conn, *messages: Message) -> None:
    """Messages, each its header and parts, gathered into as few writes as the socket takes (one, for a
    request, a small chunk, or a range's last chunk with its end). A write per part would wake the reader
    once for each: on a busy executor each wake-up can hand the CPU to the other side before this side
    is done."""
    pending: list[memoryview] = []
    for kind, parts in messages:
        views = [memoryview(p).cast("B") for p in parts]
        pending.append(memoryview(MESSAGE.pack(kind, sum(v.nbytes for v in views))))
        pending.extend(v for v in views if v.nbytes)
    while pending:
        sent = sock.sendmsg(pending[:_IOV_MAX])
        while sent:
            if sent >= pending[0].nbytes:
                sent -= pending.pop(0).nbytes
            else:
                pending[0], sent = pending[0][sent:], 0


def recv_exactly(sock: Conn, size: int) -> bytearray:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if not n:
            raise ConnectionResetError("the receiver service closed the connection")
        got += n
    return buf


def ready(sock: Conn) -> bool:
    """True when the next message has begun to arrive: reading it does not wait for the other side."""
    if isinstance(sock, SealedSocket):
        return sock.ready()
    return bool(socket_waits.readable([sock], 0))


MAX_MESSAGE = 1 << 30  # bytes of one message of any kind: a length past it is not this protocol
MAX_REQUEST = 1 << 20  # bytes of a request a service takes (a range request is a few kilobytes)


def recv(sock: Conn, limit: int = MAX_MESSAGE) -> tuple[bytes, bytearray]:
    """The next message; its length is checked against ``limit`` before anything is allocated for it."""
    kind, size = MESSAGE.unpack(recv_exactly(sock, MESSAGE.size))
    if size > limit:
        raise ConnectionError(f"a message of {size} bytes, over the {limit} this side takes: not this protocol")
    return kind, recv_exactly(sock, size)
