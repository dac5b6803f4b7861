"""Unit tests of :mod:`eventhubs_emulator.amqp`."""

from __future__ import annotations

import uuid

import pytest
from azure.eventhub._pyamqp._decode import decode_frame, decode_payload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventhubs_emulator import amqp
from eventhubs_emulator.amqp import Array, Described, Symbol, Timestamp, UInt, ULong
from eventhubs_emulator.broker import Broker, parse_batch, parse_message
from eventhubs_spark.amqp.messages import RawEvents
from eventhubs_spark.codec.layout import decode_spans
from tests.unit.support.decode import both_ways, messages
from tests.unit.support.emulator import message

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


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(messages(compound_properties=False))
def test_messages_of_common_forms_take_the_fast_path(payload: bytes) -> None:
    reference, fast, cols = both_ways(payload)
    assert fast == reference
    sections = {d for d in (0x76, 0x77) if bytes((0, 0x53, d)) in payload}
    if not sections:  # data bodies (or none): the SDK's decoder was not needed
        assert cols.fallbacks == 0, "a message of the common forms fell back to the SDK's decoder"


def test_stamped_annotations_replace_client_ones():
    m = parse_message(
        amqp.encode_section(
            amqp.MESSAGE_ANNOTATIONS,
            {amqp.Symbol("x-opt-sequence-number"): 99, amqp.Symbol("custom"): "keep"},
        )
        + amqp.encode_section(amqp.DATA, b"x")
    )
    broker = Broker()
    p = broker.add_hub("h", 1).partitions[0]
    p.append([m], None)
    annotations = amqp.section_value(p.events[0].body, 0)
    assert annotations["x-opt-sequence-number"] == 0
    assert annotations["custom"] == "keep"


def test_every_body_kind_is_kept_as_the_producer_sent_it_and_the_connector_reads_it():
    """Several data sections, a value body, a sequence body, a footer: stored byte for byte behind the
    service's annotations, and decoded by the connector as the SDK would see them."""

    props = amqp.encode_section(amqp.APPLICATION_PROPERTIES, {"k": "v"})
    footer = amqp.encode_section(amqp.FOOTER, {amqp.Symbol("x-check"): "1"})
    bodies = [
        amqp.encode_section(amqp.DATA, b"first-") + amqp.encode_section(amqp.DATA, b"second") + footer,
        amqp.encode_section(amqp.AMQP_VALUE, "a value"),
        amqp.encode_section(amqp.AMQP_SEQUENCE, ["a", 1]) + amqp.encode_section(amqp.AMQP_SEQUENCE, ["b"]),
    ]
    p = Broker().add_hub("h", 1).partitions[0]
    p.append([parse_message(props + body) for body in bodies], None)
    raw = RawEvents()
    for event in p.events:
        assert event.body.endswith(props + bodies[event.sequence_number])  # kept as sent, after the annotations
        raw.append(event.sequence_number, event.header + event.delivery + event.body)
    batch, _ = decode_spans(*raw.spans(), "0", min_rows=0)
    rows = batch.to_pylist()
    assert [r["body"] for r in rows] == [b"first-second", b"a value", b'[["a", 1], ["b"]]']
    assert all(dict(r["properties"]) == {"k": "v"} for r in rows)


def test_batches_carry_the_outer_partition_key():
    inner = [message(b"1"), message(b"2")]
    outer = amqp.encode_section(amqp.MESSAGE_ANNOTATIONS, {amqp.Symbol("x-opt-partition-key"): "k"}) + b"".join(
        amqp.encode_section(amqp.DATA, m) for m in inner
    )
    events, key = parse_batch(outer)
    assert key == "k" and len(events) == 2


def test_the_module_entry_runs_the_emulator():
    import subprocess
    import sys

    shown = subprocess.run([sys.executable, "-m", "eventhubs_emulator", "--help"], capture_output=True, text=True,
                           timeout=60)  # fmt: skip
    assert shown.returncode == 0 and "--hub" in shown.stdout and "--websocket-port" in shown.stdout, shown.stderr


def test_an_attach_reply_sends_the_clients_source_back_in_its_own_amqp_types():
    """proton-j (the JVM SDKs) casts every field of the source in the ATTACH reply: the decoder's plain ints
    and lists must go back as uint, symbol and symbol arrays, or a Java receiver's connection fails with
    amqp:decode-error ("Incorrect type used")."""
    from eventhubs_emulator import amqp
    from eventhubs_emulator.connection import _reencode_terminus

    source = [
        "hub/ConsumerGroups/$Default/Partitions/0",
        0,  # durable: a uint on the wire, decoded as an int
        amqp.Symbol("session-end"),
        0,  # timeout
        False,
        None,
        None,
        {amqp.Symbol("apache.org:selector-filter:string"): "amqp.annotation.x-opt-offset > '-1'"},
        None,
        ["amqp:accepted:list"],  # outcomes: an array of symbols, decoded as a list
        "com.microsoft:one",  # capabilities: a single symbol may stand for an array of one
    ]
    wire = amqp.encode_value(_reencode_terminus(amqp.Described(amqp.ULong(amqp.SOURCE), source), amqp.SOURCE))
    assert wire[:3] == b"\x00\x53\x28"
    reply = _reencode_terminus(amqp.Described(amqp.ULong(amqp.SOURCE), source), amqp.SOURCE).value
    assert type(reply[1]) is amqp.UInt and type(reply[3]) is amqp.UInt and type(reply[2]) is amqp.Symbol
    assert reply[9] == amqp.Array("symbol", [amqp.Symbol("amqp:accepted:list")])
    assert reply[10] == amqp.Array("symbol", [amqp.Symbol("com.microsoft:one")])
    assert reply[0] == source[0] and reply[7] == source[7] and reply[4] is False
    assert b"Partitions/0\x43\xa3" in wire and b"\xf0" in wire  # uint0 after the address; an array32 on the wire


def test_a_hubs_partition_count_is_an_amqp_int():
    """The legacy Java SDK under the old Scala connector casts partition_count to Integer."""
    from eventhubs_emulator import amqp
    from eventhubs_emulator.broker import Broker

    broker = Broker()
    broker.add_hub("h", 3)
    count = broker.hubs["h"].properties()["partition_count"]
    assert type(count) is amqp.Int and count == 3
    assert amqp.encode_value(count) == b"\x54\x03"
