"""Networks without a network: the options, what the SDK and azure-storage-blob are given, the WebSocket
framing on both sides, and performatives with fields left out. What each real failure to connect means:
tests/integration/test_network_failures.py."""

from __future__ import annotations

import asyncio
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Message, Ping, Pong, Request

from eventhubs_emulator import amqp
from eventhubs_emulator import websocket as server_ws
from eventhubs_spark.amqp import websocket as client_ws
from eventhubs_spark.auth.network import HttpProxy, NetworkSettings
from eventhubs_spark.errors import OptionError
from eventhubs_spark.options import read_options, write_options

CONN = "Endpoint=sb://myns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub"


def net(**options: str) -> NetworkSettings:
    return read_options({"eventhubs.connectionString": CONN, **options}, "batch").settings.network


# -- options ----------------------------------------------------------------------------------------------


def test_the_defaults_are_the_sdks_amqp_over_tls():
    assert net() == NetworkSettings()
    assert net().sdk_kwargs(False) == {} and net().http_kwargs() == {}
    # the receivers' connection asks for an idle time-out (eventhubs.connectionIdleTimeout): a black hole is found
    assert net().reader_kwargs() == {"idle_timeout": 30.0}
    assert NetworkSettings(idle_timeout=0).reader_kwargs() == {}


def test_transport_type_takes_either_spelling_and_refuses_others():
    assert net(**{"eventhubs.transportType": "AMQPWEBSOCKETS"}).transport == "amqpWebSockets"
    assert net(**{"eventhubs.transportType": "amqp"}).transport == "amqp"
    with pytest.raises(OptionError, match=r"eventhubs.transportType: expected amqp or amqpWebSockets.*Example"):
        net(**{"eventhubs.transportType": "tcp"})


def test_a_proxy_implies_websockets_and_needs_host_and_port():
    settings = net(**{"eventhubs.httpProxy.hostname": "proxy.corp", "eventhubs.httpProxy.port": "3128"})
    assert settings.websockets and settings.proxy == HttpProxy("proxy.corp", 3128)
    with pytest.raises(OptionError, match="eventhubs.httpProxy.hostname and eventhubs.httpProxy.port"):
        net(**{"eventhubs.httpProxy.hostname": "proxy.corp"})
    with pytest.raises(OptionError, match="eventhubs.httpProxy.hostname and eventhubs.httpProxy.port"):
        net(**{"eventhubs.httpProxy.username": "u", "eventhubs.httpProxy.password": "p"})
    with pytest.raises(OptionError, match="expected a port from 1 to 65535"):
        net(**{"eventhubs.httpProxy.hostname": "proxy.corp", "eventhubs.httpProxy.port": "99999"})
    with pytest.raises(OptionError, match="without a port"):
        net(**{"eventhubs.httpProxy.hostname": "proxy.corp:3128", "eventhubs.httpProxy.port": "3128"})


def test_a_proxy_with_amqp_over_tls_is_refused_naming_websockets():
    with pytest.raises(OptionError, match="WebSockets only.*amqpWebSockets"):
        net(**{"eventhubs.transportType": "amqp", "eventhubs.httpProxy.hostname": "p", "eventhubs.httpProxy.port": "1"})


def test_proxy_credentials_go_in_pairs_and_the_password_never_shows():
    base = {"eventhubs.httpProxy.hostname": "proxy.corp", "eventhubs.httpProxy.port": "3128"}
    with pytest.raises(OptionError, match="username and eventhubs.httpProxy.password"):
        net(**base, **{"eventhubs.httpProxy.username": "svc"})
    options = read_options(
        {"eventhubs.connectionString": CONN, **base, "eventhubs.httpProxy.username": "svc",
         "eventhubs.httpProxy.password": "pr0xy-S3CRET"}, "stream",
    )  # fmt: skip
    assert "pr0xy-S3CRET" not in repr(options) and "pr0xy-S3CRET" not in str(options.settings)
    assert options.settings.network.proxy is not None and options.settings.network.proxy.username == "svc"
    revived = pickle.loads(pickle.dumps(options.settings))  # travels to executors and the receiver service
    assert revived.network == options.settings.network and revived.pool_key() == options.settings.pool_key()


def test_custom_endpoints_are_normalized_and_bad_ones_refused():
    assert net(**{"eventhubs.customEndpointAddress": "gw.internal:443"}).custom_endpoint == "sb://gw.internal:443"
    assert net(**{"eventhubs.customEndpointAddress": "amqps://10.0.0.4/"}).custom_endpoint == "sb://10.0.0.4"
    with pytest.raises(OptionError, match=r"eventhubs.customEndpointAddress: expected sb://host\[:port\]"):
        net(**{"eventhubs.customEndpointAddress": "sb://gw:notaport"})


