"""AMQP 1.0 type system and framing, just enough of it to serve the Event Hubs SDKs.

Why our own codec and not the SDK's private ``_pyamqp`` one: the emulator exists to check the SDK,
and a server that shares the client's codec would share its bugs too. Two rules of what the SDK
needs from a server (measured against azure-eventhub 5.15's ``_pyamqp``) shape this module:

* performatives are always written at full arity (the SDK reads fields by position), never with
  the empty-list code ``0x45``;
* message sections use the compact descriptor form ``0x00 0x53 0x7x``.

Decoding returns plain Python values: ``str`` for strings, :class:`Symbol` (a ``str``) for symbols,
``bytes`` for binary, :class:`Described` for described values other than the ones a caller asks to
unwrap. Encoding picks AMQP types from Python types, with small wrapper types where the wire type
matters (``UInt``, ``ULong``, ``Timestamp``, ``Symbol``, ``Array``…).
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, NamedTuple

__all__ = [
    "Array",
    "Described",
    "Symbol",
    "Timestamp",
    "UByte",
    "UInt",
    "ULong",
    "UShort",
    "decode_value",
    "encode_frame",
    "encode_performative",
    "encode_value",
    "skip_value",
]

# --- wrapper types -------------------------------------------------------------------------------


class Symbol(str):
    """An AMQP symbol (ASCII); compares and hashes like the plain string."""

    __slots__ = ()


class UByte(int):
    __slots__ = ()


class UShort(int):
    __slots__ = ()


class UInt(int):
    __slots__ = ()


class ULong(int):
    __slots__ = ()


class Int(int):
    """A signed 32-bit int (plain Python ints encode as AMQP long)."""

    __slots__ = ()


class Timestamp(int):
    """Milliseconds since the Unix epoch, encoded as AMQP timestamp."""

    __slots__ = ()


class Described(NamedTuple):
    descriptor: Any
    value: Any


class Array(NamedTuple):
    """A homogeneous AMQP array; ``kind`` is one of ``"symbol"``, ``"string"``, ``"ulong"``."""

    kind: str
    items: list[Any]


# --- constants -----------------------------------------------------------------------------------

_B = struct.Struct(">B")
_H = struct.Struct(">H")
_I = struct.Struct(">I")
_i = struct.Struct(">i")
_Q = struct.Struct(">Q")
_q = struct.Struct(">q")
_f = struct.Struct(">f")
_d = struct.Struct(">d")
_h = struct.Struct(">h")
_b = struct.Struct(">b")
_FRAME_HEADER = struct.Struct(">IBBH")

# Section descriptors of a message.
HEADER = 0x70
DELIVERY_ANNOTATIONS = 0x71
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75
AMQP_SEQUENCE = 0x76
AMQP_VALUE = 0x77
FOOTER = 0x78

# Performative codes and their full arity.
OPEN, BEGIN, ATTACH, FLOW, TRANSFER, DISPOSITION, DETACH, END, CLOSE = range(0x10, 0x19)
SASL_MECHANISMS, SASL_INIT, SASL_CHALLENGE, SASL_RESPONSE, SASL_OUTCOME = range(0x40, 0x45)
ARITY = {
    OPEN: 10,
    BEGIN: 8,
    ATTACH: 14,
    FLOW: 11,
    TRANSFER: 11,
    DISPOSITION: 6,
    DETACH: 3,
    END: 1,
    CLOSE: 1,
    SASL_MECHANISMS: 1,
    SASL_INIT: 3,
    SASL_CHALLENGE: 1,
    SASL_RESPONSE: 1,
    SASL_OUTCOME: 2,
}
_PERFORMATIVE_SYMBOLS = {
    "amqp:open:list": OPEN,
    "amqp:begin:list": BEGIN,
    "amqp:attach:list": ATTACH,
    "amqp:flow:list": FLOW,
    "amqp:transfer:list": TRANSFER,
    "amqp:disposition:list": DISPOSITION,
    "amqp:detach:list": DETACH,
    "amqp:end:list": END,
    "amqp:close:list": CLOSE,
    "amqp:sasl-mechanisms:list": SASL_MECHANISMS,
    "amqp:sasl-init:list": SASL_INIT,
    "amqp:sasl-challenge:list": SASL_CHALLENGE,
    "amqp:sasl-response:list": SASL_RESPONSE,
    "amqp:sasl-outcome:list": SASL_OUTCOME,
}
ERROR = 0x1D
SOURCE = 0x28
TARGET = 0x29
ACCEPTED = 0x24
REJECTED = 0x25

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
HEARTBEAT = struct.pack(">IBBH", 8, 2, 0, 0)  # an empty frame: keeps a connection with an idle time-out open
SASL_HEADER = b"AMQP\x03\x01\x00\x00"

# --- encoding ------------------------------------------------------------------------------------


def _enc_str(tag8: int, tag32: int, raw: bytes) -> bytes:
    n = len(raw)
    if n < 256:
        return bytes((tag8, n)) + raw
    return bytes((tag32,)) + _I.pack(n) + raw


def _enc_int(value: int) -> bytes:
    if -128 <= value <= 127:
        return b"\x55" + _b.pack(value)
    return b"\x81" + _q.pack(value)


def encode_value(value: Any) -> bytes:
    """Encode one Python value as an AMQP value with its constructor."""
    if value is None:
        return b"\x40"
    t = type(value)
    if t is bool:
        return b"\x41" if value else b"\x42"
    if t is Symbol:
        return _enc_str(0xA3, 0xB3, value.encode("ascii"))
    if t is str:
        return _enc_str(0xA1, 0xB1, value.encode("utf-8"))
    if t is bytes or t is bytearray or t is memoryview:
        return _enc_str(0xA0, 0xB0, bytes(value))
    if t is int:
        return _enc_int(value)
    if t is UInt:
        if value == 0:
            return b"\x43"
        if value < 256:
            return bytes((0x52, value))
        return b"\x70" + _I.pack(value)
    if t is ULong:
        if value == 0:
            return b"\x44"
        if value < 256:
            return bytes((0x53, value))
        return b"\x80" + _Q.pack(value)
    if t is Timestamp:
        return b"\x83" + _q.pack(value)
    if t is Int:
        if -128 <= value <= 127:
            return b"\x54" + _b.pack(value)
        return b"\x71" + _i.pack(value)
    if t is UByte:
        return bytes((0x50, value))
    if t is UShort:
        return b"\x60" + _H.pack(value)
    if t is float:
        return b"\x82" + _d.pack(value)
    if t is uuid.UUID:
        return b"\x98" + value.bytes
    if t is Described:
        return b"\x00" + encode_value(value.descriptor) + encode_value(value.value)
    if t is list or t is tuple:
        return encode_list(value)
    if t is dict:
        return encode_map(value)
    if t is Array:
        return _encode_array(value)
    raise TypeError(f"cannot encode {t.__name__} as AMQP")


def encode_list(items: list[Any] | tuple[Any, ...]) -> bytes:
    """A list8/list32, never list0, so positional readers always find every field."""
    body = b"".join([encode_value(v) for v in items])
    count = len(items)
    if len(body) + 1 < 256 and count < 256:
        return bytes((0xC0, len(body) + 1, count)) + body
    return b"\xd0" + _I.pack(len(body) + 4) + _I.pack(count) + body


def encode_map(mapping: dict[Any, Any]) -> bytes:
    parts = []
    for k, v in mapping.items():
        parts.append(encode_value(k))
        parts.append(encode_value(v))
    body = b"".join(parts)
    count = 2 * len(mapping)
    if len(body) + 1 < 256 and count < 256:
        return bytes((0xC1, len(body) + 1, count)) + body
    return b"\xd1" + _I.pack(len(body) + 4) + _I.pack(count) + body


def _encode_array(array: Array) -> bytes:
    if array.kind in ("symbol", "string"):
        ctor = 0xB3 if array.kind == "symbol" else 0xB1
        codec = "ascii" if array.kind == "symbol" else "utf-8"
        elems = [str(v).encode(codec) for v in array.items]
        body = bytes((ctor,)) + b"".join(_I.pack(len(e)) + e for e in elems)
    elif array.kind == "ulong":
        body = b"\x80" + b"".join(_Q.pack(v) for v in array.items)
    else:
        raise TypeError(f"unsupported array kind {array.kind!r}")
    return b"\xf0" + _I.pack(len(body) + 4) + _I.pack(len(array.items)) + body


def encode_performative(code: int, fields: list[Any]) -> bytes:
    """A performative padded with nulls to its full arity (see module docstring)."""
    arity = ARITY.get(code, len(fields))
    if len(fields) < arity:
        fields = list(fields) + [None] * (arity - len(fields))
    return b"\x00\x53" + bytes((code,)) + encode_list(fields)


def encode_frame(channel: int, body: bytes, payload: bytes = b"", frame_type: int = 0) -> bytes:
    size = 8 + len(body) + len(payload)
    return _FRAME_HEADER.pack(size, 2, frame_type, channel) + body + payload


def encode_section(descriptor: int, value: Any) -> bytes:
    return b"\x00\x53" + bytes((descriptor,)) + encode_value(value)


def encode_error(condition: str, description: str, info: dict[Any, Any] | None = None) -> Described:
    return Described(ULong(ERROR), [Symbol(condition), description, info])


# --- decoding ------------------------------------------------------------------------------------


def decode_value(buf: bytes | memoryview, pos: int = 0) -> tuple[Any, int]:
    """Decode one value at ``pos``; returns the value and the position after it."""
    c = buf[pos]
    pos += 1
    if c == 0x00:
        descriptor, pos = decode_value(buf, pos)
        value, pos = decode_value(buf, pos)
        return Described(descriptor, value), pos
    if c == 0x40:
        return None, pos
    if c == 0x41:
        return True, pos
    if c == 0x42:
        return False, pos
    if c == 0x56:
        return buf[pos] == 1, pos + 1
    if c in (0x43, 0x44):
        return 0, pos
    if c == 0x45:
        return [], pos
    if c in (0x50, 0x52, 0x53):
        return buf[pos], pos + 1
    if c in (0x51, 0x54, 0x55):
        return _b.unpack_from(buf, pos)[0], pos + 1
    if c == 0x60:
        return _H.unpack_from(buf, pos)[0], pos + 2
    if c == 0x61:
        return _h.unpack_from(buf, pos)[0], pos + 2
    if c == 0x70:
        return _I.unpack_from(buf, pos)[0], pos + 4
    if c == 0x71:
        return _i.unpack_from(buf, pos)[0], pos + 4
    if c == 0x72:
        return _f.unpack_from(buf, pos)[0], pos + 4
    if c == 0x80:
        return _Q.unpack_from(buf, pos)[0], pos + 8
    if c == 0x81:
        return _q.unpack_from(buf, pos)[0], pos + 8
    if c == 0x82:
        return _d.unpack_from(buf, pos)[0], pos + 8
    if c == 0x83:
        return Timestamp(_q.unpack_from(buf, pos)[0]), pos + 8
    if c == 0x98:
        return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16
    if c in (0xA0, 0xA1, 0xA3):
        n = buf[pos]
        return _as(c, bytes(buf[pos + 1 : pos + 1 + n])), pos + 1 + n
    if c in (0xB0, 0xB1, 0xB3):
        n = _I.unpack_from(buf, pos)[0]
        return _as(c, bytes(buf[pos + 4 : pos + 4 + n])), pos + 4 + n
    if c in (0xC0, 0xC1):
        count = buf[pos + 1]
        pos += 2
        return _decode_compound(c == 0xC1, buf, pos, count)
    if c in (0xD0, 0xD1):
        count = _I.unpack_from(buf, pos + 4)[0]
        pos += 8
        return _decode_compound(c == 0xD1, buf, pos, count)
    if c in (0xE0, 0xF0):
        if c == 0xE0:
            count = buf[pos + 1]
            pos += 2
        else:
            count = _I.unpack_from(buf, pos + 4)[0]
            pos += 8
        if count == 0:
            return [], pos + 1 if pos < len(buf) else pos
        ctor = buf[pos]
        pos += 1
        items = []
        for _ in range(count):
            v, pos = _decode_array_element(ctor, buf, pos)
            items.append(v)
        return items, pos
    raise ValueError(f"unsupported AMQP constructor 0x{c:02x}")


def _as(ctor: int, raw: bytes) -> Any:
    if ctor in (0xA1, 0xB1):
        return raw.decode("utf-8")
    if ctor in (0xA3, 0xB3):
        return Symbol(raw.decode("ascii"))
    return raw


def _decode_array_element(ctor: int, buf: bytes | memoryview, pos: int) -> tuple[Any, int]:
    """Decode one array element: elements share the array's constructor and omit their own."""
    if ctor in (0xA0, 0xA1, 0xA3):
        n = buf[pos]
        return _as(ctor, bytes(buf[pos + 1 : pos + 1 + n])), pos + 1 + n
    if ctor in (0xB0, 0xB1, 0xB3):
        n = _I.unpack_from(buf, pos)[0]
        return _as(ctor, bytes(buf[pos + 4 : pos + 4 + n])), pos + 4 + n
    width = _FIXED_WIDTH.get(ctor)
    if width is None:
        end = skip_value(bytes((ctor,)) + bytes(buf[pos : pos + 9]), 0) - 1  # sized compound
        end = pos + end
    else:
        end = pos + width
    value, _ = decode_value(bytes((ctor,)) + bytes(buf[pos:end]), 0)
    return value, end


