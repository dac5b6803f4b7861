"""Unit tests of :mod:`eventhubs_spark.auth.network`."""

from __future__ import annotations

import pytest
from wsproto.events import CloseConnection

from eventhubs_spark.auth.network import HttpProxy, NetworkSettings
from eventhubs_spark.errors import OptionError
from tests.unit.support.network import _client, _served, net


def test_the_defaults_are_the_sdks_amqp_over_tls():
    assert net() == NetworkSettings()
    assert net().http_kwargs() == {}
    # every client's sign-in waits the idle time-out, not the SDK's 60 s (a connection holed before its put-token)
    assert net().sdk_kwargs(False) == {"auth_timeout": 30.0} and NetworkSettings(idle_timeout=0).sdk_kwargs(False) == {}
    assert NetworkSettings(idle_timeout=1).sdk_kwargs(False) == {"auth_timeout": 5.0}  # the SDK counts whole seconds
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
        "auth_timeout": 30.0,
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
