"""Unit tests of :mod:`eventhubs_spark.amqp.websocket`."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto.events import AcceptConnection, BytesMessage, Message, Ping, Pong

from eventhubs_emulator import amqp
from eventhubs_spark.amqp import websocket as client_ws
from tests.unit.support.network import _client, _served


def _frame(opcode: int, payload: bytes, mask: bytes | None = None) -> bytes:
    """One final frame, written here from RFC 6455 section 5.2 (the connector's decoder is tested against it;
    the emulator's side is wsproto's): a server's frames are unmasked, a client's masked with ``mask``."""
    n = len(payload)
    if n < 126:
        length = bytes((n,))
    elif n < 65536:
        length = bytes((126,)) + n.to_bytes(2, "big")
    else:
        length = bytes((127,)) + n.to_bytes(8, "big")
    if mask is None:
        return bytes((0x80 | opcode,)) + length + payload
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes((0x80 | opcode, length[0] | 0x80)) + length[1:] + mask + masked


frames = st.lists(
    st.tuples(
        st.sampled_from([client_ws.BINARY, client_ws.CONTINUATION, client_ws.PING, client_ws.PONG]),
        st.one_of(st.binary(max_size=200), st.sampled_from([b"z" * 125, b"y" * 126, b"w" * 70_000])),
        st.one_of(st.none(), st.binary(min_size=4, max_size=4)),
    ),
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(frames=frames, cuts=st.lists(st.integers(min_value=1, max_value=70_000), max_size=12))
def test_the_client_decoder_gives_the_amqp_bytes_however_the_socket_cuts_them(frames, cuts):
    frames = [(op, p[:125] if op >= 0x8 else p, m) for op, p, m in frames]  # control frames are short
    raw = b"".join(_frame(op, p, m) for op, p, m in frames)
    stream = client_ws.WebSocketStream()
    out, pos = b"", 0
    for cut in [*cuts, len(raw)]:
        out += stream.feed(raw[pos : pos + cut])
        pos += cut
        if pos >= len(raw):
            break
    assert out == b"".join(p for op, p, _ in frames if op <= client_ws.BINARY)
    assert stream.controls == [(op, p) for op, p, _ in frames if op > client_ws.BINARY]
    assert stream.pending == 0


def test_the_server_protocol_carries_amqp_both_ways_and_answers_pings():
    inner, transport, proto = _served()
    client, upgrade = _client()
    proto.data_received(upgrade)
    client.receive_data(transport.written)
    accepted = list(client.events())
    assert isinstance(accepted[0], AcceptConnection) and accepted[0].subprotocol == "AMQPWSB10"
    transport.written = b""
    hello = client.send(Message(data=b"AMQP")) + client.send(Ping(payload=b"hi"))
    assert hello[1] & 0x80, "a client's frames are masked"
    proto.data_received(hello[:5])
    proto.data_received(hello[5:])
    assert inner.data == b"AMQP"
    client.receive_data(transport.written)
    assert [type(e) for e in client.events()] == [Pong] and proto.pings == 1
    transport.written = b""
    inner.transport.write(b"\x00\x00\x00\x08\x02\x00\x00\x00")  # what the AMQP connection writes
    client.receive_data(transport.written)
    (message,) = list(client.events())
    assert isinstance(message, BytesMessage) and message.data == b"\x00\x00\x00\x08\x02\x00\x00\x00"
    assert transport.written == _frame(client_ws.BINARY, message.data), "one unmasked binary frame per write"


def _performative(code: int, fields: list, descriptor: object = None) -> bytes:
    body = amqp.encode_list(fields) if fields else b"\x45"  # list0 for no fields at all
    head = b"\x00" + (amqp.encode_value(descriptor) if descriptor is not None else bytes((0x53, code)))
    return head + body


@pytest.mark.parametrize(("code", "arity"), sorted(amqp.ARITY.items()))
def test_every_performative_reads_at_full_arity_however_short_it_came(code, arity):
    for sent in range(0, arity + 1):
        fields = [amqp.UInt(7)] * sent
        decoded_code, decoded, _ = amqp.decode_performative(_performative(code, fields))
        assert decoded_code == code and len(decoded) == arity
        assert decoded[:sent] == fields and decoded[sent:] == [None] * (arity - sent)


def test_a_symbolic_performative_descriptor_is_read():
    code, fields, _ = amqp.decode_performative(_performative(0, [amqp.UInt(3)], amqp.Symbol("amqp:transfer:list")))
    assert code == amqp.TRANSFER and fields[0] == 3 and len(fields) == 11


def test_an_unknown_performative_is_an_error():
    with pytest.raises(ValueError, match="unknown performative"):
        amqp.decode_performative(_performative(0, [], amqp.Symbol("amqp:nonsense:list")))
