"""Which sign-in the options describe, checked together into the typed connection settings.

The connection and ``eventhubs.auth`` options become the
:class:`~eventhubs_spark.auth.settings.ConnectionSettings` everything below the options receives; every secret
stays wrapped.

Every combination that would leave an option unused, or a method without what it needs, is an error
naming the options: a credential mix-up found on the driver costs nothing; found by a failing executor
sign-in it costs a stack trace per task.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from eventhubs_spark.auth.credentials import EntraSettings
from eventhubs_spark.auth.secret import Secret
from eventhubs_spark.auth.settings import ENTRA_METHODS, ConnectionSettings, parse_connection_string
from eventhubs_spark.errors import OptionError

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


def resolve_sign_in(values: Mapping[str, Any], entra_keys: Sequence[str]) -> ConnectionSettings:
    """Where the hub is and how to sign in, from the connection and ``eventhubs.auth`` options
    (``values``: parsed options by lower-cased key, secrets wrapped; ``entra_keys``: the
    ``eventhubs.entra.*`` options that name an identity).

    Every combination that would leave an option unused, or a method without what it needs, is an
    error naming the options: a credential mix-up found on the driver costs nothing; found by a
    failing executor sign-in it costs a stack trace per task.
    """
    connection: Secret | None = values.get("eventhubs.connectionstring")
    namespace, name = values.get("eventhubs.namespace"), values.get("eventhubs.name")
    sas = values.get("eventhubs.sastoken")
    entra_set = [k for k in entra_keys if values.get(k.lower())]
    method = values.get("eventhubs.auth")
    service_credential = values.get("databricks.servicecredential")
    if service_credential:
        _service_credential_alone(values, method, connection, sas, entra_set)
        method = "serviceCredential"
    elif values.get("databricks.servicecredential.scope"):
        example = ".option('databricks.serviceCredential', 'eventhubs-reader')"
        raise OptionError(f"databricks.serviceCredential.scope goes with databricks.serviceCredential, e.g. {example}",
                          example)  # fmt: skip
    elif method == "serviceCredential":
        example = ".option('databricks.serviceCredential', 'eventhubs-reader')"
        raise OptionError(f"eventhubs.auth=serviceCredential needs databricks.serviceCredential (the Unity Catalog "
                          f"service credential's name), e.g. {example}", example)  # fmt: skip
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
    # the Schema Registry takes Microsoft Entra ID only, whatever signs in to the hub
    registry_uses_entra = bool(
        values.get("eventhubs.avro.schemaregistry") or values.get("eventhubs.json.schemaregistry")
    )
    entra = None
    if method in ENTRA_METHODS or store_uses_entra or registry_uses_entra:
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


def _service_credential_alone(values: Mapping[str, Any], method: Any, connection: Any, sas: Any,
                              entra_set: Sequence[str]) -> None:  # fmt: skip
    """databricks.serviceCredential is the whole sign-in: no other identity beside it, none to fall back to; and
    this process must be a Databricks runtime that has service credentials (said at ``.load()``)."""
    from eventhubs_spark.auth.credentials import check_service_credential_runtime

    example = (".option('eventhubs.namespace', 'NAMESPACE.servicebus.windows.net').option('eventhubs.name', 'HUB')"
               ".option('databricks.serviceCredential', 'eventhubs-reader')")  # fmt: skip
    others = [k for k, v in (("eventhubs.connectionString", connection), ("eventhubs.sasToken", sas)) if v]
    others += list(entra_set)
    if method not in (None, "serviceCredential"):
        others.append(f"eventhubs.auth={method}")
    if others:
        raise OptionError(f"databricks.serviceCredential signs in on its own: drop {', '.join(others)}, e.g. "
                          f"{example}", example)  # fmt: skip
    check_service_credential_runtime()


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
    if method == "serviceCredential":
        return EntraSettings(method=method, service_credential=values.get("databricks.servicecredential"),
                             scope=values.get("databricks.servicecredential.scope"))  # fmt: skip
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
