"""Events the sink sends, encoded straight to the AMQP bytes the SDK would make of them.

For every row the SDK's path builds an ``EventData``, turns it into an outgoing message, encodes it
once to learn its size and again to add it to the batch: more client CPU per event than the send
itself. The sink's events are simple (a body; string properties; a partition key, on every event of a
key's batch), so their bytes are written here in one go, the same bytes the SDK writes (a test
compares them), and added to the SDK's own batch (:func:`eventhubs_spark.amqp.sdk.add_encoded`),
which the SDK sends as ever.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

_I = struct.Struct(">I").pack
_DATA = b"\x00\x53\x75"
_APPLICATION_PROPERTIES = b"\x00\x53\x74"
# With a partition key the SDK marks every event durable (a header of five fields, the first set) and
# annotates it with the key.
_KEYED_HEADER = b"\x00\x53\x70\xc0\x07\x05\x56\x01\x40\x40\x40\x40"
_KEY_ANNOTATION = b"\x00\x53\x72"
_PROPERTIES = b"\x00\x53\x73"
_SIX_NULLS = b"\x40" * 6
_KEY_SYMBOL = b"\xa3\x13x-opt-partition-key"


def content_type_section(content_type: str) -> bytes:
    """The properties section as the SDK writes an event whose only property is its content type (the Schema
    Registry encoders' ``avro/binary+<id>``): all thirteen fields, the seventh set, as a symbol."""
    raw = content_type.encode("ascii")
    if len(raw) > 240:
        raise ValueError(f"a content type of {len(raw)} bytes is longer than the connector writes (240)")
    fields = _SIX_NULLS + b"\xa3" + bytes((len(raw),)) + raw + _SIX_NULLS
    return _PROPERTIES + b"\xc0" + bytes((len(fields) + 1, 13)) + fields


def _string(value: str) -> bytes:
    raw = value.encode("utf-8")
    return (b"\xa1" + bytes((len(raw),)) if len(raw) < 256 else b"\xb1" + _I(len(raw))) + raw


def _map(entries: bytes, count: int) -> bytes:
    if count <= 255 and len(entries) < 255:
        return b"\xc1" + bytes((len(entries) + 1, count)) + entries
    return b"\xd1" + _I(len(entries) + 4) + _I(count) + entries


def encode_event(
    body: bytes | str,
    properties: Mapping[str, str | None] | None,
    partition_key: str | None,
    content_type: str | None = None,
) -> bytes:
    """One event's message: (header and key annotation, the properties section with the content type,)
    application properties, then the data section."""
    raw = body.encode("utf-8") if isinstance(body, str) else body
    data = _DATA + (b"\xa0" + bytes((len(raw),)) if len(raw) < 256 else b"\xb0" + _I(len(raw))) + raw
    head = b""
    if partition_key:
        head = _KEYED_HEADER + _KEY_ANNOTATION + _map(_KEY_SYMBOL + _string(partition_key), 2)
    if content_type:
        head += content_type_section(content_type)
    if properties:
        entries = b"".join(_string(k) + (b"\x40" if v is None else _string(v)) for k, v in properties.items())
        head += _APPLICATION_PROPERTIES + _map(entries, 2 * len(properties))
    return head + data if head else data


def encode_with_property(
    body: bytes,
    properties: Mapping[str, str | None] | None,
    partition_key: str | None,
    content_type: str | None,
    name: str,
    value: bytes,
) -> bytes:
    """:func:`encode_event` of ``body`` with one more application property, ``name`` = ``value`` (UTF-8 text, set
    last, replacing one of that name that ``properties`` has): the exactly-once sink's stamp on every event.

    Why a function of its own: building a dict per event and walking it costs the sink about 2 us an event, as much
    as all the rest of its work at 200 B. An event with no other property, key or content type, with a short body
    and value (the common case) is written with one formatting of a fixed layout instead; others take the general
    path, with the same bytes (a test compares the two)."""
    raw_name = name.encode("utf-8")
    if not (properties or partition_key or content_type) and len(body) < 256 and len(raw_name) + len(value) < 230:
        return b"%s\xc1%c\x02\xa1%c%s\xa1%c%s%s\xa0%c%s" % (
            _APPLICATION_PROPERTIES, len(raw_name) + len(value) + 5, len(raw_name), raw_name, len(value), value,
            _DATA, len(body), body,
        )  # fmt: skip
    text = value.decode("utf-8")
    merged = {**properties, name: text} if properties else {name: text}
    return encode_event(body, merged, partition_key, content_type)
