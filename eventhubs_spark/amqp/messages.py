"""An Event Hubs message as the frame reader keeps it: its AMQP bytes and its sequence number.

The frame reader (:mod:`eventhubs_spark.amqp.frame_reader`) reads only each message's ``x-opt-sequence-number`` as
it arrives (:func:`sequence_number`) and keeps the bytes (:class:`RawEvents`); the task decodes a range's messages
at once, column by column (:mod:`eventhubs_spark.codec`). The AMQP constants and the readers of single AMQP values
that both need live here, once.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import numpy as np

from eventhubs_spark.positions import geo_segments

_I = struct.Struct(">I").unpack_from
_i = struct.Struct(">i").unpack_from
_q = struct.Struct(">q").unpack_from
_Q = struct.Struct(">Q").unpack_from
_H = struct.Struct(">H").unpack_from
_h = struct.Struct(">h").unpack_from
_f = struct.Struct(">f").unpack_from
_d = struct.Struct(">d").unpack_from

# The annotations the service stamps on every event (symbols), and what the source's columns come from.
SEQUENCE_NUMBER = b"x-opt-sequence-number"
SEQUENCE_EPOCH = b"x-opt-sequence-number-epoch"  # the replication segment (-1: the hub is not geo-replicated)
OFFSET = b"x-opt-offset"
ENQUEUED_TIME = b"x-opt-enqueued-time"
PARTITION_KEY = b"x-opt-partition-key"
PUBLISHER = b"x-opt-publisher"
# An annotation's key and its value's constructor, in the forms the service sends: one ``startswith``
# finds each (the key as sym8, then a long / a str8 / a timestamp).
A_SEQUENCE_NUMBER = b"\xa3\x15" + SEQUENCE_NUMBER + b"\x81"
A_OFFSET = b"\xa3\x0c" + OFFSET + b"\xa1"
A_ENQUEUED_TIME = b"\xa3\x13" + ENQUEUED_TIME + b"\x83"
A_SEGMENT_BYTE = b"\xa3\x1b" + SEQUENCE_EPOCH + b"\x54"  # the replication segment as a byte (-1 off a geo hub)
assert (len(A_SEQUENCE_NUMBER), len(A_OFFSET), len(A_ENQUEUED_TIME), len(A_SEGMENT_BYTE)) == (24, 15, 22, 30)
# The message-annotations section as a map8, the first section (the service's usual form).
ANNOTATIONS_MAP8 = b"\x00\x53\x72\xc1"


def windows(data: np.ndarray, width: int) -> np.ndarray:
    """Every run of ``width`` bytes of ``data`` (a uint8 array) as one value, a view, nothing copied: indexing it
    with positions gathers whole runs, and comparing those with ``np.void(constant)`` is one memcmp each (about
    ten times faster than gathering a position-by-offset matrix of bytes and comparing that)."""
    count = max(len(data) - width + 1, 0)
    dtype = _VOIDS.get(width)
    if dtype is None:
        dtype = _VOIDS[width] = np.dtype((np.void, width))
    # the array's memoryview, not the array: numpy asks Python whether an array given as a buffer is a ctypes object
    return np.ndarray((count,), dtype, data.data, 0, (1,))


_VOIDS: dict[int, np.dtype[np.void]] = {}  # windows' dtypes by width (made once: a dtype costs a microsecond)


class Unsupported(Exception):
    """The message uses an encoding the fast path leaves to the SDK's decoder."""


