"""What a failure to reach the namespace means, told by the type of what was raised.

The SDK fails through the standard library, websocket-client and aiohttp, each in its own types and wrapped in the
SDK's: :func:`network_failure` walks the chain and :func:`classify` knows each by class, errno or ``ssl`` code (by
text only where nothing else says it: :data:`TEXT_ONLY`), into a :class:`~eventhubs_spark.errors.NetworkError`
naming the option to change.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import errno
import functools
import importlib
import re
import socket
import ssl
from types import ModuleType
from typing import Any

from eventhubs_spark.auth.network import NetworkSettings
from eventhubs_spark.errors import NetworkError

#: The failures whose meaning is only in their text, with the library versions that text was checked against.
TEXT_ONLY = {
    "websocket-client WebSocketProxyException": ("status: (\\d{3})", "websocket-client 1.6-1.9.2 (_http._tunnel)"),
    "socket connect time-out": ("timed out", "CPython 3.10-3.13 (socket.create_connection, ssl handshakes)"),
}
_PROXY_STATUS = re.compile(TEXT_ONLY["websocket-client WebSocketProxyException"][0])
_SOCKET_TIMEOUT_TEXT = TEXT_ONLY["socket connect time-out"][0]

# Errors of connect(2) that say the address could not be reached (any of them may heal)
_UNREACHABLE = {
    errno.ECONNREFUSED,
    errno.ETIMEDOUT,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.ECONNRESET,
    errno.ECONNABORTED,
}
# OpenSSL's verify codes for a certificate that is valid but names another host (or IP address)
_X509_V_ERR_HOSTNAME_MISMATCH, _X509_V_ERR_IP_ADDRESS_MISMATCH = 62, 64
_PORT_HINT = (
    "If your network allows only HTTPS (port 443), set eventhubs.transportType=amqpWebSockets (and "
    "eventhubs.httpProxy.hostname/port if it goes out through a proxy); for a private endpoint or gateway, "
    "check eventhubs.customEndpointAddress"
)


@functools.lru_cache(maxsize=1)
def _libraries() -> tuple[ModuleType | None, ModuleType | None]:
    """websocket-client's and aiohttp's exception modules (both are dependencies; None where one is absent),
    imported on the first failure rather than on every import of the connector."""
    found: list[ModuleType | None] = []
    for name in ("websocket", "aiohttp"):
        try:
            found.append(importlib.import_module(name))
        except ImportError:  # pragma: no cover - both are dependencies
            found.append(None)
    return found[0], found[1]


def causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and everything it was raised from or during, outermost first (each once)."""
    seen: list[BaseException] = []
    stack: list[object] = [exc]
    while stack:
        current = stack.pop(0)
        if not isinstance(current, BaseException) or any(current is s for s in seen):
            continue
        seen.append(current)
        # the SDK's errors keep what they wrap in ``error`` (an exception, or only its text), pyamqp's in
        # ``inner_error``, aiohttp's in ``os_error`` and ``certificate_error``
        stack.extend([current.__cause__, current.__context__, getattr(current, "error", None)])
        stack.append(getattr(current, "inner_error", None))
        stack.extend([getattr(current, "os_error", None), getattr(current, "certificate_error", None)])
    return seen


def network_failure(
    exc: BaseException, namespace: str, network: NetworkSettings, emulator: bool = False
) -> NetworkError | None:
    """A clear :class:`NetworkError` when ``exc`` (or anything it came from) is a failure to reach the
    namespace, naming what to change; None when it is something else."""
    for cause in causes(exc):
        found = classify(cause, namespace, network, emulator)
        if found is not None:
            return found
    return None


