"""How a namespace is reached over the network: the transport, an HTTP proxy, a custom endpoint and the
certificates to trust, and what a failure to get through means.

Every real namespace is reached over TLS: AMQPS on port 5671, or AMQP over WebSockets on 443, the one
way out of networks that allow only HTTPS, often through an HTTP proxy (CONNECT). A private endpoint or
an application gateway is a custom endpoint address; a TLS-inspecting proxy re-signs every certificate
with a company CA, which clients must be told to trust. These settings are plain, picklable data
(the proxy password wrapped as a :class:`Secret`), carried by the connection settings to every
process, and passed to the SDK under the names it uses (``transport_type``, ``http_proxy``,
``custom_endpoint_address``, ``connection_verify``) and to azure-core's HTTPS clients (azure-storage-blob
for the checkpoint store, azure-identity for Entra sign-in) under theirs (``proxies``, ``connection_verify``).

:func:`network_failure` says what an exception raised while connecting means, by walking its causes:
a refused or unreachable port (may heal: retried until the deadline), an untrusted certificate or a
wrong host name, a proxy that refuses or asks for credentials (will not heal: raised at once). Each
becomes a :class:`~eventhubs_spark.errors.NetworkError` whose message names the option to change.
"""

from __future__ import annotations

import errno
import socket
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from ..errors import NetworkError
from .credentials import Secret

AMQP, WEBSOCKETS = "amqp", "amqpWebSockets"
TRANSPORTS = (AMQP, WEBSOCKETS)
AMQPS_PORT, WEBSOCKETS_PORT = 5671, 443


@dataclass(frozen=True)
class HttpProxy:
    """An HTTP proxy that tunnels (CONNECT) AMQP over WebSockets; ``username`` and ``password`` for
    one that asks for credentials (basic authentication)."""

    hostname: str
    port: int
    username: str | None = None
    password: Secret | None = None

    def url(self, with_credentials: bool = True) -> str:
        """``http://[user:password@]host:port`` (azure-core's and aiohttp's form)."""
        auth = ""
        if with_credentials and self.username is not None:
            password = self.password.reveal() if self.password is not None else ""
            auth = f"{quote(self.username, safe='')}:{quote(password, safe='')}@"
        return f"http://{auth}{self.hostname}:{self.port}"

    def __str__(self) -> str:
        return f"{self.hostname}:{self.port}"


@dataclass(frozen=True)
class NetworkSettings:
    """Transport, proxy, custom endpoint and CA bundle; the defaults are the SDK's (AMQPS on 5671)."""

    transport: str = AMQP
    proxy: HttpProxy | None = None
    custom_endpoint: str | None = None  # sb://host[:port] of a private endpoint or gateway
    ca_file: str | None = None  # a PEM bundle to trust instead of certifi's (the SDK's connection_verify)

    @property
    def websockets(self) -> bool:
        return self.transport == WEBSOCKETS

    def sdk_kwargs(self, is_async: bool) -> dict[str, Any]:
        """The SDK client's keyword arguments for these settings (nothing for the defaults)."""
        from azure.eventhub import TransportType

        kwargs: dict[str, Any] = {}
        if self.websockets:
            kwargs["transport_type"] = TransportType.AmqpOverWebsocket
        elif self.custom_endpoint is not None:
            # Named explicitly: with a custom endpoint and no transport type, the SDK picks WebSockets.
            kwargs["transport_type"] = TransportType.Amqp
        if self.proxy is not None:
            proxy: dict[str, Any] = {
                # aiohttp (the async clients) takes the proxy as a URL; websocket-client a bare host name
                "proxy_hostname": f"http://{self.proxy.hostname}" if is_async else self.proxy.hostname,
                "proxy_port": self.proxy.port,
            }
            if self.proxy.username is not None:
                proxy["username"] = self.proxy.username
                proxy["password"] = self.proxy.password.reveal() if self.proxy.password is not None else ""
            kwargs["http_proxy"] = proxy
        if self.custom_endpoint is not None:
            kwargs["custom_endpoint_address"] = self.custom_endpoint
        if self.ca_file is not None:
            kwargs["connection_verify"] = self.ca_file
        return kwargs

    def http_kwargs(self) -> dict[str, Any]:
        """azure-core's keyword arguments for the HTTPS clients beside the hub's: the same proxy and CA bundle
        for the checkpoint store (azure-storage-blob) and Entra sign-in (azure-identity); a TLS-inspecting
        proxy re-signs their certificates too."""
        kwargs: dict[str, Any] = {}
        if self.proxy is not None:
            url = self.proxy.url()
            kwargs["proxies"] = {"http": url, "https": url}
        if self.ca_file is not None:
            kwargs["connection_verify"] = self.ca_file
        return kwargs

    def where(self, namespace: str) -> str:
        """Where a client connects, in words: host, port and transport (for error messages)."""
        host = namespace.split(":")[0]
        port = WEBSOCKETS_PORT if self.websockets else AMQPS_PORT
        if self.custom_endpoint is not None:
            from urllib.parse import urlparse

            parsed = urlparse(self.custom_endpoint if "//" in self.custom_endpoint else "sb://" + self.custom_endpoint)
            host, port = parsed.hostname or host, parsed.port or port
        what = "AMQP over WebSockets (TLS)" if self.websockets else "AMQP over TLS"
        via = f" through the HTTP proxy {self.proxy}" if self.proxy is not None else ""
        return f"{host}:{port} ({what}{via})"


# -- what a failure to connect means ----------------------------------------------------------------------

_UNREACHABLE = {
    errno.ECONNREFUSED,
    errno.ETIMEDOUT,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.ECONNRESET,
    errno.ECONNABORTED,
}
_PORT_HINT = (
    "If your network allows only HTTPS (port 443), set eventhubs.transportType=amqpWebSockets (and "
    "eventhubs.httpProxy.hostname/port if it goes out through a proxy); for a private endpoint or gateway, "
    "check eventhubs.customEndpointAddress"
)


def causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and everything it was raised from or during, outermost first (each once)."""
    seen: list[BaseException] = []
    stack: list[object] = [exc]
    while stack:
        current = stack.pop(0)
        if not isinstance(current, BaseException) or any(current is s for s in seen):
            continue
        seen.append(current)
        # the SDK's errors keep what they wrap in ``error`` (an exception, or only its text), aiohttp's
        # in ``os_error`` and ``certificate_error``
        stack.extend([current.__cause__, current.__context__, getattr(current, "error", None)])
        stack.extend([getattr(current, "os_error", None), getattr(current, "certificate_error", None)])
    return seen


def _status(exc: BaseException) -> int | None:
    """An HTTP status a proxy or the WebSocket handshake answered with, from websocket-client's or
    aiohttp's errors (or their text)."""
    for name in ("status", "status_code"):
        value = getattr(exc, name, None)
        if isinstance(value, int):
            return value
    text = str(exc)
    marker = "status:" if "status:" in text else "status " if "status " in text else None
    if marker is not None:
        digits = text.split(marker, 1)[1].strip().split(" ")[0].strip(",.)")
        if digits.isdigit():
            return int(digits)
    return None


def network_failure(exc: BaseException, namespace: str, network: NetworkSettings) -> NetworkError | None:
    """A clear :class:`NetworkError` when ``exc`` (or anything it came from) is a failure to reach the
    namespace, naming what to change; None when it is something else."""
    for cause in causes(exc):
        found = classify(cause, namespace, network)
        if found is not None:
            return found
    return None


def classify(cause: BaseException, namespace: str, network: NetworkSettings) -> NetworkError | None:
    """:func:`network_failure` for one exception, not its causes."""
    if isinstance(cause, NetworkError):
        return cause
    where = network.where(namespace)
    kind = type(cause).__name__
    text = " ".join(str(cause).split())[:300]
    if isinstance(cause, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in text:
        # 62 and 64: X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH
        if "mismatch" in text.lower() or "doesn't match" in text or getattr(cause, "verify_code", 0) in (62, 64):
            return NetworkError(
                f"the TLS certificate presented at {where} does not name that host ({text}). Connect by a "
                "name the certificate carries: check eventhubs.customEndpointAddress (a private endpoint is "
                "reached by the namespace's own name, resolved to the endpoint's address by your DNS)"
            )
        return NetworkError(
            f"the TLS certificate presented at {where} is not trusted ({text}). If a proxy or firewall "
            "inspects TLS, set eventhubs.connectionVerify to its CA bundle (a PEM file present on every node, "
            "e.g. /Volumes/main/certs/company-ca.pem)"
        )
    if isinstance(cause, ssl.SSLError) or kind in ("ClientConnectorSSLError", "SSLError"):
        return NetworkError(
            f"the TLS handshake with {where} failed ({text}): the port may not serve TLS, or something on "
            "the way cut it. Check eventhubs.customEndpointAddress and eventhubs.transportType"
        )
    if "proxy" in kind.lower() or "via proxy" in text or "Proxy" in kind:
        status = _status(cause)
        proxy = network.proxy
        if status == 407:
            return NetworkError(
                f"the HTTP proxy {proxy} asks for credentials (407 Proxy Authentication Required) on the way to "
                f"{where}: set eventhubs.httpProxy.username and eventhubs.httpProxy.password (or check them)"
            )
        if status is not None:
            return NetworkError(
                f"the HTTP proxy {proxy} refused to connect to {where} (status {status}): it must allow CONNECT "
                "to the namespace on port 443; check eventhubs.httpProxy.hostname and eventhubs.httpProxy.port"
            )
        return NetworkError(
            f"cannot reach the HTTP proxy {proxy} ({text}): check eventhubs.httpProxy.hostname and "
            "eventhubs.httpProxy.port",
            retriable=True,
        )
    if kind == "WebSocketBadStatusException" or (kind == "WSServerHandshakeError"):
        status = _status(cause)
        return NetworkError(
            f"the WebSocket handshake with {where} was answered with status {status} ({text}): the address "
            "does not serve AMQP over WebSockets at /$servicebus/websocket; check "
            "eventhubs.customEndpointAddress and eventhubs.transportType"
        )
    if kind == "WebSocketConnectionClosedException":
        return NetworkError(
            f"the connection to {where} closed during the WebSocket handshake ({text}): check that the address "
            "serves AMQP over WebSockets (port 443, or the port in eventhubs.customEndpointAddress) and "
            "eventhubs.transportType",
            retriable=True,
        )
    if isinstance(cause, socket.gaierror) or kind == "WebSocketAddressException":
        return NetworkError(
            f"cannot resolve the host of {where} ({text}): check the namespace (the connection string's "
            "Endpoint, or eventhubs.namespace) and eventhubs.customEndpointAddress",
            retriable=True,
        )
    connect_timeout = isinstance(cause, TimeoutError) and str(cause) == "timed out"  # the socket's own
    if (
        isinstance(cause, ConnectionRefusedError)
        or connect_timeout
        or (isinstance(cause, OSError) and cause.errno in _UNREACHABLE)
    ):
        what = "refused the connection" if isinstance(cause, ConnectionRefusedError) else f"is unreachable ({text})"
        return NetworkError(f"{where} {what}. {_PORT_HINT}", retriable=True)
    if kind in ("ClientConnectorError", "ClientOSError", "ServerTimeoutError", "WebSocketTimeoutException"):
        return NetworkError(f"{where} is unreachable ({text}). {_PORT_HINT}", retriable=True)
    return None