def test_a_ca_bundle_must_exist(tmp_path):
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    assert net(**{"eventhubs.connectionVerify": str(bundle)}).ca_file == str(bundle)
    with pytest.raises(OptionError, match="eventhubs.connectionVerify: no file.*every node"):
        net(**{"eventhubs.connectionVerify": str(tmp_path / "missing.pem")})


def test_network_options_apply_to_writes_too():
    options = write_options({"eventhubs.connectionString": CONN, "eventhubs.transportType": "amqpWebSockets"})
    assert options.settings.network.websockets


def test_the_network_is_part_of_the_pool_key():
    plain = read_options({"eventhubs.connectionString": CONN}, "batch").settings
    websockets = read_options({"eventhubs.connectionString": CONN, "eventhubs.transportType": "amqpWebSockets"},
                              "batch").settings  # fmt: skip
    assert plain.pool_key() != websockets.pool_key()


# -- what the SDK and the blob store are given ----------------------------------------------------------------


def test_the_sdk_gets_its_own_names():
    from azure.eventhub import TransportType

    settings = NetworkSettings(
        transport="amqpWebSockets",
        proxy=HttpProxy("proxy.corp", 3128, "svc", _secret("p@ss:w/rd")),
        custom_endpoint="sb://gw.internal:8443",
        ca_file="/certs/ca.pem",
    )
    sync = settings.sdk_kwargs(False)
    assert sync == {
        "transport_type": TransportType.AmqpOverWebsocket,
        "http_proxy": {"proxy_hostname": "proxy.corp", "proxy_port": 3128, "username": "svc", "password": "p@ss:w/rd"},
        "custom_endpoint_address": "sb://gw.internal:8443",
        "connection_verify": "/certs/ca.pem",
    }
    assert settings.sdk_kwargs(True)["http_proxy"]["proxy_hostname"] == "http://proxy.corp"  # aiohttp takes a URL
    storage = settings.http_kwargs()
    assert storage["proxies"]["https"] == "http://svc:p%40ss%3Aw%2Frd@proxy.corp:3128"
    assert storage["connection_verify"] == "/certs/ca.pem"


def test_a_custom_endpoint_over_amqp_names_the_transport():
    """Without a transport type the SDK takes a custom endpoint for WebSockets: the default is said."""
    from azure.eventhub import TransportType

    kwargs = NetworkSettings(custom_endpoint="sb://10.0.0.4").sdk_kwargs(False)
    assert kwargs["transport_type"] == TransportType.Amqp


def _secret(value: str):
    from eventhubs_spark.auth.secret import Secret

    return Secret(value)


# -- WebSocket framing --------------------------------------------------------------------------------------------


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


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default


class _Inner:
    def __init__(self) -> None:
        self.data = b""
        self.transport = None

    def connection_made(self, transport: object) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data

    def connection_lost(self, exc: object) -> None:
        pass


def _served() -> tuple[_Inner, _Transport, server_ws.WebSocketServerProtocol]:
    """The emulator's WebSocket side on a recording transport, carrying a recording AMQP connection."""
    inner, transport = _Inner(), _Transport()
    proto = server_ws.WebSocketServerProtocol(inner)  # type: ignore[arg-type]
    proto.connection_made(transport)
    return inner, transport, proto


def _client(protocol: str = "AMQPWSB10", path: str = "/$servicebus/websocket") -> tuple[WSConnection, bytes]:
    """A WebSocket client (wsproto, independent of the server under test) and its upgrade request."""
    client = WSConnection(ConnectionType.CLIENT)
    return client, client.send(Request(host="x", target=path, subprotocols=[protocol]))


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


def test_the_server_closes_as_the_closing_handshake_says():
    _, transport, proto = _served()
    client, upgrade = _client()
    proto.data_received(upgrade)
    client.receive_data(transport.written)
    list(client.events())
    transport.written = b""
    proto.data_received(client.send(CloseConnection(code=1000)))
    client.receive_data(transport.written)
    (answer,) = list(client.events())
    assert isinstance(answer, CloseConnection) and answer.code == 1000 and transport.closed


@pytest.mark.parametrize(("path", "protocol", "status"), [("/other", "AMQPWSB10", b"404"), (None, "mqtt", b"400")])
def test_the_server_refuses_a_wrong_path_or_subprotocol(path, protocol, status):
    _, transport, proto = _served()
    proto.data_received(_client(protocol, path or "/$servicebus/websocket")[1])
    assert transport.written.startswith(b"HTTP/1.1 " + status) and transport.closed


def test_the_server_refuses_a_request_that_is_no_websocket_upgrade():
    _, transport, proto = _served()
    proto.data_received(b"GET /$servicebus/websocket HTTP/1.1\r\nHost: x\r\n\r\n")
    assert transport.written.startswith(b"HTTP/1.1 400") and transport.closed


# -- performatives with trailing fields left out (Qpid Proton, .NET, Java) --------------------------------------


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
