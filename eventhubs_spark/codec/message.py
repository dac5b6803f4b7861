"""Received Event Hubs messages, decoded from their AMQP bytes straight into the source's columns.

The SDK decodes every transfer into a ``Message`` of named tuples and dicts (its ``_pyamqp``
``decode_payload``), and the connector then picked the columns out of those objects: about 30 µs of
client CPU per event in all, most of it building objects that are thrown away at once. Here one pass
over a message's bytes appends each column's value to a plain list (:class:`Columns`); pyarrow turns
the lists into a record batch in C.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import struct
from typing import Any

from eventhubs_spark.amqp.messages import (
    A_ENQUEUED_TIME,
    A_OFFSET,
    A_SEQUENCE_NUMBER,
    ENQUEUED_TIME,
    OFFSET,
    PARTITION_KEY,
    PUBLISHER,
    SEQUENCE_NUMBER,
    Unsupported,
    compound,
    scalar,
    skip,
)
from eventhubs_spark.codec.columns import Columns

__all__ = ["PROPERTY_NAMES", "decode_into", "decode_message"]

_I = struct.Struct(">I").unpack_from
_q = struct.Struct(">q").unpack_from

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
            count, q, p = compound(buf, p)
            for _ in range(count >> 1):
                # the three every event carries, as the service encodes them (sym8 key, then a long, a
                # str8, a timestamp), each told by one comparison in C; whatever the order
                if startswith(A_SEQUENCE_NUMBER, q):
                    seq = _q(buf, q + 24)[0]
                    q += 32
                    continue
                if startswith(A_OFFSET, q):
                    n = buf[q + 15]
                    offset = buf[q + 16 : q + 16 + n]
                    q += 16 + n
                    continue
                if startswith(A_ENQUEUED_TIME, q):
                    when = _q(buf, q + 22)[0]
                    q += 30
                    continue
                c = buf[q]
                if c == 0xA3 or c == 0xA1:
                    n = buf[q + 1]
                    k: Any = buf[q + 2 : q + 2 + n]
                    q += 2 + n
                else:
                    k, q = scalar(buf, q)
                c = buf[q]  # the usual value encodings inline, the rest through _scalar
                if c == 0x81 or c == 0x83:
                    v = _q(buf, q + 1)[0]
                    q += 9
                elif c == 0xA1:
                    n = buf[q + 1]
                    v = buf[q + 2 : q + 2 + n]
                    q += 2 + n
                else:
                    v, q = scalar(buf, q)
                if k == SEQUENCE_NUMBER:
                    seq = v
                elif k == OFFSET:
                    offset = v
                elif k == ENQUEUED_TIME:
                    when = v
                elif k == PARTITION_KEY:
                    key = v
                else:
                    if k == PUBLISHER:
                        publisher = v
                    if system is None:
                        system = []
                    system.append((k, v))
        elif d == 0x74:  # application properties
            count, q, p = compound(buf, p)
            props = []
            for _ in range(count >> 1):
                c = buf[q]
                if c == 0xA1 or c == 0xA3:
                    n = buf[q + 1]
                    k = buf[q + 2 : q + 2 + n]
                    q += 2 + n
                else:
                    k, q = scalar(buf, q)
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
                    v, q = scalar(buf, q)
                props.append((k, v))
        elif d == 0x73:  # properties
            count, q, p = compound(buf, p)
            if count > len(PROPERTY_NAMES):
                raise Unsupported("a properties section with more than 13 fields")
            for i in range(count):
                v, q = scalar(buf, q)
                if v:  # as the SDK path: only fields that are set (and truthy)
                    if system is None:
                        system = []
                    system.append((PROPERTY_NAMES[i], v))
        elif d == 0x70 or d == 0x71 or d == 0x78:  # header, delivery annotations, footer: not columns
            p = skip(buf, p)
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
