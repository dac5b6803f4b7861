"""Microsoft Entra ID identities as plain data, with the
credentials each process builds from them (one per identity and process)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError
from .network import NetworkSettings
from .secret import Secret


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
