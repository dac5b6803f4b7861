"""The emulator's AMQP codec: round trips, the SDK's positional decoding, and section splitting."""

from __future__ import annotations

import uuid

import pytest
from azure.eventhub._pyamqp._decode import decode_frame, decode_payload
from hypothesis import given
from hypothesis import strategies as st

from eventhubs_emulator import amqp
from eventhubs_emulator.amqp import Array, Described, Symbol, Timestamp, UInt, ULong

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.text(max_size=300),
    st.binary(max_size=300),
    st.floats(allow_nan=False),
    st.uuids(),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=8),
        st.dictionaries(st.text(max_size=20), children, max_size=8),
    ),
    max_leaves=40,
)


@given(values)
def test_round_trip(value):
    encoded = amqp.encode_value(value)
    decoded, end = amqp.decode_value(encoded)
    assert end == len(encoded)
    assert decoded == value
    assert amqp.skip_value(encoded, 0) == len(encoded)


@given(values)
def test_the_sdk_decoder_reads_what_we_encode(value):
    from azure.eventhub._pyamqp._decode import _DECODE_BY_CONSTRUCTOR

    encoded = memoryview(amqp.encode_value(value))
    rest, decoded = _DECODE_BY_CONSTRUCTOR[encoded[0]](encoded[1:])
    assert len(rest) == 0
    assert _normalize(decoded) == _normalize(value)


def _normalize(v):
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, list):
        return [_normalize(x) for x in v]
    if isinstance(v, dict):
        return {_normalize(k): _normalize(x) for k, x in v.items()}
    return v


def test_wire_types():
    assert amqp.encode_value(Symbol("ab")) == b"\xa3\x02ab"
    assert amqp.encode_value(UInt(0)) == b"\x43"
    assert amqp.encode_value(UInt(7)) == b"\x52\x07"
    assert amqp.encode_value(UInt(70000)) == b"\x70\x00\x01\x11\x70"
    assert amqp.encode_value(ULong(0)) == b"\x44"
    assert amqp.encode_value(Timestamp(1)) == b"\x83" + (1).to_bytes(8, "big")
    assert amqp.encode_value(5) == b"\x55\x05"
    assert amqp.encode_value([]) == b"\xc0\x01\x00"  # never list0: positional readers need a list
    assert amqp.decode_value(amqp.encode_value(Symbol("x")))[0].__class__ is Symbol
    long_text = "é" * 300
    assert amqp.decode_value(amqp.encode_value(long_text))[0] == long_text
    with pytest.raises(TypeError):
        amqp.encode_value(object())


def test_arrays():
    for kind, items in (("symbol", ["a", "bb"]), ("string", ["x", "yé"]), ("ulong", [1, 2**40])):
        encoded = amqp.encode_value(Array(kind, items))
        decoded, end = amqp.decode_value(encoded)
        assert end == len(encoded)
        assert decoded == items
    assert amqp.decode_value(b"\xe0\x02\x00\x40")[0] == []


@pytest.mark.parametrize(
    ("code", "arity"),
    [
        (amqp.OPEN, 10),
        (amqp.BEGIN, 8),
        (amqp.ATTACH, 14),
        (amqp.FLOW, 11),
        (amqp.TRANSFER, 11),
        (amqp.DISPOSITION, 6),
        (amqp.DETACH, 3),
        (amqp.END, 1),
        (amqp.CLOSE, 1),
    ],
)
def test_performatives_are_sent_at_full_arity(code, arity):
    body = amqp.encode_performative(code, [UInt(1)])
    frame_type, fields = decode_frame(memoryview(body))
    assert frame_type == code
    assert len(fields) - (1 if code == amqp.TRANSFER else 0) == arity


def test_frame_header():
    frame = amqp.encode_frame(3, b"\x00\x53\x18\xc0\x01\x00")
    assert frame[:8] == (14).to_bytes(4, "big") + b"\x02\x00\x00\x03"


