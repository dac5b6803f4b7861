"""Frames read off one AMQP connection, with the connector's links' transfers taken on the spot.

The SDK reads a connection frame by frame: two ``recv`` calls per frame, its own decoder building a
tuple of fields per performative and a ``Message`` per transfer, then a walk through the connection,
the session and the link before the message reaches a buffer. For the events a receiver reads that is
most of the client's CPU. A :class:`FrameTap` takes the connection's reads over (the transport's
``receive_frame``, so every reader of the connection, the SDK's own included, goes through it) and does far less
per event: how, :class:`FrameTap` says.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import struct
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from eventhubs_spark.amqp import conditions, sdk
from eventhubs_spark.amqp.messages import (
    A_SEQUENCE_NUMBER,
    ANNOTATIONS_MAP8,
    RawEvents,
    Unsupported,
    offset_and_time,
    sequence_number,
    windows,
)
from eventhubs_spark.amqp.websocket import CLOSE, PING, WebSocketClosed, WebSocketStream
from eventhubs_spark.common import socket_waits
from eventhubs_spark.errors import DecodeError
from eventhubs_spark.positions import geo_segments

_LOG = logging.getLogger(__name__)

_HEADER = struct.Struct(">IBBH").unpack_from
_I = struct.Struct(">I").unpack_from
_Q = struct.Struct(">q").unpack_from
_ANNOTATIONS8 = ANNOTATIONS_MAP8  # message annotations as a map8, the first section
_SEQ_FIRST = A_SEQUENCE_NUMBER  # the sequence number's key, and a long
# The service's form since it stamps replication segments: the segment first (a byte, -1 where the hub is not
# geo-replicated), then the sequence number: the segment's byte at 36, the sequence number's key at 37.
_EPOCH_FIRST = b"\xa3\x1bx-opt-sequence-number-epoch\x54"
assert len(_EPOCH_FIRST) == 30
_CHUNK = 256 * 1024
_BATCH = 512  # transfers decoded per call before the SDK gets control back
_EMPTY = (1, b"EMPTY")
_FIVE_NULLS = b"\x40\x40\x40\x40\x40"  # what the SDK makes of an empty frame: it only notes that something arrived
_TRANSFER_LIST8 = b"\x00\x53\x14\xc0"  # a transfer whose fields are a list8
# settled (true) and more (false) as the performative's last fields, by its field count: all 11 with the
# last five null, or the first 6
_SETTLED_TAIL = {11: b"\x41\x42" + _FIVE_NULLS, 6: b"\x41\x42"}
MAX_EVENT_BYTES = 1 << 20  # the largest event Event Hubs takes (premium and dedicated tiers; 256 KB in basic)
# Bytes of a link's newest message read for its receiver service's vouch (LinkSink.newest): the header and
# annotations come first, and Event Hubs' own (offset, enqueued time, sequence number, partition key) take about
# 150; a message whose annotations run past this vouches for nothing (its partition is asked of Event Hubs).
NEWEST_HEAD = 4096
_RUN = 4096  # frames one run takes at most before the SDK gets control back
_VECTOR_MIN = 16  # runs this long read their sequence numbers with numpy
# A run's frames are found with numpy (FrameTap._cut_vector) from this many bytes on; below, one by one.
_VECTOR_BYTES = 16 * 1024
# The service's form of a message's first 69 bytes (see _position), as numpy compares them.
_ANNOTATIONS8_V = np.void(_ANNOTATIONS8)
_EPOCH_FIRST_V = np.void(_EPOCH_FIRST)
_SEQ_FIRST_V = np.void(_SEQ_FIRST)


class ReadAheadBudget:
    """The bytes a process's receiving links may hold ahead of their tasks, together.

    Each link may hold ``eventhubs.readAheadBytes`` (8 MiB by default): fine for the 4-32 partitions an
    executor usually serves, but an executor holding links to all 1,024 partitions of a Dedicated hub would
    hold up to 8 GiB. So the process's links share ``total`` bytes: each may hold ``total`` divided by the
    links open, never less than ``floor`` (so a link still reads ahead a useful batch) nor more than its own
    bound. With up to 32 links nothing changes; with 1,024 links of 8 MiB, 256 KiB each (256 MiB in all).
    """

    def __init__(self, links: Callable[[], int], total: int = 256 << 20, floor: int = 256 << 10) -> None:
        self.links = links
        self.total = total
        self.floor = floor

    def per_link(self) -> int:
        return max(self.floor, self.total // max(1, self.links()))


class LinkSink:
    """Where the events of one receiving link go: decoded on the reading thread into ``incoming``,
    handed over to readers through ``ready`` under ``cond``."""

    __slots__ = (
        "budget",
        "cond",
        "credit",
        "error",
        "exception",
        "handed",
        "incoming",
        "max_bytes",
        "max_events",
        "newest",
        "on_room",
        "on_vouch",
        "partial",
        "ready",
        "ready_bytes",
        "ready_events",
        "received",
        "received_bytes",
        "starved",
    )

    def __init__(
        self,
        credit: int = 500,
        max_events: int = 1 << 62,
        max_bytes: int = 1 << 62,
        budget: ReadAheadBudget | None = None,
    ) -> None:
        self.credit = credit  # the link's credit window (prefetch)
        self.max_events = max_events  # what it may hold before its reader takes it (read-ahead bounds)
        self.max_bytes = max_bytes
        self.budget = budget  # the process's bytes of read-ahead, shared by its links: lowers max_bytes
        self.cond = threading.Condition()
        self.incoming = RawEvents()  # the reading thread's, unlocked
        self.partial: bytearray | None = None  # a message spread over several transfer frames
        self.handed = bytearray()  # message bytes in frames left to the SDK (add_sdk_message)
        self.ready: list[RawEvents] = []
        self.ready_events = 0
        self.ready_bytes = 0
        self.received = 0  # events decoded in all
        self.received_bytes = 0  # their frames' bytes (what sizes the credit window, see window())
        # The newest event the link brought: its position, offset and enqueued time (epoch ms), read from its
        # message as the reading thread hands it over (publish), so a driver's question after a batch, when every
        # link has new events, finds them read instead of reading every link's on the trigger's path (bench
        # `planning`). A link that is open and has credit would have brought any later event,
        # so its receiver service can tell a driver where the partition ends without asking Event Hubs
        # (:mod:`eventhubs_spark.planning.executor_ends`). None also when the newest event's message does not show
        # its offset in the service's form: the link vouches for nothing then.
        self.newest: tuple[int, str, int | None] | None = None
        # Told (on whichever thread made it) after what the link vouches for may have changed: its newest event,
        # its end, its read-ahead held back or freed, its opening; set by the receiver the link reads for, whose
        # pool keeps what every link vouches for (:meth:`eventhubs_spark.executor.receiver_pool.ReceiverPool.
        # newest_ends`), so a driver's question reads that instead of walking 1,024 receivers.
        self.on_vouch: Callable[[], None] | None = None
        self.error: str | None = None  # why the link or its connection ended, once it has
        self.exception: BaseException | None = None
        # The reading thread held the link's credit back because the sink was full: the reader that makes
        # room wakes it (``on_room``, the connection's wake-up), else it would sleep out its socket wait
        # (up to 0.2 s) with the link dry, and so would the task waiting on this sink.
        self.starved = False
        self.on_room: Callable[[], None] | None = None

    def publish(self) -> None:
        """Hand the decoded events to readers (called on the reading thread)."""
        if not self.incoming.seqs:
            return
        chunk, self.incoming = self.incoming, RawEvents()
        buffer, starts, ends = chunk.parts[-1]
        start = int(starts[-1])
        # (its head only, a copy: the sections before the body, where the annotations are; cheap at every hand-over)
        facts = offset_and_time(bytes(buffer[start : min(int(ends[-1]), start + NEWEST_HEAD)]))
        self.newest = None if facts is None else (chunk.seqs[-1], facts[0], facts[1])
        self.vouch_changed()
        with self.cond:
            self.ready.append(chunk)
            self.ready_events += len(chunk)
            self.ready_bytes += chunk.nbytes
            self.cond.notify_all()

    def add_sdk_message(self, message: Any) -> None:
        """A message the SDK decoded itself (a transfer the tap left to it, e.g. one sent unsettled), in
        its place in the order. The sink keeps the bytes the tap saw go by (``handed``), so the message is
        decoded where the others are, by the same decoder."""
        payload, self.handed = bytes(self.handed), bytearray()
        self.incoming.append(_event_sequence_number(message), payload)
        self.publish()

    def fail(self, error: str, exc: BaseException | None = None) -> None:
        """The link ended: ``error`` says why (``exc``: the exception, when one was raised)."""
        with self.cond:
            if self.error is None:
                self.error = error
                self.exception = exc
            self.cond.notify_all()
        self.vouch_changed()

    def vouch_changed(self) -> None:
        """What the link vouches for may have changed (called after the change): its receiver's pool looks again
        (``on_vouch``)."""
        on_vouch = self.on_vouch
        if on_vouch is not None:
            on_vouch()

    def buffered(self) -> tuple[int, int]:
        """(events, bytes) decoded and not yet taken."""
        return self.ready_events + len(self.incoming), self.ready_bytes + self.incoming.nbytes

    def window(self) -> int:
        """The credit the link is topped up to: ``credit`` (the prefetch), but never more events than the
        bytes bound holds at the size its events have had so far, so what is in flight stays within that
        bound as what is held does (1 MB events at a prefetch of 500 would be 500 MB per partition). Before
        any event arrived, each is taken to be as large as the service allows (a few events, then the real
        size: one round trip)."""
        each = self.received_bytes // self.received if self.received else MAX_EVENT_BYTES
        return max(1, min(self.credit, self.bytes_bound() // max(each, 1)))

    def bytes_bound(self) -> int:
        """The bytes it may hold: ``max_bytes``, or less when the process's links share a smaller budget."""
        if self.budget is None:
            return self.max_bytes
        return min(self.max_bytes, self.budget.per_link())

    def has_room(self) -> bool:
        """True while what it holds is under its bounds: its link may be given more credit."""
        events, nbytes = self.buffered()
        return events < self.max_events and nbytes < self.bytes_bound()

    def room_for_credit(self) -> bool:
        """On the reading thread, before it tops the link's credit up: :meth:`has_room`, and when there is
        none, the sink is marked starved so that the :meth:`take` that makes room wakes the reading thread.
        (Marked before looking: either this thread sees the room, or the taker sees the mark.)"""
        self.starved = True
        if self.has_room():
            self.starved = False
            return True
        self.vouch_changed()  # held back: its link no longer vouches
        return False

    def take(self, wanted: int) -> RawEvents | None:
        """Up to ``wanted`` ready events in one piece (the caller holds ``cond``), or None."""
        out = self._take(wanted)
        if out is not None and self.starved and self.has_room():
            self.starved = False
            self.vouch_changed()
            if self.on_room is not None:
                self.on_room()  # the link may read on: its credit is topped up without waiting out a read
        return out

    def _take(self, wanted: int) -> RawEvents | None:
        if not self.ready:
            return None
        out = self.ready.pop(0)
        if len(out) > wanted:
            self.ready.insert(0, out)
            out = out.take(wanted)
        while self.ready and len(out) + len(self.ready[0]) <= wanted:
            out.extend(self.ready.pop(0))  # fewer, larger batches: Spark pays per batch too
        self.ready_events -= len(out)
        self.ready_bytes -= out.nbytes
        return out