def scalar(buf: bytes, p: int) -> tuple[Any, int]:
    """One AMQP value at ``buf[p]`` that is not a compound: (the SDK's Python value, the next position)."""
    c = buf[p]
    if c == 0xA1 or c == 0xA3 or c == 0xA0:
        n = buf[p + 1]
        return buf[p + 2 : p + 2 + n], p + 2 + n
    if c == 0xB1 or c == 0xB3 or c == 0xB0:
        n = _I(buf, p + 1)[0]
        return buf[p + 5 : p + 5 + n], p + 5 + n
    if c == 0x81 or c == 0x83:
        return _q(buf, p + 1)[0], p + 9
    if c == 0x40:
        return None, p + 1
    if c == 0x55 or c == 0x54 or c == 0x51:
        v = buf[p + 1]
        return (v - 256 if v > 127 else v), p + 2
    if c == 0x52 or c == 0x53 or c == 0x50:
        return buf[p + 1], p + 2
    if c == 0x43 or c == 0x44:
        return 0, p + 1
    if c == 0x41:
        return True, p + 1
    if c == 0x42:
        return False, p + 1
    if c == 0x56:
        return buf[p + 1] == 1, p + 2
    if c == 0x70:
        return _I(buf, p + 1)[0], p + 5
    if c == 0x71:
        return _i(buf, p + 1)[0], p + 5
    if c == 0x80:
        return _Q(buf, p + 1)[0], p + 9
    if c == 0x60:
        return _H(buf, p + 1)[0], p + 3
    if c == 0x61:
        return _h(buf, p + 1)[0], p + 3
    if c == 0x82:
        return _d(buf, p + 1)[0], p + 9
    if c == 0x72:
        return _f(buf, p + 1)[0], p + 5
    if c == 0x98:
        return uuid.UUID(bytes=buf[p + 1 : p + 17]), p + 17
    if c == 0x73:  # a char (a Java producer's Character): its UTF-8, as strings are given (amqp.sdk.decode_char)
        return chr(_I(buf, p + 1)[0]).encode("utf-8"), p + 5
    raise Unsupported(f"constructor 0x{c:02x}")


def compound(buf: bytes, p: int) -> tuple[int, int, int]:
    """(count, first element, end) of a list or map at ``buf[p]``; anything else is Unsupported."""
    c = buf[p]
    if c == 0xC1 or c == 0xC0:
        return buf[p + 2], p + 3, p + 2 + buf[p + 1]
    if c == 0xD1 or c == 0xD0:
        return _I(buf, p + 5)[0], p + 9, p + 5 + _I(buf, p + 1)[0]
    if c == 0x45:
        return 0, p + 1, p + 1
    raise Unsupported(f"compound 0x{c:02x}")


def skip(buf: bytes, p: int) -> int:
    """The position after the (list or map) value at ``buf[p]`` of a section this decoder ignores."""
    c = buf[p]
    if c == 0xC1 or c == 0xC0:
        return p + 2 + buf[p + 1]
    if c == 0xD1 or c == 0xD0:
        return p + 5 + _I(buf, p + 1)[0]
    if c == 0x45 or c == 0x40:
        return p + 1
    raise Unsupported(f"section value 0x{c:02x}")


def sequence_number(buf: bytes, p: int, end: int) -> int:
    """The position of the message in ``buf[p:end]`` (its ``x-opt-sequence-number``, with its
    ``x-opt-sequence-number-epoch``, the replication segment, where that is one:
    :mod:`eventhubs_spark.positions.geo_segments`), found without decoding the rest (receivers read ahead this way
    and leave the decoding to :mod:`eventhubs_spark.codec.layout`, a batch at a time)."""
    if (
        buf.startswith(A_SEQUENCE_NUMBER, p + 6) and buf.startswith(ANNOTATIONS_MAP8, p) and buf[p + 5] >= 2
        and buf.find(SEQUENCE_EPOCH, p + 38, p + 6 + buf[p + 4]) < 0
    ):  # fmt: skip
        return _q(buf, p + 30)[0]  # the older usual form: annotations first, the sequence number first, no segment
    count, q = _annotations_map(buf, p, end)
    seq: Any = None
    segment: Any = -1
    for _ in range(count >> 1):  # inline, not an iterator: on a geo-replicated hub every event comes this way
        c = buf[q]
        if c == 0xA3 or c == 0xA1:
            n = buf[q + 1]
            key = buf[q + 2 : q + 2 + n]
            q += 2 + n
        else:
            key, q = scalar(buf, q)
        value, q = scalar(buf, q)
        if key == SEQUENCE_NUMBER:
            seq = value
        elif key == SEQUENCE_EPOCH:
            segment = value
    if seq is None:
        raise Unsupported("no x-opt-sequence-number annotation")
    if type(seq) is not int:
        raise Unsupported("a sequence number that is not an integer")
    return geo_segments.of_event(segment, seq)


