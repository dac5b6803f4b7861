"""How a namespace is reached over the network: transport, HTTP proxy, custom endpoint, certificates.

And what a failure to get through means.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from eventhubs_spark import defaults
from eventhubs_spark.auth.secret import Secret

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


SIGN_IN_FLOOR = 5.0  # seconds a sign-in may wait at the least, whatever the idle time-out (see sdk_kwargs)


@dataclass(frozen=True)
class NetworkSettings:
    """Transport, proxy, custom endpoint and CA bundle; the defaults are the SDK's (AMQPS on 5671)."""

    transport: str = AMQP
    proxy: HttpProxy | None = None
    custom_endpoint: str | None = None  # sb://host[:port] of a private endpoint or gateway
    ca_file: str | None = None  # a PEM bundle to trust instead of certifi's (the SDK's connection_verify)
    # A receivers' connection that receives no frame for this long is dead (0: never said): asked of the service in
    # OPEN, which then sends a heartbeat at least twice as often, so only a network that drops everything (a black
    # hole) reaches it, and the SDK closes the connection, and the receivers open another (see reader_kwargs).
    idle_timeout: float = defaults.CONNECTION_IDLE_TIMEOUT

    @property
    def websockets(self) -> bool:
        return self.transport == WEBSOCKETS

    def sdk_kwargs(self, is_async: bool) -> dict[str, Any]:
        """The SDK client's keyword arguments for these settings.

        Every client's sign-in waits at most the connection idle time-out (the SDK's ``auth_timeout``, 60 s
        unless told): a live service answers a put-token at once, and one whose connection fell into a black
        hole between the opening and the sign-in never does, so each such connection held a send or a read
        back 60 s (one after another when the sink settled unanswered sends; bounded openings alone did not
        cover it, :func:`~eventhubs_spark.amqp.sdk.bound_connection_opening`)."""
        from azure.eventhub import TransportType

        kwargs: dict[str, Any] = {}
        if self.idle_timeout > 0:
            # at least SIGN_IN_FLOOR: the SDK counts the wait in whole seconds (a 1 s bound could end at once)
            kwargs["auth_timeout"] = max(self.idle_timeout, SIGN_IN_FLOOR)
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

    def reader_kwargs(self) -> dict[str, Any]:
        """What a connection read all the time (the receivers' shared connection, whose reader thread reads
        every frame) asks more: an idle time-out, so a black-holed connection is found dead. Not for
        producers and management clients: nothing reads their connection between calls, so the service's
        heartbeats would go unread and the next call after a quiet spell would find the connection "dead"."""
        return {"idle_timeout": self.idle_timeout} if self.idle_timeout > 0 else {}

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

    def where(self, namespace: str, emulator: bool = False) -> str:
        """Where a client connects, in words: host, port and transport (for error messages), as the user gave
        them: the development emulator's port is the one in the connection string's Endpoint."""
        host, _, given = namespace.partition(":")
        if emulator and self.custom_endpoint is None:
            return f"{host}:{given or 5672} (plain AMQP: UseDevelopmentEmulator=true)"
        port = WEBSOCKETS_PORT if self.websockets else AMQPS_PORT
        if self.custom_endpoint is not None:
            from urllib.parse import urlparse

            parsed = urlparse(self.custom_endpoint if "//" in self.custom_endpoint else "sb://" + self.custom_endpoint)
            host, port = parsed.hostname or host, parsed.port or port
        what = "AMQP over WebSockets (TLS)" if self.websockets else "AMQP over TLS"
        via = f" through the HTTP proxy {self.proxy}" if self.proxy is not None else ""
        return f"{host}:{port} ({what}{via})"
