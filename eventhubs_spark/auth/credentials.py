"""Microsoft Entra ID identities as plain data, and the credentials each process builds from them.

One credential per identity and process."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from eventhubs_spark.auth.network import NetworkSettings
from eventhubs_spark.auth.secret import Secret
from eventhubs_spark.errors import OptionError


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
    service_credential: Secret | None = None  # databricks.serviceCredential: a Unity Catalog service credential's name
    scope: str | None = None  # databricks.serviceCredential.scope: what Event Hubs tokens are asked for

    def credential(self, network: NetworkSettings | None = None) -> Any:
        """The azure-identity credential for this identity, shared by every client of this process
        (one token cache, one sign-in per token lifetime, however many receivers).

        ``network``: the hub's proxy and CA bundle (``eventhubs.httpProxy.*``, ``eventhubs.connectionVerify``),
        which the sign-in of a service principal or workload identity goes through too: where traffic must
        take a proxy, so must the token request to Entra (and a TLS-inspecting proxy re-signs Entra's
        certificate as well). A managed identity's endpoint is local to the machine (IMDS, 169.254.169.254,
        or App Service's), never behind a proxy, and DefaultAzureCredential may end up there: both keep to the
        process's environment (HTTPS_PROXY, REQUESTS_CA_BUNDLE) as azure-identity does."""
        key = (self, network if self.method in _OVER_THE_NETWORK else None)
        with _CREDENTIALS_LOCK:
            credential = _CREDENTIALS.get(key)
            if credential is None:
                credential = _CREDENTIALS[key] = self._build(key[1])
            return credential

    def _build(self, network: NetworkSettings | None) -> Any:
        if self.method == "serviceCredential":
            assert self.service_credential is not None  # the options require it
            return _Scoped(service_credential_provider(self.service_credential.reveal()), self.scope)
        try:
            import azure.identity as identity
        except ImportError:
            raise OptionError(
                f"eventhubs.auth={self.method} signs in with Microsoft Entra ID, which needs azure-identity: "
                "pip install 'eventhubs-spark[aad]' (on Databricks: %pip install 'eventhubs-spark[aad]')",
                "pip install 'eventhubs-spark[aad]'",
            ) from None
        common: dict[str, Any] = {}
        if self.authority_host:
            common["authority"] = self.authority_host
        if self.disable_instance_discovery:
            common["disable_instance_discovery"] = True
        if network is not None:
            common.update(network.http_kwargs())  # the proxy and CA bundle, as the checkpoint store gets them
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

    def async_credential(self, network: NetworkSettings | None = None) -> Any:
        """The same credential for the SDK's asyncio clients: their ``await credential.get_token()``
        runs the synchronous credential on a thread (no aiohttp needed, one token cache)."""
        return _AsyncCredential(self.credential(network))


DATABRICKS_RUNTIME = "Databricks Runtime 16.2 or later (15.4 LTS in preview)"
EVENTHUBS_SCOPE = "https://eventhubs.azure.net/.default"


def service_credential_provider(name: str) -> Any:
    """The Azure ``TokenCredential`` of the Unity Catalog service credential ``name``, through the entry point this
    process has: ``databricks.service_credentials`` (inside UDFs, where a data source's tasks run, and on the driver)
    or, failing that, a notebook's ``dbutils.credentials``. An :class:`OptionError` saying what is missing when
    neither is here: nothing falls back to another identity."""
    try:
        from databricks import service_credentials
    except ImportError:
        service_credentials = None
    entry = getattr(service_credentials, "getServiceCredentialsProvider", None)
    if entry is None:
        dbutils = _dbutils()
        entry = getattr(getattr(dbutils, "credentials", None), "getServiceCredentialsProvider", None)
    if entry is not None:
        if not name:
            return None  # only looking (check_service_credential_runtime)
        try:
            return entry(name)
        except Exception as exc:  # the runtime refused it: a name that does not exist, or no ACCESS on it
            from eventhubs_spark.errors import AuthenticationFailedError

            raise AuthenticationFailedError(
                f"could not sign in with eventhubs.auth=serviceCredential: Databricks refused the service credential "
                f"named in databricks.serviceCredential ({type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:300].replace(name, '<databricks.serviceCredential>')}). Check its "
                "name, that you have ACCESS on it (GRANT ACCESS ON SERVICE CREDENTIAL ...), and that its managed "
                "identity has the Azure Event Hubs Data Receiver (reads) or Data Sender (writes) role"
            ) from None
    example = ".option('eventhubs.connectionString', dbutils.secrets.get('scope', 'eventhubs'))"
    raise OptionError(
        "databricks.serviceCredential signs in with a Unity Catalog service credential, which needs "
        f"{DATABRICKS_RUNTIME}: it gives Python code databricks.service_credentials (in UDFs, where this source's "
        "tasks run) and dbutils.credentials (in notebooks). Neither is in this process, so this is not such a "
        f"runtime. Elsewhere sign in another way, e.g. {example}, or eventhubs.auth with eventhubs.entra.*",
        example,
    )


def check_service_credential_runtime() -> None:
    """At ``.load()``: this process has an entry point for service credentials (else the :class:`OptionError` of
    :func:`service_credential_provider`); the credential itself is asked for where it is used."""
    service_credential_provider("")  # with no name it only finds the entry point, or raises saying what is missing


def _dbutils() -> Any:
    """A notebook's ``dbutils``, where this process has one (the notebook's globals, or builtins)."""
    import builtins
    import sys

    main = sys.modules.get("__main__")
    found = getattr(main, "dbutils", None) or getattr(builtins, "dbutils", None)
    if found is None:
        try:
            from IPython import get_ipython

            shell = get_ipython()
            found = shell.user_ns.get("dbutils") if shell is not None else None
        except ImportError:
            found = None
    return found


class _Scoped:
    """A service credential asked for Event Hubs tokens with the scope ``databricks.serviceCredential.scope`` names
    (the Schema Registry's tokens are Event Hubs tokens too); other scopes (Storage) pass as asked. Tokens are the
    provider's: it renews them before they expire, as every Azure credential does when asked."""

    def __init__(self, credential: Any, scope: str | None) -> None:
        self._credential = credential
        self._scope = scope

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        wanted = tuple(self._scope if self._scope and s == EVENTHUBS_SCOPE else s for s in scopes)
        return self._credential.get_token(*wanted, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._credential, name)


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


# The methods whose sign-in is an HTTPS call to Entra from this process (its proxy and CA bundle apply)
_OVER_THE_NETWORK = frozenset({"servicePrincipal", "workloadIdentity"})
_CREDENTIALS: dict[tuple[EntraSettings, NetworkSettings | None], Any] = {}
_CREDENTIALS_LOCK = threading.Lock()