def test_split_sections_and_sdk_decoding():
    props = [uuid.uuid4(), None, None, None, None, "corr", None, None, None, None, None, None, None]
    message = (
        amqp.encode_section(amqp.HEADER, [True])
        + amqp.encode_section(amqp.MESSAGE_ANNOTATIONS, {Symbol("x-opt-partition-key"): "k"})
        + amqp.encode_section(amqp.PROPERTIES, props)
        + amqp.encode_section(amqp.APPLICATION_PROPERTIES, {"a": 1})
        + amqp.encode_section(amqp.DATA, b"payload")
    )
    sections = amqp.split_sections(message)
    assert [d for d, _, _ in sections] == [
        amqp.HEADER,
        amqp.MESSAGE_ANNOTATIONS,
        amqp.PROPERTIES,
        amqp.APPLICATION_PROPERTIES,
        amqp.DATA,
    ]
    assert sections[-1][2] == len(message)
    assert amqp.section_value(message, sections[-1][1]) == b"payload"
    sdk = decode_payload(memoryview(message))
    assert sdk.message_annotations == {b"x-opt-partition-key": b"k"}
    assert sdk.properties.correlation_id == b"corr"
    assert sdk.data == [b"payload"]


def test_symbolic_section_descriptors():
    message = b"\x00\xa3\x10amqp:data:binary" + amqp.encode_value(b"x")
    assert amqp.split_sections(message)[0][0] == amqp.DATA


def test_map_entries_raw_keep_bytes():
    encoded = amqp.encode_value({Symbol("a"): UInt(5), Symbol("b"): "x"})
    entries = amqp.map_entries_raw(encoded, 0)
    assert [k for k, _ in entries] == ["a", "b"]
    rebuilt = amqp.map_from_raw([raw for _, raw in entries])
    assert rebuilt == encoded
    assert amqp.map_entries_raw(b"\x40", 0) == []


def test_described_and_errors():
    error = amqp.encode_error("amqp:link:stolen", "gone")
    decoded, _ = amqp.decode_value(amqp.encode_value(error))
    assert decoded == Described(amqp.ERROR, ["amqp:link:stolen", "gone", None])
    with pytest.raises(ValueError, match="constructor"):
        amqp.decode_value(b"\x74")


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("one"), st.binary(max_size=40)),
            st.tuples(st.just("run"), st.lists(st.binary(max_size=40), min_size=1, max_size=8), st.binary(max_size=5)),
            st.tuples(st.just("take"), st.integers(0, 12)),
        ),
        max_size=30,
    )
)
def test_raw_events_keep_every_message_in_order_however_runs_and_takes_interleave(steps: list[tuple]) -> None:
    """Messages kept in place (runs of a buffer with gaps between them) or one by one, taken off the front
    in any counts: what comes out, in pieces and as one buffer of spans, is the list of messages in order."""
    import numpy as np

    from eventhubs_spark.amqp.messages import RawEvents

    events, model, taken_model = RawEvents(), [], []
    taken = RawEvents()
    seq = 0
    for step in steps:
        if step[0] == "one":
            events.append(seq, step[1])
            model.append((seq, step[1]))
            seq += 1
        elif step[0] == "run":
            messages, gap = step[1], step[2]
            buffer, starts, ends = b"", [], []
            for m in messages:
                buffer += gap
                starts.append(len(buffer))
                buffer += m
                ends.append(len(buffer))
            buffer += gap
            events.add_run(
                buffer, np.array(starts, np.int64), np.array(ends, np.int64), list(range(seq, seq + len(messages)))
            )
            model += [(seq + i, m) for i, m in enumerate(messages)]
            seq += len(messages)
        else:
            head = events.take(step[1])
            taken.extend(head)
            taken_model += model[: step[1]]
            model = model[step[1] :]
        assert events.seqs == [s for s, _ in model] and events.payloads() == [m for _, m in model]
        assert events.nbytes == sum(len(m) for _, m in model) + 64 * len(model)
    assert taken.seqs == [s for s, _ in taken_model] and taken.payloads() == [m for _, m in taken_model]
    buffer, starts, ends = taken.spans()
    assert len(buffer) >= sum(len(m) for _, m in taken_model)
    assert [bytes(buffer[s:e]) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)] == [
        m for _, m in taken_model
    ]