def classify(
    cause: BaseException, namespace: str, network: NetworkSettings, emulator: bool = False
) -> NetworkError | None:
    """:func:`network_failure` for one exception, not its causes (an aiohttp connector error is asked
    about the exception it carries first: that one is the more precise)."""
    if isinstance(cause, NetworkError):
        return cause
    ws, aiohttp = _libraries()
    where = network.where(namespace, emulator)
    text = " ".join(str(cause).split())[:300]
    if aiohttp is not None and isinstance(cause, aiohttp.ClientConnectorError):
        if isinstance(cause, aiohttp.ClientProxyConnectionError):
            return _proxy_unreachable(network, text)
        inner = getattr(cause, "certificate_error", None) or getattr(cause, "os_error", None)
        if isinstance(inner, BaseException) and inner is not cause:
            found = classify(inner, namespace, network, emulator)
            if found is not None:
                return found
    if isinstance(cause, ssl.SSLCertVerificationError):
        if cause.verify_code in (_X509_V_ERR_HOSTNAME_MISMATCH, _X509_V_ERR_IP_ADDRESS_MISMATCH):
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
    if isinstance(cause, ssl.SSLError) or (aiohttp is not None and isinstance(cause, aiohttp.ClientSSLError)):
        return NetworkError(
            f"the TLS handshake with {where} failed ({text}): the port may not serve TLS, or something on "
            "the way cut it. Check eventhubs.customEndpointAddress and eventhubs.transportType"
        )
    proxy_status = _proxy_status(cause, ws, aiohttp)
    if proxy_status is not None:
        return _proxy_refused(network, where, proxy_status)
    handshake_status = _handshake_status(cause, ws, aiohttp)
    if handshake_status is not None:
        return NetworkError(
            f"the WebSocket handshake with {where} was answered with status {handshake_status} ({text}): the "
            "address does not serve AMQP over WebSockets at /$servicebus/websocket; check "
            "eventhubs.customEndpointAddress and eventhubs.transportType"
        )
    if ws is not None and isinstance(cause, ws.WebSocketConnectionClosedException):
        return NetworkError(
            f"the connection to {where} closed during the WebSocket handshake ({text}): check that the address "
            "serves AMQP over WebSockets (port 443, or the port in eventhubs.customEndpointAddress) and "
            "eventhubs.transportType",
            retriable=True,
        )
    if (
        isinstance(cause, socket.gaierror)
        or (ws is not None and isinstance(cause, ws.WebSocketAddressException))
        or (aiohttp is not None and isinstance(cause, aiohttp.ClientConnectorDNSError))
    ):
        return NetworkError(
            f"cannot resolve the host of {where} ({text}): check the namespace (the connection string's "
            "Endpoint, or eventhubs.namespace) and eventhubs.customEndpointAddress",
            retriable=True,
            wrong_address=True,
        )
    if _unreachable(cause, ws, aiohttp):
        if network.proxy is not None:  # through a proxy, the only address a client connects to is the proxy's
            return _proxy_unreachable(network, text)
        refused = isinstance(cause, ConnectionRefusedError) or getattr(cause, "errno", None) == errno.ECONNREFUSED
        what = (
            "refused the connection (nothing listens on that port there)"
            if refused
            else f"did not answer ({text}): a firewall that drops the connection, or a wrong address"
        )
        if emulator and network.custom_endpoint is None:
            hint = ("Check the host and port of the connection string's Endpoint: the emulator says where it listens "
                    "when it starts")  # fmt: skip
        elif network.websockets:
            hint = ("Check eventhubs.customEndpointAddress, and eventhubs.httpProxy.hostname/port if the network goes "
                    "out through a proxy")  # fmt: skip
        else:
            hint = _PORT_HINT  # a TLS port blocked: WebSockets on 443 may pass where it does not
        return NetworkError(f"{where} {what}. {hint}", retriable=True, wrong_address=refused)
    return None


def _proxy_status(cause: BaseException, ws: Any, aiohttp: Any) -> int | None:
    """The status an HTTP proxy answered a CONNECT with, when ``cause`` is that refusal."""
    if aiohttp is not None and isinstance(cause, aiohttp.ClientHttpProxyError):
        return int(cause.status)
    if ws is not None and isinstance(cause, ws.WebSocketProxyException):
        found = _PROXY_STATUS.search(str(cause))  # the one place websocket-client keeps it (TEXT_ONLY)
        return int(found.group(1)) if found else 0
    return None


def _handshake_status(cause: BaseException, ws: Any, aiohttp: Any) -> int | None:
    """The HTTP status a WebSocket opening handshake was answered with, when ``cause`` is that refusal."""
    if aiohttp is not None and isinstance(cause, aiohttp.WSServerHandshakeError):
        return int(cause.status)
    if ws is not None and isinstance(cause, ws.WebSocketBadStatusException):
        return int(cause.status_code)
    return None


def _unreachable(cause: BaseException, ws: Any, aiohttp: Any) -> bool:
    """A port that refused, or an address that could not be reached, in any of the three libraries."""
    if isinstance(cause, ConnectionRefusedError) or (isinstance(cause, OSError) and cause.errno in _UNREACHABLE):
        return True
    if isinstance(cause, TimeoutError) and cause.args == (_SOCKET_TIMEOUT_TEXT,):  # a plain socket's (TEXT_ONLY)
        return True
    if ws is not None and isinstance(cause, ws.WebSocketTimeoutException):
        return True
    return aiohttp is not None and isinstance(cause, aiohttp.ClientConnectorError | aiohttp.ServerTimeoutError)


def _proxy_unreachable(network: NetworkSettings, text: str) -> NetworkError:
    return NetworkError(
        f"cannot reach the HTTP proxy {network.proxy} ({text}): check eventhubs.httpProxy.hostname and "
        "eventhubs.httpProxy.port",
        retriable=True,
    )


def _proxy_refused(network: NetworkSettings, where: str, status: int) -> NetworkError:
    if status == 407:
        return NetworkError(
            f"the HTTP proxy {network.proxy} asks for credentials (407 Proxy Authentication Required) on the way "
            f"to {where}: set eventhubs.httpProxy.username and eventhubs.httpProxy.password (or check them)"
        )
    return NetworkError(
        f"the HTTP proxy {network.proxy} refused to connect to {where} (status {status}): it must allow CONNECT "
        "to the namespace on port 443; check eventhubs.httpProxy.hostname and eventhubs.httpProxy.port"
    )
