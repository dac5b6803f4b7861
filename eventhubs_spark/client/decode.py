"""Received Event Hubs messages, decoded from their AMQP bytes straight into the source's columns.

The SDK decodes every transfer into a ``Message`` of named tuples and dicts (its ``_pyamqp``
``decode_payload``), and the connector then picked the columns out of those objects: about 30 µs of
client CPU per event in all, most of it building objects that are thrown away at once. Here one pass
over a message's bytes appends each column's value to a plain list (:class:`Columns`); pyarrow turns
the lists into a record batch in C.

Agreement with the SDK is the contract: every value is what the SDK's decoder and
:func:`eventhubs_spark.arrow.message_row` make of the same bytes (AMQP strings, symbols and binaries
as ``bytes``, timestamps as milliseconds, the same text for each property value). Where a message uses
a form this decoder does not handle (a value or sequence body, a list, map, array or described value
among the properties, the long section descriptor), :func:`decode_into` raises :class:`Unsupported`
and the caller decodes that message with the SDK instead (:meth:`Columns.append_sdk_payload`),
counting it in :attr:`Columns.fallbacks`. A property test compares both paths row by row.

Receivers use it for what :mod:`.layout` (a whole range decoded column by column, several times
faster) leaves over: small chunks, and messages of forms a layout does not describe. They read only
each message's sequence number as it arrives (:func:`sequence_number`) and keep its bytes
(:class:`RawEvents`).
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, Protocol

import pyarrow as pa
from typing_extensions import Self

from ..arrow import Columns

__all__ = ["RawEvents", "Unsupported", "decode_into", "decode_message", "sequence_number"]

_I = struct.Struct(">I").unpack_from
_i = struct.Struct(">i").unpack_from
_q = struct.Struct(">q").unpack_from
_Q = struct.Struct(">Q").unpack_from
_H = struct.Struct(">H").unpack_from
_h = struct.Struct(">h").unpack_from
_f = struct.Struct(">f").unpack_from
_d = struct.Struct(">d").unpack_from

_SEQ = b"x-opt-sequence-number"
_OFFSET = b"x-opt-offset"
_TIME = b"x-opt-enqueued-time"
_KEY = b"x-opt-partition-key"
_PUBLISHER = b"x-opt-publisher"
# An annotation's key and its value's constructor, in the forms the service sends: one ``startswith``
# finds each (the key as sym8, then a long / a str8 / a timestamp).
_A_SEQ = b"\xa3\x15" + _SEQ + b"\x81"
_A_OFFSET = b"\xa3\x0c" + _OFFSET + b"\xa1"
_A_TIME = b"\xa3\x13" + _TIME + b"\x83"
assert (len(_A_SEQ), len(_A_OFFSET), len(_A_TIME)) == (24, 15, 22)
_MAP8_ANNOTATIONS = b"\x00\x53\x72\xc1"

# The properties section's fields that become system properties, by position, as the SDKs name them.
PROPERTY_NAMES = (
    "message-id",
    "user-id",
    "to",
    "subject",
    "reply-to",
    "correlation-id",
    "content-type",
    "content-encoding",
    "absolute-expiry-time",
    "creation-time",
    "group-id",
    "group-sequence",
    "reply-to-group-id",
)


class Unsupported(Exception):
    """The message uses an encoding the fast path leaves to the SDK's decoder."""


def _scalar(buf: bytes, p: int) -> tuple[Any, int]:
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
    raise Unsupported(f"constructor 0x{c:02x}")


def _compound(buf: bytes, p: int) -> tuple[int, int, int]:
    """(count, first element, end) of a list or map at ``buf[p]``; anything else is Unsupported."""
    c = buf[p]
    if c == 0xC1 or c == 0xC0:
        return buf[p + 2], p + 3, p + 2 + buf[p + 1]
    if c == 0xD1 or c == 0xD0:
        return _I(buf, p + 5)[0], p + 9, p + 5 + _I(buf, p + 1)[0]
    if c == 0x45:
        return 0, p + 1, p + 1
    raise Unsupported(f"compound 0x{c:02x}")


def _skip(buf: bytes, p: int) -> int:
    """The position after the (list or map) value at ``buf[p]`` of a section this decoder ignores."""
    c = buf[p]
    if c == 0xC1 or c == 0xC0:
        return p + 2 + buf[p + 1]
    if c == 0xD1 or c == 0xD0:
        return p + 5 + _I(buf, p + 1)[0]
    if c == 0x45 or c == 0x40:
        return p + 1
    raise Unsupported(f"section value 0x{c:02x}")


