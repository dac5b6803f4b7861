"""Connection settings parsed from a connection string, with the secret kept out of every repr.

These travel to executors inside input partitions (plain, picklable data): each process builds its
own clients from them, never a pickled client or credential.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from ..errors import OptionError
from .credentials import EntraSettings, Secret
from .network import NetworkSettings

CONNECTION_EXAMPLE = (
    "Endpoint=sb://NAMESPACE.servicebus.windows.net/;SharedAccessKeyName=NAME;SharedAccessKey=KEY;EntityPath=HUB"
)


#: How a client signs in to Event Hubs, the values of ``eventhubs.auth``.
ENTRA_METHODS = ("servicePrincipal", "managedIdentity", "workloadIdentity", "defaultAzureCredential")
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
            credential = entra.async_credential() if is_async else entra.credential()
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


def parse_connection_string(
    text: str, option: str = "eventhubs.connectionString", hub: str | None = None
) -> ConnectionSettings:
    """Validate a connection string; errors name the missing part and never echo the string.

    ``hub`` (``eventhubs.name``) names the event hub of a namespace-level string (no EntityPath), the
    kind the portal shows first.
    """
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
    endpoint = parts.get("endpoint")
    if not endpoint:
        raise OptionError(f"{option}: Endpoint=sb://... is missing. Example: {CONNECTION_EXAMPLE}", CONNECTION_EXAMPLE)
    namespace = host_and_port(endpoint)
    if namespace is None:
        raise OptionError(f"{option}: Endpoint has no valid host. Example: {CONNECTION_EXAMPLE}", CONNECTION_EXAMPLE)
    entity = parts.get("entitypath", "")
    if not entity and not hub:
        raise OptionError(
            f"{option}: EntityPath=<event hub name> is missing; add it, or name the hub with eventhubs.name. "
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


# -- which sign-in the options describe -------------------------------------------------------------------

_CONN_EXAMPLE = (
    ".option('eventhubs.connectionString', 'Endpoint=sb://NAMESPACE.servicebus.windows.net/;"
    "SharedAccessKeyName=NAME;SharedAccessKey=KEY;EntityPath=HUB'), or .option('eventhubs.namespace', "
    "'NAMESPACE.servicebus.windows.net').option('eventhubs.name', 'HUB').option('eventhubs.auth', 'managedIdentity')"
)
_NAMESPACE_EXAMPLE = (
    ".option('eventhubs.namespace', 'NAMESPACE.servicebus.windows.net').option('eventhubs.name', 'HUB')"
)
_SAS_EXAMPLE = (
    ".option('eventhubs.sasToken', "
    "'SharedAccessSignature sr=NAMESPACE.servicebus.windows.net%2Fhub&sig=SIG&se=1900000000&skn=listen')"
)


def resolve_sign_in(values: Mapping[str, Any], connection: str | None, entra_keys: Sequence[str]) -> ConnectionSettings:
    """Where the hub is and how to sign in, from the connection and ``eventhubs.auth`` options
    (``values``: parsed options by lower-cased key; ``entra_keys``: the ``eventhubs.entra.*`` options
    that name an identity).

    Every combination that would leave an option unused, or a method without what it needs, is an
    error naming the options: a credential mix-up found on the driver costs nothing; found by a
    failing executor sign-in it costs a stack trace per task.
    """
    namespace, name = values.get("eventhubs.namespace"), values.get("eventhubs.name")
    sas = values.get("eventhubs.sastoken")
    entra_set = [k for k in entra_keys if values.get(k.lower())]
    method = values.get("eventhubs.auth")
    if connection and namespace:
        raise OptionError(
            f"set eventhubs.connectionString or eventhubs.namespace, not both, e.g. {_NAMESPACE_EXAMPLE}",
            _NAMESPACE_EXAMPLE,
        )
    if not connection and not namespace:
        raise OptionError(
            f"eventhubs.connectionString (or eventhubs.namespace) is required, e.g. {_CONN_EXAMPLE}", _CONN_EXAMPLE
        )
    if method is None:
        if connection:
            method = "connectionString"
        elif sas:
            method = "sasToken"
        else:
            method = _implied_entra_method(values)
    if (method == "connectionString") != bool(connection):
        raise OptionError(
            "eventhubs.auth=connectionString signs in with eventhubs.connectionString, and a connection string "
            f"carries its own credentials: drop eventhubs.auth or the connection string, e.g. {_CONN_EXAMPLE}",
            _CONN_EXAMPLE,
        )
    if sas and method != "sasToken":
        example = (
            ".option('eventhubs.namespace', 'NAMESPACE.servicebus.windows.net').option('eventhubs.sasToken', "
            "'SharedAccessSignature sr=...&sig=...&se=...&skn=...')"
        )
        raise OptionError(
            "eventhubs.sasToken goes with eventhubs.namespace (and eventhubs.auth=sasToken, or no eventhubs.auth), "
            f"e.g. {example}",
            example,
        )
    if method == "sasToken" and not sas:
        raise OptionError(f"eventhubs.auth=sasToken needs eventhubs.sasToken, e.g. {_SAS_EXAMPLE}", _SAS_EXAMPLE)
    store_uses_entra = bool(
        values.get("eventhubs.checkpointstore.accounturl") and not values.get("eventhubs.checkpointstore.sastoken")
    )
    entra = None
    if method in ENTRA_METHODS or store_uses_entra:
        entra = _entra_settings(values, method if method in ENTRA_METHODS else _implied_entra_method(values))
    elif entra_set:
        example = ".option('eventhubs.auth', 'servicePrincipal')"
        raise OptionError(
            f"{', '.join(entra_set)} would be unused: eventhubs.auth is {method} "
            f"and nothing else signs in with Microsoft Entra ID. Use the identity with e.g. {example}, or drop "
            "the option",
            example,
        )
    if connection:
        settings = parse_connection_string(connection, hub=name)
        return dataclasses.replace(
            settings, entra=entra, emulator=settings.emulator or bool(values.get("eventhubs.usedevelopmentemulator"))
        )
    if not name:
        example = ".option('eventhubs.name', 'telemetry')"
        raise OptionError(f"eventhubs.namespace needs eventhubs.name (the event hub), e.g. {example}", example)
    return ConnectionSettings(
        namespace=str(namespace),
        hub=name,
        sas_token=sas,  # set only with eventhubs.auth=sasToken (checked above)
        entra=entra,
        emulator=bool(values.get("eventhubs.usedevelopmentemulator")),
    )


def _implied_entra_method(values: Mapping[str, Any]) -> str:
    if (
        values.get("eventhubs.entra.clientsecret")
        or values.get("eventhubs.entra.certificatepath")
        or values.get("eventhubs.entra.certificate")
    ):
        return "servicePrincipal"
    if values.get("eventhubs.entra.federatedtokenfile"):
        return "workloadIdentity"
    return "defaultAzureCredential"


def _entra_settings(values: Mapping[str, Any], method: str) -> EntraSettings:
    def get(key: str) -> Any:
        return values.get(f"eventhubs.entra.{key.lower()}")

    def fail(message: str, example: str) -> OptionError:
        return OptionError(f"{message}, e.g. {example}", example)

    secret, path, pem = get("clientSecret"), get("certificatePath"), get("certificate")
    if method == "servicePrincipal":
        missing = [f"eventhubs.entra.{k}" for k in ("tenantId", "clientId") if not get(k)]
        if missing:
            raise fail(
                f"eventhubs.auth=servicePrincipal needs {' and '.join(missing)}",
                ".option('eventhubs.entra.tenantId', 'TENANT_ID').option('eventhubs.entra.clientId', 'CLIENT_ID')",
            )
        if sum(1 for v in (secret, path, pem) if v) != 1:
            raise fail(
                "eventhubs.auth=servicePrincipal needs exactly one of eventhubs.entra.clientSecret, "
                "eventhubs.entra.certificatePath and eventhubs.entra.certificate",
                ".option('eventhubs.entra.clientSecret', dbutils.secrets.get('scope', 'sp-secret'))",
            )
    else:
        extra = [f"eventhubs.entra.{k}" for k, v in (("clientSecret", secret), ("certificatePath", path),
                                                     ("certificate", pem)) if v]  # fmt: skip
        if extra:
            raise fail(
                f"{', '.join(extra)} belong to a service principal, but eventhubs.auth is {method}: set "
                "eventhubs.auth, or drop them",
                ".option('eventhubs.auth', 'servicePrincipal')",
            )
        if method == "managedIdentity" and (get("tenantId") or get("federatedTokenFile")):
            raise fail(
                "eventhubs.auth=managedIdentity takes only eventhubs.entra.clientId (a user-assigned identity); "
                "drop eventhubs.entra.tenantId and eventhubs.entra.federatedTokenFile",
                ".option('eventhubs.entra.clientId', 'CLIENT_ID')",
            )
    if get("certificatePassword") and not (path or pem):
        raise fail(
            "eventhubs.entra.certificatePassword goes with eventhubs.entra.certificatePath or "
            "eventhubs.entra.certificate",
            ".option('eventhubs.entra.certificatePath', '/Volumes/main/certs/sp.pfx')",
        )
    if get("federatedTokenFile") and method not in ("workloadIdentity", "defaultAzureCredential"):
        raise fail(
            "eventhubs.entra.federatedTokenFile belongs to a workload identity: set eventhubs.auth",
            ".option('eventhubs.auth', 'workloadIdentity')",
        )
    return EntraSettings(
        method=method,
        tenant_id=get("tenantId"),
        client_id=get("clientId"),
        client_secret=secret,
        certificate_path=path,
        certificate=pem,
        certificate_password=get("certificatePassword"),
        federated_token_file=get("federatedTokenFile"),
        authority_host=get("authorityHost"),
        disable_instance_discovery=bool(values.get("eventhubs.entra.disableinstancediscovery")),
    )