def _annotations_map(buf: bytes, p: int, end: int) -> tuple[int, int]:
    """(the number of keys and values, where the first is) of the message annotations of the message in
    ``buf[p:end]``, after its header and delivery annotations where it has them; Unsupported where it has none or
    they come after other sections."""
    while p < end:
        if buf[p] != 0 or buf[p + 1] != 0x53:
            raise Unsupported("a section descriptor in its long form")
        d = buf[p + 2]
        p += 3
        if d == 0x72:
            count, q, _ = compound(buf, p)
            return count, q
        if d == 0x70 or d == 0x71:
            p = skip(buf, p)
            continue
        raise Unsupported("message annotations after other sections")
    raise Unsupported("no message annotations")


def offset_and_time(buf: bytes) -> tuple[str, int | None] | None:
    """A message's ``x-opt-offset`` (as the service gives it, a string) and ``x-opt-enqueued-time`` (epoch
    milliseconds), read from its message annotations without decoding the rest; None when it has no offset in the
    service's form (a string) or uses an encoding this reader leaves to others. What a receiver service tells a
    driver of the newest event a link holds (:mod:`eventhubs_spark.planning.executor_ends`): the checkpoint store
    names an event by its offset, and the lag figures need its time. Read as a link's reading thread hands each
    run of events over (:meth:`eventhubs_spark.amqp.frame_reader.LinkSink.publish`), of the run's last event."""
    offset: Any = None
    when: Any = None
    try:
        count, q = _annotations_map(buf, 0, len(buf))
        # Every run of events a link brings asks this of its last event, so it avoids scalar() for every key and
        # value (bench `read_profile`): the service stamps the sequence number, the offset and the enqueued time
        # one after another, each in one form, so where the sequence number's key is found (a key's position in the
        # walk) the other two are checked in place; anything else is walked key by key.
        pairs = count >> 1
        for i in range(pairs):
            if buf.startswith(A_SEQUENCE_NUMBER, q) and pairs - i >= 3:
                r = q + 32  # after the key (sym8), the long's constructor and its 8 bytes
                if buf.startswith(A_OFFSET, r):
                    o = r + 16 + buf[r + 15]  # after the key, the str8's constructor, its length and its bytes
                    if buf.startswith(A_ENQUEUED_TIME, o):
                        return buf[r + 16 : o].decode("utf-8"), _q(buf, o + 22)[0]
            elif buf.startswith(A_SEGMENT_BYTE, q):  # the service's first annotation: not wanted here
                q += 31  # the key, the byte's constructor, the byte
                continue
            key, q = scalar(buf, q)
            value, q = scalar(buf, q)
            if key == OFFSET:
                offset = value
            elif key == ENQUEUED_TIME:
                when = value
        if not isinstance(offset, bytes):
            return None
        return offset.decode("utf-8"), when if type(when) is int else None
    except (Unsupported, IndexError, struct.error, UnicodeDecodeError):
        return None


