"""Connection settings parsed from a connection string, with the secret kept out of every repr.

These travel to executors inside input partitions (plain, picklable data): each process builds its
own clients from them, never a pickled client or credential.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from ..errors import AuthenticationFailedError, HubNotFoundError, OptionError

CONNECTION_EXAMPLE = (
    "Endpoint=sb://NAMESPACE.servicebus.windows.net/;SharedAccessKeyName=NAME;SharedAccessKey=KEY;EntityPath=HUB"
)


class Secret:
    """A string that never shows itself in repr, str, logs or Spark plans."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:
        return (Secret, (self._value,))


#: How a client signs in to Event Hubs, the values of ``eventhubs.auth``.
ENTRA_METHODS = ("servicePrincipal", "managedIdentity", "workloadIdentity", "defaultAzureCredential")
AUTH_METHODS = ("connectionString", "sasToken", *ENTRA_METHODS)


@dataclass(frozen=True)
class EntraSettings:
    """A Microsoft Entra ID identity as plain data: the credential is built from it in each process.

    Azure-identity credentials hold HTTP sessions, locks and token caches: they cannot be pickled, and
    one built on the driver would be useless on an executor. These settings travel instead, and
    :meth:`credential` builds (once per process) the credential ``method`` names.
    """

    method: str = "defaultAzureCredential"
    tenant_id: str | None = None
    client_id: str | None = None
    client_secret: Secret | None = None
    certificate_path: str | None = None
    certificate: Secret | None = None  # PEM text, e.g. from a secret scope
    certificate_password: Secret | None = None
    federated_token_file: str | None = None
    authority_host: str | None = None
    disable_instance_discovery: bool = False

    def credential(self) -> Any:
        """The azure-identity credential for this identity, shared by every client of this process
        (one token cache, one sign-in per token lifetime, however many receivers)."""
        with _CREDENTIALS_LOCK:
            credential = _CREDENTIALS.get(self)
            if credential is None:
                credential = _CREDENTIALS[self] = self._build()
            return credential

    def _build(self) -> Any:
        try:
            import azure.identity as identity
        except ImportError:
            raise OptionError(
                f"eventhubs.auth={self.method} signs in with Microsoft Entra ID, which needs azure-identity: "
                "pip install 'eventhubs-spark[aad]' (on Databricks: %pip install 'eventhubs-spark[aad]')"
            ) from None
        common: dict[str, Any] = {}
        if self.authority_host:
            common["authority"] = self.authority_host
        if self.disable_instance_discovery:
            common["disable_instance_discovery"] = True
        if self.method == "servicePrincipal":
            tenant, client = str(self.tenant_id), str(self.client_id)  # both checked by the options
            if self.client_secret is not None:
                return identity.ClientSecretCredential(tenant, client, self.client_secret.reveal(), **common)
            password = self.certificate_password.reveal().encode() if self.certificate_password else None
            if self.certificate is not None:
                return identity.CertificateCredential(
                    tenant, client, certificate_data=self.certificate.reveal().encode(),
                    password=password, **common,
                )  # fmt: skip
            return identity.CertificateCredential(tenant, client, self.certificate_path, password=password, **common)
        if self.method == "managedIdentity":
            return identity.ManagedIdentityCredential(client_id=self.client_id)
        if self.method == "workloadIdentity":
            return identity.WorkloadIdentityCredential(
                tenant_id=self.tenant_id, client_id=self.client_id, token_file_path=self.federated_token_file,
                **common,
            )  # fmt: skip
        extra: dict[str, Any] = {}
        if self.client_id:
            extra["managed_identity_client_id"] = self.client_id
            extra["workload_identity_client_id"] = self.client_id
        if self.tenant_id:
            extra["workload_identity_tenant_id"] = self.tenant_id
        return identity.DefaultAzureCredential(**common, **extra)

    def async_credential(self) -> Any:
        """The same credential for the SDK's asyncio clients: their ``await credential.get_token()``
        runs the synchronous credential on a thread (no aiohttp needed, one token cache)."""
        return _AsyncCredential(self.credential())


class _AsyncCredential:
    """Adapts a synchronous token credential to the asyncio clients' protocol."""

    def __init__(self, credential: Any) -> None:
        self._credential = credential

    async def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: self._credential.get_token(*scopes, **kwargs)
        )

    async def close(self) -> None:
        """The shared synchronous credential outlives any one client."""

    async def __aenter__(self) -> _AsyncCredential:
        return self

    async def __aexit__(self, *args: Any) -> None:
        return None