def decode_into(cols: Columns, buf: bytes, p: int, end: int) -> None:
    """Append the message in ``buf[p:end]`` (one transfer's payload) to ``cols``, or raise Unsupported.

    Nothing is appended when it raises, so the caller can hand the same bytes to the SDK's decoder.
    """
    body: Any = None
    seq: Any = None
    offset: Any = None
    when: Any = None
    key: Any = None
    publisher: Any = None
    props: list[tuple[Any, Any]] | None = None
    system: list[tuple[Any, Any]] | None = None
    data_sections = 0
    startswith = buf.startswith
    while p < end:
        if buf[p] != 0 or buf[p + 1] != 0x53:
            raise Unsupported("a section descriptor in its long form")
        d = buf[p + 2]
        p += 3
        if d == 0x75:  # data
            c = buf[p]
            if c == 0xA0:
                n = buf[p + 1]
                part = buf[p + 2 : p + 2 + n]
                p += 2 + n
            elif c == 0xB0:
                n = _I(buf, p + 1)[0]
                part = buf[p + 5 : p + 5 + n]
                p += 5 + n
            else:
                raise Unsupported(f"data section 0x{c:02x}")
            body = part if data_sections == 0 else body + part
            data_sections += 1
        elif d == 0x72:  # message annotations
            count, q, p = _compound(buf, p)
            for _ in range(count >> 1):
                # the three every event carries, as the service encodes them (sym8 key, then a long, a
                # str8, a timestamp), each told by one comparison in C; whatever the order
                if startswith(_A_SEQ, q):
                    seq = _q(buf, q + 24)[0]
                    q += 32
                    continue
                if startswith(_A_OFFSET, q):
                    n = buf[q + 15]
                    offset = buf[q + 16 : q + 16 + n]
                    q += 16 + n
                    continue
                if startswith(_A_TIME, q):
                    when = _q(buf, q + 22)[0]
                    q += 30
                    continue
                c = buf[q]
                if c == 0xA3 or c == 0xA1:
                    n = buf[q + 1]
                    k: Any = buf[q + 2 : q + 2 + n]
                    q += 2 + n
                else:
                    k, q = _scalar(buf, q)
                c = buf[q]  # the usual value encodings inline, the rest through _scalar
                if c == 0x81 or c == 0x83:
                    v = _q(buf, q + 1)[0]
                    q += 9
                elif c == 0xA1:
                    n = buf[q + 1]
                    v = buf[q + 2 : q + 2 + n]
                    q += 2 + n
                else:
                    v, q = _scalar(buf, q)
                if k == _SEQ:
                    seq = v
                elif k == _OFFSET:
                    offset = v
                elif k == _TIME:
                    when = v
                elif k == _KEY:
                    key = v
                else:
                    if k == _PUBLISHER:
                        publisher = v
                    if system is None:
                        system = []
                    system.append((k, v))
        elif d == 0x74:  # application properties
            count, q, p = _compound(buf, p)
            props = []
            for _ in range(count >> 1):
                c = buf[q]
                if c == 0xA1 or c == 0xA3:
                    n = buf[q + 1]
                    k = buf[q + 2 : q + 2 + n]
                    q += 2 + n
                else:
                    k, q = _scalar(buf, q)
                c = buf[q]
                if c == 0xA1:
                    n = buf[q + 1]
                    v = buf[q + 2 : q + 2 + n]
                    q += 2 + n
                elif c == 0x81:
                    v = _q(buf, q + 1)[0]
                    q += 9
                elif c == 0x41:
                    v = True
                    q += 1
                elif c == 0x42:
                    v = False
                    q += 1
                else:
                    v, q = _scalar(buf, q)
                props.append((k, v))
        elif d == 0x73:  # properties
            count, q, p = _compound(buf, p)
            if count > len(PROPERTY_NAMES):
                raise Unsupported("a properties section with more than 13 fields")
            for i in range(count):
                v, q = _scalar(buf, q)
                if v:  # as the SDK path: only fields that are set (and truthy)
                    if system is None:
                        system = []
                    system.append((PROPERTY_NAMES[i], v))
        elif d == 0x70 or d == 0x71 or d == 0x78:  # header, delivery annotations, footer: not columns
            p = _skip(buf, p)
        else:  # 0x76 sequence, 0x77 value bodies, or anything else
            raise Unsupported(f"section 0x{d:02x}")
    if seq is None:
        raise Unsupported("no x-opt-sequence-number annotation")
    if type(seq) is not int:
        raise Unsupported("a sequence number that is not an integer")
    cols.append(
        body if body is not None else b"",
        seq,
        offset,
        when,
        publisher,
        key,
        props,
        system,
    )