def _decode_compound(is_map: bool, buf: bytes | memoryview, pos: int, count: int) -> tuple[Any, int]:
    if is_map:
        out: dict[Any, Any] = {}
        for _ in range(count // 2):
            k, pos = decode_value(buf, pos)
            v, pos = decode_value(buf, pos)
            out[k] = v
        return out, pos
    items = []
    for _ in range(count):
        v, pos = decode_value(buf, pos)
        items.append(v)
    return items, pos


_FIXED_WIDTH = {
    0x40: 0, 0x41: 0, 0x42: 0, 0x43: 0, 0x44: 0, 0x45: 0,
    0x50: 1, 0x51: 1, 0x52: 1, 0x53: 1, 0x54: 1, 0x55: 1, 0x56: 1,
    0x60: 2, 0x61: 2,
    0x70: 4, 0x71: 4, 0x72: 4, 0x73: 4, 0x74: 4,
    0x80: 8, 0x81: 8, 0x82: 8, 0x83: 8, 0x84: 8,
    0x94: 16, 0x98: 16,
}  # fmt: skip


def skip_value(buf: bytes | memoryview, pos: int) -> int:
    """Position just after the value at ``pos``, without decoding it (sizes are in the encoding)."""
    c = buf[pos]
    pos += 1
    if c == 0x00:
        pos = skip_value(buf, pos)
        return skip_value(buf, pos)
    width = _FIXED_WIDTH.get(c)
    if width is not None:
        return pos + width
    if c in (0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0):
        return pos + 1 + buf[pos]
    if c in (0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0):
        return pos + 4 + _I.unpack_from(buf, pos)[0]
    raise ValueError(f"unsupported AMQP constructor 0x{c:02x}")


def decode_performative(body: bytes | memoryview) -> tuple[int, list[Any], int]:
    """Decode a frame body: (performative code, its fields padded to the performative's full arity,
    position where a payload starts).

    AMQP 1.0 lets a peer leave out trailing null fields (an empty list even, ``0x45``), and lets it
    name a performative by its symbolic descriptor; Qpid Proton and the .NET, Java and JS clients do
    both. Every field past what was sent reads as None, so the code above can index fields by position.
    """
    if body[0] != 0x00:
        raise ValueError("frame body is not a described performative")
    descriptor, pos = decode_value(body, 1)
    code = _PERFORMATIVE_SYMBOLS.get(descriptor, -1) if isinstance(descriptor, str) else int(descriptor)
    if code < 0:
        raise ValueError(f"unknown performative {descriptor!r}")
    fields, pos = decode_value(body, pos)
    values = list(fields) if isinstance(fields, list) else []
    missing = ARITY.get(code, len(values)) - len(values)
    if missing > 0:
        values.extend([None] * missing)
    return code, values, pos


def split_sections(message: bytes | memoryview) -> list[tuple[int, int, int]]:
    """List ``(descriptor, start, end)`` of each section of an encoded message, decoding nothing.

    Descriptors may be the compact ulong form (``00 53 xx``), a full ulong, or (rarely) a symbol;
    the symbolic forms are mapped to their codes.
    """
    out = []
    pos = 0
    n = len(message)
    while pos < n:
        start = pos
        if message[pos] != 0x00:
            raise ValueError("message section is not described")
        descriptor, after = decode_value(message, pos + 1)
        if isinstance(descriptor, str):
            descriptor = _SECTION_SYMBOLS.get(descriptor, -1)
        pos = skip_value(message, after)
        out.append((int(descriptor) & 0xFF if descriptor >= 0 else -1, start, pos))
    return out


_SECTION_SYMBOLS = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES,
    "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": AMQP_SEQUENCE,
    "amqp:amqp-value:*": AMQP_VALUE,
    "amqp:footer:map": FOOTER,
}