class FrameTap:
    """Reads one SDK connection's socket in place of the SDK's reader, as long as the connection lives:

    * the socket is read in large chunks and frames are cut from the buffer (TLS records read on while
      there are more; WebSocket framing stripped, :mod:`eventhubs_spark.amqp.websocket`);
    * a transfer on a link the connector reads (it carries a :class:`LinkSink`) goes straight into that
      sink: its message's bytes and sequence number, nothing else, for the task to decode a range at a
      time column by column (:mod:`eventhubs_spark.codec.layout`). The session's and link's counters move as the
      SDK moves them, so flow control, credit and windows stay the SDK's;
    * the usual case, a run of one link's single-frame transfers sent settled back to back (a partition's
      backlog), is taken in one pass (:meth:`FrameTap._run`): the frames are found with numpy (where a
      transfer's first bytes are in the socket read, then the chain of frames from one to the next), so no
      Python step is made per frame; the sequence numbers are read together with numpy, the counters move
      once for the run, and the messages stay where they arrived, as spans of the socket read
      (:class:`~eventhubs_spark.amqp.messages.RawEvents`), until the task decodes them;
    * every other frame (attach, flow, detach, CBS and management replies, transfers of other links)
      goes to the SDK as it would have, decoded by the SDK.

    Events wait in the sink's ``incoming`` on the thread that reads; they are handed to
    readers in bulk (:meth:`LinkSink.publish`) whenever the buffer runs dry and before any wait, so a
    reader never waits behind a frame that was already read.
    """

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.transport = sdk.transport(connection)
        # Over WebSockets the tap reads the TCP/TLS socket under websocket-client's WebSocket and strips
        # the framing itself; until websocket-client is between two frames, the SDK's reader goes on.
        self.websocket = sdk.websocket_of(self.transport)
        self.sock = self.transport.sock if self.websocket is None else sdk.websocket_socket(self.websocket)
        self._stream = WebSocketStream() if self.websocket is not None else None
        # Frame by frame through the transport's own reader (raw frames, no SDK decoding), where the socket
        # cannot be read directly: a transport this tap does not know (for good, said once), or a
        # WebSocket that websocket-client is still in the middle of (until it is between two frames).
        self.unsupported = None if isinstance(self.sock, socket.socket) else type(self.transport).__name__
        self._by_frame = self.unsupported is not None or (
            self.websocket is not None and not sdk.websocket_between_frames(self.websocket)
        )
        self._data = b"" if self._by_frame else sdk.take_buffered_bytes(self.transport)
        self._pos = 0
        self.transport_name = (
            "websocket" if self.websocket is not None else "tls" if isinstance(self.sock, ssl.SSLSocket) else "tcp"
        )
        self._chunk = bytearray(_CHUNK)
        self._routes: dict[int, tuple[Any, Any, LinkSink] | None] = {}
        self._touched: set[LinkSink] = set()
        self._moved: set[LinkSink] = set()  # sinks published to since the connection's driver last asked
        self._controls = 0  # frames other than transfers and heartbeats since it last asked (a detach among them?)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        # A wake-up never blocks its caller (a task holding a sink's lock): a full pair has one pending anyway.
        self._wake_w.setblocking(False)
        # How long a read waits for bytes (the connection's driver shortens it while links open, when
        # every answer is awaited by a step that comes after the read).
        self.timeout = 0.2
        self.transfers = 0  # transfer frames taken here, not left to the SDK
        self._starts_of: tuple[bytes, bytes, np.ndarray] | None = None  # see _starts
        sdk.set_receive_frame(self.transport, self.receive_frame)

    # -- for the thread that drives the connection --
    def wake(self) -> None:
        """Make a read that waits on the socket return at once (another thread needs the connection)."""
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def publish(self) -> None:
        touched, self._touched = self._touched, set()
        for sink in touched:
            sink.publish()
        if touched:
            self._moved |= touched

    def take_moved(self) -> set[LinkSink]:
        """The sinks events were published to since the last call (their links' credit went down)."""
        moved, self._moved = self._moved, set()
        return moved

    def take_controls(self) -> bool:
        """True when a frame other than a transfer or a heartbeat went to the SDK since the last call: only such
        a frame (a detach, an end, a close) can have ended a link."""
        controls, self._controls = self._controls, 0
        return controls > 0

    def close(self) -> None:
        self.publish()
        for s in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                s.close()

    # -- the transport's receive_frame --
    def receive_frame(self, **kwargs: Any) -> tuple[Any, Any]:
        """The next frame for the SDK, as ``(channel, (performative, fields))``; ``(None, None)`` when
        nothing arrived within the socket's time-out. Transfers of tapped links are consumed here."""
        decoded = 0
        while True:
            data, pos = self._data, self._pos
            end = len(data)
            if end - pos >= 8:
                # the protocol header, if it came after the tap was put on ("A" as a frame size's first byte
                # would mean a frame of over 1 GB)
                if data[pos] == 0x41 and data[pos : pos + 4] == b"AMQP":
                    self._pos = pos + 8
                    self._controls += 1
                    return 0, (0, data[pos : pos + 8])
                size, doff, _type, channel = _HEADER(data, pos)
                if end - pos >= size:
                    self._pos = frame_end = pos + size
                    body = pos + doff * 4
                    if body >= frame_end:
                        return channel, _EMPTY  # a heartbeat
                    if data[body + 2] == 0x14:
                        taken = self._run(data, pos, end, channel) if doff == 2 else 0
                        if not taken and self._transfer(data, channel, body, frame_end):
                            taken = 1
                        if taken:
                            decoded += taken
                            if decoded >= _BATCH:
                                return channel, _EMPTY
                            continue
                    self._routes.clear()  # attach, detach, end...: links may have come or gone
                    self._controls += 1
                    return channel, sdk.decode_frame(memoryview(data)[body:frame_end])
            if decoded:
                return 0, _EMPTY  # the SDK notes that frames arrived and asks again
            if not self._fill(size if end - pos >= 8 else 8):
                return None, None

    def _fill(self, frame_size: int) -> bool:
        """Read more bytes; False when none came within the socket's time-out."""
        self.publish()  # nobody waits on events this thread holds while it waits itself
        if self._by_frame:
            if self.unsupported is None and sdk.websocket_between_frames(self.websocket):
                self._by_frame = False  # the WebSocket's next byte starts a frame: read the socket from here on
                self._data = self._data[self._pos :] + sdk.take_buffered_bytes(self.transport)
                self._pos = 0
                return True
            return self._fill_by_frame()
        sock = self.sock
        tls = isinstance(sock, ssl.SSLSocket)
        if not (tls and sock.pending() > 0):  # bytes TLS decrypted but not handed out yet
            timeout = None if sock.gettimeout() is None else self.timeout  # None: the SDK asked to block
            readable = socket_waits.readable([sock, self._wake_r], timeout)
            if self._wake_r in readable:
                try:
                    while self._wake_r.recv(256):
                        pass
                except OSError:
                    pass
            if sock not in readable:
                return False
        leftover = self._data[self._pos :]
        want = max(_CHUNK, frame_size - len(leftover))
        if want > len(self._chunk):
            self._chunk = bytearray(want)
        view = memoryview(self._chunk)
        try:
            received = sock.recv_into(view, want)
        except OSError as exc:
            if conditions.is_timeout(exc):
                return False
            raise
        if not received:
            raise OSError("Server unexpectedly closed connection")
        if tls:
            received = self._more_tls(sock, view, received, want)
        fresh = bytes(view[:received])
        if self._stream is not None:
            fresh = self._stream.feed(fresh)
            if self._stream.controls:
                self._answer_controls()
        self._data = leftover + fresh if leftover else fresh
        self._pos = 0
        return True

    def _fill_by_frame(self) -> bool:
        """One frame, raw, from the transport's own reader (``read``); False when none came in time."""
        try:
            header, _channel, body = sdk.read_raw_frame(self.transport)
        except TimeoutError:
            return False
        frame = bytes(header) + (bytes(body) if body is not None else b"")
        self._data = self._data[self._pos :] + frame
        self._pos = 0
        return True

    @staticmethod
    def _more_tls(sock: Any, view: memoryview, received: int, want: int) -> int:
        """TLS hands out one record (at most 16 KiB) per read: read on while more is decrypted or waiting on
        the socket, so a chunk holds as many frames as plain TCP would give. A record that has not fully
        arrived ends the chunk (its bytes wait in the TLS layer, and ``pending`` sees them next time)."""
        while received < want:
            if sock.pending() <= 0:
                readable = socket_waits.readable([sock], 0)
                if not readable:
                    break
            try:
                n = sock.recv_into(view[received:], want - received)
            except (TimeoutError, BlockingIOError, ssl.SSLWantReadError):
                break
            if not n:
                break  # the end of the stream: the next read says so
            received += n
        return received

    def _answer_controls(self) -> None:
        """Pings get their pong; a close ends the connection (the SDK's reader would do the same)."""
        assert self._stream is not None
        controls, self._stream.controls = self._stream.controls, []
        for opcode, payload in controls:
            if opcode == PING:
                sdk.websocket_pong(self.websocket, payload)
            elif opcode == CLOSE:
                code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else 1005
                raise WebSocketClosed(f"the service closed the WebSocket connection (code {code})")

    def _run(self, data: bytes, pos: int, end: int, channel: int) -> int:
        """Take the run of transfers that starts at ``pos`` in one pass, as long as the frames are alike: one
        tapped link's single-frame deliveries, sent settled, in one encoding of the performative (the service
        sends a partition's events that way). Per frame only its size and a few byte runs are compared; the
        SDK's counters move once for the run, the sequence numbers are read together (:func:`_sequences`)
        and the messages stay in place in the buffer. Returns how many frames it took (0: the first frame is
        not of that kind; :meth:`_transfer` looks at it)."""
        body = pos + 8
        if not data.startswith(_TRANSFER_LIST8, body):
            return 0
        count, c = data[body + 5], data[body + 6]
        if c == 0x43:
            handle, key_end = 0, body + 7
        elif c == 0x52:
            handle, key_end = data[body + 7], body + 8
        elif c == 0x70:
            handle, key_end = _I(data, body + 7)[0], body + 11
        else:
            return 0
        tail = _SETTLED_TAIL.get(count)
        if tail is None:
            return 0
        route = self._route(channel, handle)
        if route is None:
            return 0
        session, link, sink = route
        if sink.partial is not None:
            return 0  # a message over several frames is being put together: one frame at a time
        # The run takes every such frame the read holds (the service sent them within the link's credit), and
        # the credit is topped up after it: later than one frame at a time would, by the run's few hundred
        # microseconds, while the service still has credit (a read, at most _CHUNK, is a fraction of a usual
        # window: 2,000 events of 200 B are 0.7 MB). Stopping where the credit came down to half cut most reads'
        # runs in two, and a run's numpy calls cost as much as ~500 frames' own work.
        window = sink.window()
        key = data[body + 5 : key_end]  # the field count and the handle
        if end - pos >= _VECTOR_BYTES:
            at, to = self._cut_vector(data, pos, end, key, tail, _RUN)
        else:
            at, to = _cut_loop(data, pos, end, key, tail, _RUN)
        n = len(at)
        if not n:
            return 0
        p = int(to[-1])
        self._pos = p
        credit = sdk.count_transfers(session, link, n)
        first, last = int(at[0]), p
        if 2 * (last - first) < len(data):  # keep only the run's span, not the whole read, past this call
            data = data[first:last]
            at -= first
            to -= first
        sink.incoming.add_run(data, at, to, _sequences(data, at, to))
        sink.received += n
        sink.received_bytes += p - pos
        self.transfers += n
        self._touched.add(sink)
        if credit <= window >> 1 and sink.room_for_credit():
            sdk.grant(link, sink.window())  # topped up before it runs out, so the service never waits on it
        return n

    def _cut_vector(
        self, data: bytes, pos: int, end: int, key: bytes, tail: bytes, most: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """:func:`_cut_loop`'s run, found with numpy: no Python step per frame. Where a frame of the run can begin
        is where its frame header and performative's first bytes are (:meth:`_starts`, once per socket read);
        the run is the longest chain of them from ``pos``, each the previous one's end, in which every frame
        passes :func:`_cut_loop`'s checks. The same bytes inside a message's body only break the chain: the run
        ends there, and the next one starts where the true frame ends (past them)."""
        starts = self._starts(data, data[pos + 4 : pos + 12])
        first = int(np.searchsorted(starts, pos))
        frames = starts[first : first + most]
        if not len(frames) or frames[0] != pos:
            return frames[:0], frames[:0]
        buf = np.frombuffer(data, np.uint8)
        size = len(buf)
        frame_end = frames + windows(buf, 4)[frames].view(">u4").astype(np.int64)
        payload = frames + 13 + buf[np.minimum(frames + 12, size - 1)]
        tlen, klen = len(tail), len(key)
        good = (frame_end <= end) & (payload <= frame_end) & (payload - tlen >= frames + 13 + klen)
        good &= windows(buf, klen)[np.minimum(frames + 13, size - klen)] == np.void(key)
        good &= windows(buf, tlen)[np.clip(payload - tlen, 0, size - tlen)] == np.void(tail)
        good[1:] &= frame_end[:-1] == frames[1:]  # each frame begins where the one before it ends
        n = len(good) if good.all() else int(np.argmin(good))
        return payload[:n], frame_end[:n]

    def _starts(self, data: bytes, prefix: bytes) -> np.ndarray:
        """Every position ``p`` of ``data`` with ``prefix`` (a frame header's last four bytes and a transfer's
        first four) at ``p + 4``, in order: found once per socket read (a run is often cut short by the credit,
        and the next one reads the same buffer)."""
        cached = self._starts_of
        if cached is not None and cached[0] is data and cached[1] == prefix:
            return cached[2]
        buf = np.frombuffer(data, np.uint8)
        found = np.flatnonzero(buf[10:] == 0x14)  # the transfer's code, at p + 10
        found = found[found <= len(buf) - 12]
        found = found[windows(buf, 8)[found + 4] == np.void(prefix)].astype(np.int64)
        self._starts_of = (data, prefix, found)
        return found

    def _route(self, channel: int, handle: int) -> tuple[Any, Any, LinkSink] | None:
        key = (channel << 32) | handle
        routes = self._routes
        return routes[key] if key in routes else routes.setdefault(key, self._resolve(channel, handle))

    def _transfer(self, data: bytes, channel: int, body: int, end: int) -> bool:
        """Consume a transfer frame of a tapped link; False leaves it to the SDK."""
        # 00 53 14, then the performative's list: handle, delivery-id, delivery-tag, message-format,
        # settled, more, ... (trailing fields may be left out).
        c = data[body + 3]
        if c == 0xC0:
            count = data[body + 5]
            p = body + 6
            payload = body + 5 + data[body + 4]
        elif c == 0xD0:
            count = _I(data, body + 8)[0]
            p = body + 12
            payload = body + 8 + _I(data, body + 4)[0]
        else:
            return False
        if count < 1:
            return False
        c = data[p]
        if c == 0x43:
            handle = 0
            p += 1
        elif c == 0x52:
            handle = data[p + 1]
            p += 2
        elif c == 0x70:
            handle = _I(data, p + 1)[0]
            p += 5
        else:
            return False
        route = self._route(channel, handle)
        if route is None:
            return False
        # settled and more: the common layouts read from the end of the list (6 fields, or all 11 with the
        # last five null, each flag one byte); anything else walks the fields
        tail = data[payload - 7 : payload] if count == 11 else b""
        if count == 6 and data[payload - 2] == 0x41 and (data[payload - 1] == 0x42 or data[payload - 1] == 0x41):
            settled, more = True, data[payload - 1] == 0x41
        elif tail[2:] == _FIVE_NULLS and tail[0] == 0x41 and (tail[1] == 0x42 or tail[1] == 0x41):
            settled, more = True, tail[1] == 0x41
        else:
            settled, more = self._flags(data, p, count)
            if settled is None:
                return self._leave(route[2], data, payload, end)
        session, link, sink = route
        partial = sink.partial
        if not settled and partial is None:
            # the SDK settles it (Event Hubs sends every event settled); and its continuations
            return self._leave(sink, data, payload, end)
        sink.received_bytes += end - payload
        window = sink.window()
        if sdk.count_transfer(session, link, more) <= window >> 1 and sink.room_for_credit():
            sdk.grant(link, window)  # topped up before it runs out, so the service never waits on it
        if more:
            if partial is None:
                partial = sink.partial = bytearray()
            partial += data[payload:end]
            self.transfers += 1
            return True
        self.transfers += 1
        if partial is not None:
            sink.partial = None
            partial += data[payload:end]
            message = bytes(partial)
            self._decode(sink, message, 0, len(message))
        else:
            self._decode(sink, data, payload, end)
        self._touched.add(sink)
        return True

    @staticmethod
    def _leave(sink: LinkSink, data: bytes, payload: int, end: int) -> bool:
        """Leave a transfer of a tapped link to the SDK (False), noting its bytes first (see add_sdk_message)."""
        sink.handed += data[payload:end]
        return False

    @staticmethod
    def _flags(data: bytes, p: int, count: int) -> tuple[Any, bool]:
        """(settled, more) of a transfer performative whose fields begin at ``p`` (after the handle), by
        walking them; (None, False) for an encoding this reader leaves to the SDK."""
        settled = more = False
        for field in range(1, min(count, 6)):
            c = data[p]
            if field == 2:  # delivery-tag: binary
                if c == 0xA0:
                    p += 2 + data[p + 1]
                elif c == 0xB0:
                    p += 5 + _I(data, p + 1)[0]
                elif c == 0x40:
                    p += 1
                else:
                    return None, False
                continue
            if c == 0x40 or c == 0x43 or c == 0x42 or c == 0x41:
                value = c == 0x41
                p += 1
            elif c == 0x52 or c == 0x56:
                value = data[p + 1] == 1
                p += 2
            elif c == 0x70:
                value = False
                p += 5
            else:
                return None, False
            if field == 4:
                settled = value
            elif field == 5:
                more = value
        return settled, more

    def _decode(self, sink: LinkSink, data: bytes, start: int, end: int) -> None:
        """Keep one message's bytes with its position (its sequence number, with its replication segment on a
        geo-replicated hub: the one thing read here): the task decodes its range's messages column by column
        (:mod:`eventhubs_spark.codec.layout`)."""
        sink.received += 1
        sink.incoming.append(_position(data, start, end), data[start:end])

    def _resolve(self, channel: int, handle: int) -> tuple[Any, Any, LinkSink] | None:
        found = sdk.link_at(self.connection, channel, handle)
        if found is None:
            return None
        session, link = found
        sink = getattr(link, "eventhubs_sink", None)
        return (session, link, sink) if isinstance(sink, LinkSink) else None


def _cut_loop(data: bytes, pos: int, end: int, key: bytes, tail: bytes, most: int) -> tuple[np.ndarray, np.ndarray]:
    """The run of frames from ``pos``, one Python step per frame (a short buffer, where numpy's fixed cost per call
    is more): at most ``most`` frames, each whole before ``end``, of the header and transfer encoding of the frame
    at ``pos``, with the same field count and handle (``key``) and the same settled, more and null fields at the end
    of the performative (``tail``). The messages' starts and ends."""
    header = data[pos + 4 : pos + 12]  # data offset, frame type, channel; the transfer's descriptor and list8
    klen, tlen = len(key), len(tail)
    starts: list[int] = []
    ends: list[int] = []
    startswith = data.startswith
    p = pos
    while end - p >= 8 and len(starts) < most:
        frame_end = p + _I(data, p)[0]
        if frame_end > end or not (startswith(header, p + 4) and startswith(key, p + 13)):
            break
        payload = p + 13 + data[p + 12]
        if payload > frame_end or payload - tlen < p + 13 + klen or not startswith(tail, payload - tlen):
            break
        starts.append(payload)
        ends.append(frame_end)
        p = frame_end
    return np.array(starts, np.int64), np.array(ends, np.int64)


def _position(data: bytes, start: int, end: int) -> int:
    """One message's position, read inline where the service puts it (annotations first: the replication
    segment, then the sequence number), else by :func:`_one_sequence_number` (any other form)."""
    if (
        data.startswith(_ANNOTATIONS8, start) and data.startswith(_EPOCH_FIRST, start + 6)
        and data.startswith(_SEQ_FIRST, start + 37) and data[start + 5] > 3
    ):  # fmt: skip
        segment = data[start + 36]
        seq = _Q(data, start + 61)[0]
        return seq if segment >= 128 else geo_segments.pack(segment, seq)  # a byte >= 128 is negative: none
    return _one_sequence_number(data, start, end)


def _sequences(data: bytes, starts: np.ndarray, ends: np.ndarray) -> list[int]:
    """The positions of the messages ``data[starts[i]:ends[i]]``, a run of one link's deliveries in order.

    A partition's positions only rise, so when the first and last of ``n`` messages are ``n - 1`` apart in one
    replication segment, the messages between hold every position between, one each: the usual run (a backlog
    read without gaps) is read at its two ends only. Otherwise (a gap, where events expired or were never
    stored; a new segment) each is read where the service puts it (see :func:`_position`), for a long run with
    numpy all at once as the layout decoder checks its messages; any message in another form one by one. The
    task decodes every message's own position from its bytes again for its rows: these only place the range's
    end and what is held back."""
    n = len(starts)
    if n >= 2:
        first = _position(data, int(starts[0]), int(ends[0]))
        last = _position(data, int(starts[-1]), int(ends[-1]))
        if last - first == n - 1 and geo_segments.segment_of(first) == geo_segments.segment_of(last):
            return list(range(first, last + 1))
    if n < _VECTOR_MIN or len(data) < 69:
        return [_position(data, s, e) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
    buf = np.frombuffer(data, np.uint8)
    long = (ends - starts) >= 69
    at = np.where(long, starts, 0)  # a message too short for the service's form is read one by one
    usual = long & (windows(buf, 4)[at] == _ANNOTATIONS8_V) & (buf[at + 5] > 3)
    usual &= windows(buf, len(_EPOCH_FIRST))[at + 6] == _EPOCH_FIRST_V
    usual &= windows(buf, len(_SEQ_FIRST))[at + 37] == _SEQ_FIRST_V
    values = windows(buf, 8)[at + 61].view(">i8").astype(np.int64)
    segment = buf[at + 36].view(np.int8).astype(np.int64)
    geo = usual & (segment >= 0)
    if geo.any():  # geo_segments.pack, for the whole run
        values = np.where(geo, ((segment + 1) << geo_segments.SEQ_BITS) | values, values)
    found: list[int] = values.tolist()
    if not usual.all():
        for i in np.flatnonzero(~usual).tolist():
            found[i] = _one_sequence_number(data, int(starts[i]), int(ends[i]))
    return found


def _one_sequence_number(data: bytes, start: int, end: int) -> int:
    try:
        return sequence_number(data, start, end)
    except (Unsupported, IndexError, struct.error):
        return _event_sequence_number(sdk.decode_message(data[start:end]))  # any other form: the SDK's


def _event_sequence_number(message: Any) -> int:
    """The position of a message the SDK decoded: its ``x-opt-sequence-number``, with its
    ``x-opt-sequence-number-epoch`` (replication segment) where it has one."""
    annotations = message.message_annotations or {}
    seq = annotations.get(b"x-opt-sequence-number")
    if type(seq) is not int:
        raise DecodeError("a received message has no x-opt-sequence-number annotation")
    return geo_segments.of_event(annotations.get(b"x-opt-sequence-number-epoch"), seq)