class RawEvents:
    """Events as their sequence numbers and undecoded message bytes: what receivers hold and the executor's
    receiver service sends; the task decodes them a range at a time, column by column
    (:func:`eventhubs_spark.codec.layout.decode_spans`), so decoding runs in every task slot.

    The bytes stay where they arrived: each run of messages is a buffer (a socket read, as the frame tap
    cut it) with the start and end of each message in it, so no message is copied or made an object of
    its own on the way (:meth:`add_run`). A message that arrived some other way (over several frames,
    or through the SDK) is a buffer of its own (:meth:`append`). :meth:`spans` gives one buffer with
    every message's start and end: the one buffer as it is when there is one, else the runs' spans
    joined (one copy per run, not per message)."""

    __slots__ = ("nbytes", "parts", "seqs")

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.parts: list[tuple[bytes, np.ndarray, np.ndarray]] = []  # (buffer, starts, ends), in order
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.seqs)

    def append(self, seq: int, payload: bytes) -> None:
        """One message, in a buffer of its own."""
        self.seqs.append(seq)
        self.parts.append((payload, np.zeros(1, np.int64), np.array([len(payload)], np.int64)))
        self.nbytes += len(payload) + _PER_EVENT

    def add_run(self, buffer: bytes, starts: np.ndarray, ends: np.ndarray, seqs: list[int]) -> None:
        """Messages ``buffer[starts[i]:ends[i]]`` with sequence numbers ``seqs``, kept in place."""
        self.seqs += seqs
        self.parts.append((buffer, starts, ends))
        self.nbytes += int((ends - starts).sum()) + _PER_EVENT * len(seqs)

    def take(self, count: int) -> RawEvents:
        """Remove the first ``count`` events and return them (the buffers are shared, not copied)."""
        head = RawEvents()
        head.seqs, self.seqs = self.seqs[:count], self.seqs[count:]
        left = count
        while left and self.parts:
            buffer, starts, ends = self.parts[0]
            n = len(starts)
            if n <= left:
                head.parts.append(self.parts.pop(0))
                left -= n
            else:
                head.parts.append((buffer, starts[:left], ends[:left]))
                self.parts[0] = (buffer, starts[left:], ends[left:])
                left = 0
        head.nbytes = sum(int((e - s).sum()) for _, s, e in head.parts) + _PER_EVENT * len(head.seqs)
        self.nbytes -= head.nbytes
        return head

    def extend(self, other: RawEvents) -> None:
        self.seqs += other.seqs
        self.parts += other.parts
        self.nbytes += other.nbytes

    def spans(self) -> tuple[bytes, np.ndarray, np.ndarray]:
        """(one buffer, each message's start, each message's end), in order: a single run's buffer as it is
        when its messages fill most of it, else only the runs' spans, joined (see :meth:`pieces`)."""
        pieces, starts, ends = self.pieces()
        if len(pieces) == 1 and isinstance(pieces[0], bytes):
            return pieces[0], starts, ends
        return b"".join(pieces), starts, ends

    def pieces(self) -> tuple[list[bytes | memoryview], np.ndarray, np.ndarray]:
        """:meth:`spans` before the join: the pieces whose concatenation the starts and ends refer to (views,
        not copies: the receiver service sends them one after the other as they are)."""
        if len(self.parts) == 1:
            buffer, s, e = self.parts[0]
            if not len(s) or 2 * (int(e[-1]) - int(s[0])) >= len(buffer):
                return [buffer], s, e
        pieces: list[bytes | memoryview] = []
        starts: list[np.ndarray] = []
        ends: list[np.ndarray] = []
        at = 0
        for buffer, s, e in self.parts:
            if not len(s):
                continue
            low, high = int(s[0]), int(e[-1])  # a run's messages are in order within its buffer
            pieces.append(memoryview(buffer)[low:high])
            starts.append(s - (low - at))
            ends.append(e - (low - at))
            at += high - low
        if not pieces:
            return [b""], np.zeros(0, np.int64), np.zeros(0, np.int64)
        return pieces, np.concatenate(starts), np.concatenate(ends)

    def payloads(self) -> list[bytes]:
        """Each message's bytes (a copy each: for tests and the rare message-by-message path)."""
        buffer, starts, ends = self.spans()
        return [buffer[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]


# What an event held costs besides its bytes, for the read-ahead bounds (the figure matters less than
# counting the same way every time).
_PER_EVENT = 64
