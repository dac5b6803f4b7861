"""Helpers shared by the unit tests that came from test_decode.py."""

from __future__ import annotations

import struct
from typing import Any

from azure.eventhub._pyamqp._decode import decode_payload
from hypothesis import strategies as st

from eventhubs_emulator import amqp
from eventhubs_emulator.amqp import Array, Described, Int, Symbol, Timestamp, UByte, UInt, ULong, UShort
from eventhubs_spark.codec.columns import Columns
from eventhubs_spark.codec.message import decode_message

_I = struct.Struct(">I")


class Wide:
    """Marks a value (and everything inside it) to be written in its widest encoding."""

    def __init__(self, value: Any) -> None:
        self.value = value


def encode(value: Any, wide: bool = False) -> bytes:
    """The emulator's encoding, or (``wide``) the 32-bit and full-width forms of the same value."""
    if isinstance(value, Wide):
        return encode(value.value, True)
    if not wide:
        if isinstance(value, list):
            body = b"".join(encode(v) for v in value)
            return amqp.encode_list([]) if not value else bytes((0xC0, len(body) + 1, len(value))) + body
        if isinstance(value, dict):
            body = b"".join(encode(k) + encode(v) for k, v in value.items())
            if len(body) + 1 < 256 and 2 * len(value) < 256:
                return bytes((0xC1, len(body) + 1, 2 * len(value))) + body
            return b"\xd1" + _I.pack(len(body) + 4) + _I.pack(2 * len(value)) + body
        return amqp.encode_value(value)
    t = type(value)
    if t is list:
        body = b"".join(encode(v, True) for v in value)
        return b"\xd0" + _I.pack(len(body) + 4) + _I.pack(len(value)) + body
    if t is dict:
        body = b"".join(encode(k, True) + encode(v, True) for k, v in value.items())
        return b"\xd1" + _I.pack(len(body) + 4) + _I.pack(2 * len(value)) + body
    if t is Symbol:
        raw = value.encode("ascii")
        return b"\xb3" + _I.pack(len(raw)) + raw
    if t is str:
        raw = value.encode("utf-8")
        return b"\xb1" + _I.pack(len(raw)) + raw
    if t is bytes:
        return b"\xb0" + _I.pack(len(value)) + value
    if t is int:
        return b"\x81" + struct.pack(">q", value)
    if t is UInt:
        return b"\x70" + _I.pack(value)
    if t is ULong:
        return b"\x80" + struct.pack(">Q", value)
    if t is Int:
        return b"\x71" + struct.pack(">i", value)
    if t is bool:
        return b"\x56" + (b"\x01" if value else b"\x00")
    return amqp.encode_value(value)


def section(descriptor: int, value: Any) -> bytes:
    return b"\x00\x53" + bytes((descriptor,)) + encode(value)


texts = st.text(max_size=40)


symbols = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=30).map(Symbol)


scalars = st.one_of(
    texts,
    st.binary(max_size=40),
    symbols,
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**32 - 1).map(UInt),
    st.integers(0, 2**64 - 1).map(ULong),
    st.integers(-(2**31), 2**31 - 1).map(Int),
    st.integers(0, 255).map(UByte),
    st.integers(0, 65535).map(UShort),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
    st.integers(-(2**62), 2**62).map(Timestamp),
    st.uuids(),
)


# Forms the fast path leaves to the SDK: compound values among the properties.
compounds = st.one_of(
    st.lists(scalars, max_size=3),
    st.dictionaries(texts, scalars, max_size=3),
    st.lists(texts, min_size=1, max_size=3).map(lambda items: Array("string", items)),
    scalars.map(lambda v: Described(ULong(0x137000A), v)),
)


def widen(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(strategy, strategy.map(Wide))


@st.composite
def messages(draw: st.DrawFn, compound_properties: bool) -> bytes:
    annotations: dict[Any, Any] = {Symbol("x-opt-sequence-number"): draw(st.integers(0, 2**63 - 1))}
    if draw(st.booleans()):
        annotations[Symbol("x-opt-offset")] = str(draw(st.integers(0, 2**40)))
    if draw(st.booleans()):
        annotations[Symbol("x-opt-enqueued-time")] = Timestamp(draw(st.integers(0, 2**45)))
    if draw(st.booleans()):
        annotations[Symbol("x-opt-partition-key")] = draw(st.one_of(texts, st.none()))
    if draw(st.booleans()):
        annotations[Symbol("x-opt-publisher")] = draw(texts)
    for key, value in draw(st.dictionaries(symbols, scalars, max_size=3)).items():
        annotations.setdefault(key, value)
    order = draw(st.permutations(list(annotations)))
    annotations = {k: annotations[k] for k in order}
    parts = []
    if draw(st.booleans()):
        parts.append(section(amqp.HEADER, draw(widen(st.just([True, UByte(4), UInt(1000), False, UInt(0)])))))
    if draw(st.booleans()):
        metrics = {Symbol("last_enqueued_sequence_number"): 5, Symbol("last_enqueued_offset"): "9"}
        parts.append(section(amqp.DELIVERY_ANNOTATIONS, draw(widen(st.just(metrics)))))
    parts.append(section(amqp.MESSAGE_ANNOTATIONS, draw(widen(st.just(annotations)))))
    if draw(st.booleans()):
        fields = [
            draw(st.one_of(texts, st.binary(max_size=16), st.uuids(), st.integers(0, 2**64 - 1).map(ULong))),
            draw(st.binary(max_size=8)),
            draw(texts),
            draw(texts),
            draw(texts),
            draw(st.one_of(texts, st.uuids(), st.none())),
            draw(symbols),
            draw(symbols),
            Timestamp(draw(st.integers(0, 2**45))),
            Timestamp(draw(st.integers(0, 2**45))),
            draw(texts),
            UInt(draw(st.integers(0, 2**32 - 1))),
            draw(st.one_of(texts, st.none())),
        ][: draw(st.integers(0, 13))]
        fields = [v if draw(st.booleans()) else None for v in fields]
        parts.append(section(amqp.PROPERTIES, draw(widen(st.just(fields)))))
    values = st.one_of(scalars, compounds) if compound_properties else scalars
    if draw(st.booleans()):
        props = draw(st.dictionaries(texts, values, max_size=6))
        parts.append(section(amqp.APPLICATION_PROPERTIES, draw(widen(st.just(props)))))
    body = draw(st.sampled_from(["data", "data", "multi", "value", "sequence", "none"]))
    if body == "data":
        size = draw(st.sampled_from([0, 1, 200, 255, 256, 2048, 70_000]))
        parts.append(section(amqp.DATA, draw(widen(st.just(draw(st.binary(min_size=size, max_size=size)))))))
    elif body == "multi":
        for chunk in draw(st.lists(st.binary(max_size=300), min_size=2, max_size=3)):
            parts.append(section(amqp.DATA, chunk))
    elif body == "value":
        parts.append(section(amqp.AMQP_VALUE, draw(st.one_of(scalars, st.lists(scalars, max_size=3)))))
    elif body == "sequence":
        parts.append(section(amqp.AMQP_SEQUENCE, draw(st.lists(scalars, max_size=3))))
    if draw(st.booleans()):
        parts.append(section(amqp.FOOTER, {Symbol("f"): 1}))
    return b"".join(parts)


def both_ways(payload: bytes) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Columns]:
    reference = Columns()
    reference.append_sdk_message(decode_payload(memoryview(payload)))
    fast = Columns()
    decode_message(fast, payload)
    return reference.to_batch("3").to_pylist(), fast.to_batch("3").to_pylist(), fast