_AUTH_FAILURES = frozenset(
    {
        "AuthenticationError",  # azure.eventhub: the service refused the token
        "TokenAuthFailure",  # pyamqp: $cbs put-token answered 401
        "AuthenticationException",
        "ClientAuthenticationError",  # azure-identity: no token (wrong secret, unknown client, no identity)
        "CredentialUnavailableError",
    }
)
_NOT_FOUND = "could not be found"  # the service's words for a missing entity (put-token and management: 404)
_ROLES = "the 'Azure Event Hubs Data Receiver' role to read, 'Data Sender' to write"
_AUTH_HINTS = {
    "connectionString": "Check SharedAccessKeyName and SharedAccessKey in eventhubs.connectionString, and that the "
    "policy has Listen (read) or Send (write) rights on the hub.",
    "sasToken": "Check eventhubs.sasToken: sr must cover the namespace or hub, se must be in the future, and "
    "the policy (skn) needs Listen or Send rights.",
    "servicePrincipal": "Check eventhubs.entra.tenantId, eventhubs.entra.clientId and the secret or certificate, "
    f"and that the principal has {_ROLES} on the hub.",
    "managedIdentity": "Check that the cluster runs with a managed identity (eventhubs.entra.clientId names a "
    f"user-assigned one) and that it has {_ROLES}.",
    "workloadIdentity": "Check eventhubs.entra.tenantId, eventhubs.entra.clientId and "
    f"eventhubs.entra.federatedTokenFile (or AZURE_* variables on every node), and {_ROLES}.",
    "defaultAzureCredential": "DefaultAzureCredential tries environment variables, workload identity, managed "
    "identity and the Azure CLI, in each Spark process; name one with eventhubs.auth "
    f"(e.g. servicePrincipal) for a precise error, and check {_ROLES}.",
}

_CREDENTIALS: dict[EntraSettings, Any] = {}
_CREDENTIALS_LOCK = threading.Lock()


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
        """Identifies the credentials without holding them (a hash), for pool keys."""
        return (self.namespace, self.hub, hash((self.connection_string, self.sas_token, self.entra)))

    @contextlib.contextmanager
    def sign_in_errors(self) -> Iterator[None]:
        """Turn a failed sign-in raised inside the block (the SDK's or azure-identity's, however deeply
        chained) into :class:`AuthenticationFailedError` or :class:`HubNotFoundError`, without the SDK's
        chain, which adds nothing the message lacks. Everything else passes through as it is."""
        try:
            yield
        except Exception as exc:
            failure = self.auth_failure(exc)
            if failure is None or failure is exc:
                raise
            raise failure from None

    def auth_failure(self, exc: BaseException) -> AuthenticationFailedError | HubNotFoundError | None:
        """A clear :class:`AuthenticationFailedError` when ``exc`` (or its cause) is a failed sign-in, or
        :class:`HubNotFoundError` when the service refused the sign-in because the hub does not exist."""
        seen: BaseException | None = exc
        while seen is not None:
            if isinstance(seen, AuthenticationFailedError | HubNotFoundError):
                return seen
            if type(seen).__name__ in _AUTH_FAILURES:
                return self.auth_error(str(seen))
            seen = seen.__cause__ or seen.__context__
        return None

    def auth_error(self, cause: str) -> AuthenticationFailedError | HubNotFoundError:
        """The sign-in error for this hub: what was refused, and which options to check."""
        text = " ".join(cause.split())[:400].rstrip(". ")
        if _NOT_FOUND in text:
            return self.not_found(text)
        return AuthenticationFailedError(
            f"could not sign in to {self.namespace} (hub {self.hub!r}) with eventhubs.auth={self.auth_method}: "
            f"{text}. {_AUTH_HINTS[self.auth_method]}"
        )

    def not_found(self, cause: str) -> HubNotFoundError:
        """The error for a hub the namespace does not have (the service refuses its sign-in with 404)."""
        where = (
            "eventhubs.name, or EntityPath in eventhubs.connectionString"
            if self.connection_string is not None
            else "eventhubs.name"
        )
        return HubNotFoundError(
            f"event hub {self.hub!r} was not found in namespace {self.namespace}: check the hub's name in {where} "
            f"(names are listed in the Azure portal under the namespace's Event Hubs). The service said: "
            f"{' '.join(cause.split())[:300]}"
        )

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
                f"{option}: every part must be Key=Value (the string is not shown). Example: {CONNECTION_EXAMPLE}"
            )
        parts[key.strip().lower()] = value.strip()
    endpoint = parts.get("endpoint")
    if not endpoint:
        raise OptionError(f"{option}: Endpoint=sb://... is missing. Example: {CONNECTION_EXAMPLE}")
    namespace = host_and_port(endpoint)
    if namespace is None:
        raise OptionError(f"{option}: Endpoint has no valid host. Example: {CONNECTION_EXAMPLE}")
    entity = parts.get("entitypath", "")
    if not entity and not hub:
        raise OptionError(
            f"{option}: EntityPath=<event hub name> is missing; add it, or name the hub with eventhubs.name. "
            f"Example: {CONNECTION_EXAMPLE}"
        )
    if entity and hub and entity != hub:
        raise OptionError(
            f"eventhubs.name ({hub!r}) differs from the EntityPath of {option} ({entity!r}): drop one, e.g. "
            f".option('eventhubs.name', {entity!r})"
        )
    has_key = "sharedaccesskeyname" in parts and "sharedaccesskey" in parts
    if not has_key and "sharedaccesssignature" not in parts:
        raise OptionError(
            f"{option}: needs SharedAccessKeyName and SharedAccessKey, or SharedAccessSignature. "
            f"Example: {CONNECTION_EXAMPLE}"
        )
    return ConnectionSettings(
        namespace=namespace,
        hub=entity or str(hub),
        connection_string=Secret(text.strip()),
        emulator=parts.get("usedevelopmentemulator", "").lower() == "true",
    )