def decode_message(cols: Columns, payload: bytes) -> bool:
    """Append one message: the fast path, else the SDK's decoder. True when the fast path took it."""
    try:
        decode_into(cols, payload, 0, len(payload))
        return True
    except (Unsupported, IndexError, struct.error):
        cols.append_sdk_payload(payload)
        return False


def sequence_number(buf: bytes, p: int, end: int) -> int:
    """The ``x-opt-sequence-number`` of the message in ``buf[p:end]``, found without decoding the rest
    (receivers read ahead this way and leave the decoding to :mod:`.layout`, a batch at a time)."""
    if buf.startswith(_A_SEQ, p + 6) and buf.startswith(_MAP8_ANNOTATIONS, p) and buf[p + 5] >= 2:
        return _q(buf, p + 30)[0]  # the service's usual form: annotations first, the sequence number first
    while p < end:
        if buf[p] != 0 or buf[p + 1] != 0x53:
            raise Unsupported("a section descriptor in its long form")
        d = buf[p + 2]
        p += 3
        if d == 0x72:
            count, q, _ = _compound(buf, p)
            for _ in range(count >> 1):
                c = buf[q]
                if c == 0xA3 or c == 0xA1:
                    n = buf[q + 1]
                    is_seq = buf[q + 2 : q + 2 + n] == _SEQ
                    q += 2 + n
                else:
                    key, q = _scalar(buf, q)
                    is_seq = key == _SEQ
                value, q = _scalar(buf, q)
                if is_seq:
                    if type(value) is not int:
                        raise Unsupported("a sequence number that is not an integer")
                    return value
            raise Unsupported("no x-opt-sequence-number annotation")
        if d == 0x70 or d == 0x71:
            p = _skip(buf, p)
            continue
        raise Unsupported("message annotations after other sections")
    raise Unsupported("no message annotations")


class Events(Protocol):
    """What a receiver's range logic needs of a run of events: their sequence numbers, in order, and the
    means to cut and join runs. :class:`~eventhubs_spark.arrow.Columns` (decoded) and :class:`RawEvents`."""

    seqs: list[int]
    nbytes: int
    fallbacks: int

    def __len__(self) -> int: ...

    def take(self, count: int) -> Self: ...

    def extend(self, other: Self) -> None: ...


RAW_SCHEMA = pa.schema([pa.field("sequenceNumber", pa.int64()), pa.field("message", pa.binary())])


class RawEvents:
    """Events as their sequence numbers and undecoded message bytes: what the executor's receiver service
    holds and sends; the worker decodes them (:func:`decode_raw`), so decoding runs in as many processes
    as the executor has task slots. Same interface as :class:`~eventhubs_spark.arrow.Columns` for the
    range logic (``seqs``, ``take``, ``extend``, ``nbytes``, ``fallbacks``)."""

    __slots__ = ("fallbacks", "nbytes", "payloads", "seqs")

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.payloads: list[bytes] = []
        self.nbytes = 0
        self.fallbacks = 0

    def __len__(self) -> int:
        return len(self.seqs)

    def append(self, seq: int, payload: bytes) -> None:
        self.seqs.append(seq)
        self.payloads.append(payload)
        self.nbytes += len(payload) + 64

    def take(self, count: int) -> RawEvents:
        head = RawEvents()
        head.seqs, self.seqs = self.seqs[:count], self.seqs[count:]
        head.payloads, self.payloads = self.payloads[:count], self.payloads[count:]
        head.nbytes = sum(len(p) for p in head.payloads) + 64 * len(head.seqs)
        self.nbytes -= head.nbytes
        return head

    def extend(self, other: RawEvents) -> None:
        self.seqs += other.seqs
        self.payloads += other.payloads
        self.nbytes += other.nbytes

    def to_raw_batch(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [pa.array(self.seqs, pa.int64()), pa.array(self.payloads, pa.binary())], schema=RAW_SCHEMA
        )
