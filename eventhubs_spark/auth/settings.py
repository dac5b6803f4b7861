"""Connection settings parsed from a connection string, with the secret kept out of every repr.

These travel to executors inside input partitions (plain, picklable data): each process builds its
own clients from them, never a pickled client or credential.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from eventhubs_spark.auth.credentials import EntraSettings
from eventhubs_spark.auth.network import NetworkSettings
from eventhubs_spark.auth.secret import Secret
from eventhubs_spark.common.retry import RetryPolicy
from eventhubs_spark.errors import OptionError

CONNECTION_EXAMPLE = (
    "Endpoint=sb://NAMESPACE.servicebus.windows.net/;SharedAccessKeyName=NAME;SharedAccessKey=KEY;EntityPath=HUB"
)


#: How a client signs in to Event Hubs, the values of ``eventhubs.auth``.
ENTRA_METHODS = ("servicePrincipal", "managedIdentity", "workloadIdentity", "defaultAzureCredential",
                 "serviceCredential")  # fmt: skip
AUTH_METHODS = ("connectionString", "sasToken", *ENTRA_METHODS)


@dataclass(frozen=True)
class ConnectionSettings:
    """Where the hub is and how to sign in; ``namespace`` is host[:port] as the SDKs derive it.

    Exactly one of ``connection_string``, ``sas_token`` and ``entra`` is set. Everything here is
    plain, picklable data with secrets wrapped in :class:`Secret`; clients and credentials are built
    from it where they are used (:meth:`consumer`, :meth:`producer`).
    """

    namespace: str
    hub: str
    connection_string: Secret | None = None
    sas_token: Secret | None = None
    entra: EntraSettings | None = None
    emulator: bool = False  # plain AMQP without TLS, as UseDevelopmentEmulator=true
    network: NetworkSettings = dataclasses.field(default_factory=NetworkSettings)  # transport, proxy, endpoint, CAs
    retry: RetryPolicy = dataclasses.field(default_factory=RetryPolicy)  # eventhubs.retry.*: every retry loop's waits

    @property
    def fully_qualified_namespace(self) -> str:
        return self.namespace

    @property
    def auth_method(self) -> str:
        if self.connection_string is not None:
            return "connectionString"
        if self.sas_token is not None:
            return "sasToken"
        return self.entra.method if self.entra else "defaultAzureCredential"

    def pool_key(self) -> tuple[str, str, int]:
        """Identifies the credentials and the way there without holding them (a hash), for pool keys."""
        return (self.namespace, self.hub, hash((self.connection_string, self.sas_token, self.entra, self.network)))

    def consumer(self, **kwargs: Any) -> Any:
        """A synchronous ``EventHubConsumerClient`` signed in as configured."""
        from azure.eventhub import EventHubConsumerClient

        return self._client(EventHubConsumerClient, False, kwargs)

    def producer(self, **kwargs: Any) -> Any:
        """A synchronous ``EventHubProducerClient`` signed in as configured."""
        from azure.eventhub import EventHubProducerClient

        return self._client(EventHubProducerClient, False, kwargs)

    def async_producer(self, **kwargs: Any) -> Any:
        """An asyncio ``EventHubProducerClient`` (the management client's transport)."""
        from azure.eventhub.aio import EventHubProducerClient

        return self._client(EventHubProducerClient, True, kwargs)

    def _client(self, cls: Any, is_async: bool, kwargs: dict[str, Any]) -> Any:
        kwargs = self._network_kwargs(is_async, kwargs)
        if self.connection_string is not None:
            return cls.from_connection_string(self.connection_string.reveal(), eventhub_name=self.hub, **kwargs)
        if self.sas_token is not None:
            from azure.core.credentials import AzureSasCredential

            credential: Any = AzureSasCredential(self.sas_token.reveal())
        else:
            entra = self.entra or EntraSettings()
            credential = entra.async_credential(self.network) if is_async else entra.credential(self.network)
        if self.emulator:
            kwargs.setdefault("use_tls", False)
        return cls(fully_qualified_namespace=self.namespace, eventhub_name=self.hub, credential=credential, **kwargs)

    def _network_kwargs(self, is_async: bool, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {**self.network.sdk_kwargs(is_async), **kwargs}


def host_and_port(address: str, allow_path: bool = True) -> str | None:
    """``host[:port]`` of ``sb://host[:port]/...`` or a bare ``host[:port]``, as the SDKs derive a
    namespace; None when it is no valid address (or, without ``allow_path``, names a path too)."""
    try:
        parsed = urlparse(address if "://" in address else "sb://" + address)
        port = parsed.port  # raises for a port that is not a number in range
    except ValueError:
        return None
    if not parsed.hostname or (not allow_path and parsed.path.strip("/")):
        return None
    return parsed.hostname + (f":{port}" if port else "")


def connection_string_parts(secret: str | Secret, option: str = "eventhubs.connectionString") -> dict[str, str]:
    """A connection string's Key=Value parts, keys lower-cased; an error names ``option`` and never echoes it."""
    text = secret.reveal() if isinstance(secret, Secret) else secret
    parts: dict[str, str] = {}
    for piece in text.strip().split(";"):
        if not piece.strip():
            continue
        key, sep, value = piece.partition("=")
        if not sep:
            raise OptionError(
                f"{option}: every part must be Key=Value (the string is not shown). Example: {CONNECTION_EXAMPLE}",
                CONNECTION_EXAMPLE,
            )
        parts[key.strip().lower()] = value.strip()
    return parts


def parse_connection_string(
    secret: str | Secret,
    option: str = "eventhubs.connectionString",
    hub: str | None = None,
    hub_option: str = "eventhubs.name",
) -> ConnectionSettings:
    """Validate a connection string (wrapped as a :class:`Secret`, as the options keep it; or plain text);
    errors name the missing part and never echo the string.

    ``hub`` (``eventhubs.name``) names the event hub of a namespace-level string (no EntityPath), the
    kind the portal shows first; ``hub_option`` is what a message calls that option (the CLI's ``--hub``).
    """
    text = secret.reveal() if isinstance(secret, Secret) else secret
    parts = connection_string_parts(text, option)
    endpoint = parts.get("endpoint")
    if not endpoint:
        raise OptionError(f"{option}: Endpoint=sb://... is missing. Example: {CONNECTION_EXAMPLE}", CONNECTION_EXAMPLE)
    namespace = host_and_port(endpoint)
    if namespace is None:
        raise OptionError(f"{option}: Endpoint has no valid host. Example: {CONNECTION_EXAMPLE}", CONNECTION_EXAMPLE)
    entity = parts.get("entitypath", "")
    if not entity and not hub:
        raise OptionError(
            f"{option}: EntityPath=<event hub name> is missing; add it, or name the hub with {hub_option}. "
            f"Example: {CONNECTION_EXAMPLE}",
            CONNECTION_EXAMPLE,
        )
    if entity and hub and entity != hub:
        raise OptionError(
            f"eventhubs.name ({hub!r}) differs from the EntityPath of {option} ({entity!r}): drop one, e.g. "
            f".option('eventhubs.name', {entity!r})",
            f".option('eventhubs.name', {entity!r})",
        )
    has_key = "sharedaccesskeyname" in parts and "sharedaccesskey" in parts
    if not has_key and "sharedaccesssignature" not in parts:
        raise OptionError(
            f"{option}: needs SharedAccessKeyName and SharedAccessKey, or SharedAccessSignature. "
            f"Example: {CONNECTION_EXAMPLE}",
            CONNECTION_EXAMPLE,
        )
    return ConnectionSettings(
        namespace=namespace,
        hub=entity or str(hub),
        connection_string=Secret(text.strip()),
        emulator=parts.get("usedevelopmentemulator", "").lower() == "true",
    )