def section_value(message: bytes | memoryview, start: int) -> Any:
    """Decode the value of the section that starts at ``start``."""
    _, pos = decode_value(message, start + 1)
    value, _ = decode_value(message, pos)
    return value


def map_entries_raw(buf: bytes | memoryview, pos: int) -> list[tuple[Any, bytes]]:
    """The entries of the map at ``pos`` as (decoded key, raw encoded key+value) pairs.

    Used to add annotations to a client's message while keeping its own entries byte-for-byte.
    """
    c = buf[pos]
    if c == 0xC1:
        count = buf[pos + 2]
        p = pos + 3
    elif c == 0xD1:
        count = _I.unpack_from(buf, pos + 5)[0]
        p = pos + 9
    elif c == 0x40:
        return []
    else:
        raise ValueError(f"expected a map, found constructor 0x{c:02x}")
    out = []
    for _ in range(count // 2):
        key, after_key = decode_value(buf, p)
        end = skip_value(buf, after_key)
        out.append((key, bytes(buf[p:end])))
        p = end
    return out


def map_from_raw(raw_entries: list[bytes]) -> bytes:
    body = b"".join(raw_entries)
    count = 2 * len(raw_entries)
    if len(body) + 1 < 256 and count < 256:
        return bytes((0xC1, len(body) + 1, count)) + body
    return b"\xd1" + _I.pack(len(body) + 4) + _I.pack(count) + body
