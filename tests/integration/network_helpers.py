"""The connector's options, and the SDK's keyword arguments, that reach the test emulator the way a real
namespace is reached: over TLS (AMQPS), over AMQP over WebSockets, or over WebSockets through a proxy."""

from __future__ import annotations

from typing import Any

TRANSPORTS = ("tls", "websockets")


def network_options(eventhub: Any, transport: str, proxy: Any = None) -> dict[str, str]:
    """``eventhub``'s TLS connection string with the options of ``transport`` ("tls" or "websockets"),
    through ``proxy`` (a conftest ProxyServer) when given."""
    options = {
        "eventhubs.connectionString": eventhub.tls_connection_string,
        "eventhubs.connectionVerify": eventhub.ca_file,
    }
    if transport == "tls":
        options["eventhubs.customEndpointAddress"] = eventhub.tls_endpoint
    else:
        options["eventhubs.transportType"] = "amqpWebSockets"
        options["eventhubs.customEndpointAddress"] = eventhub.websocket_endpoint
    if proxy is not None:
        options.update(proxy.options())
    return options


def sdk_kwargs(eventhub: Any, transport: str) -> dict[str, Any]:
    """The official SDK's keyword arguments for the same."""
    from azure.eventhub import TransportType

    websockets = transport == "websockets"
    return {
        "transport_type": TransportType.AmqpOverWebsocket if websockets else TransportType.Amqp,
        "custom_endpoint_address": eventhub.websocket_endpoint if websockets else eventhub.tls_endpoint,
        "connection_verify": eventhub.ca_file,
    }
