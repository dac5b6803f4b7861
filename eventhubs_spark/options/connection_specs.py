"""The options that say where a hub is, how to sign in and how to reach it: the first rows of the option table."""

from __future__ import annotations

from eventhubs_spark.options.parsers import (
    parse_auth_method,
    parse_authority,
    parse_bool,
    parse_ca_file,
    parse_endpoint,
    parse_host,
    parse_namespace,
    parse_port,
    parse_sas_token,
    parse_text,
    parse_transport,
)
from eventhubs_spark.options.spec import Spec

CONNECTION_SPECS: tuple[Spec, ...] = (
    Spec(
        "eventhubs.connectionString",
        None,
        parse_text,
        "Event Hubs connection string (shared access key or SharedAccessSignature). Without EntityPath, name the "
        "hub with eventhubs.name. Either this or eventhubs.namespace is required.",
        "Endpoint=sb://NAMESPACE.servicebus.windows.net/;SharedAccessKeyName=NAME;SharedAccessKey=KEY;EntityPath=HUB",
        secret=True,
    ),
    Spec(
        "eventhubs.namespace",
        None,
        parse_namespace,
        "Instead of a connection string: the fully qualified namespace, signed in with eventhubs.sasToken or "
        "Microsoft Entra ID (eventhubs.auth).",
        "NAMESPACE.servicebus.windows.net",
    ),
    Spec(
        "eventhubs.name",
        None,
        parse_text,
        "The event hub (with eventhubs.namespace, or a namespace-level connection string).",
        "telemetry",
    ),
    Spec(
        "eventhubs.auth",
        None,
        parse_auth_method,
        "How to sign in: connectionString, sasToken, servicePrincipal (secret or certificate), managedIdentity, "
        "workloadIdentity or defaultAzureCredential. Default: what the other options imply (a namespace alone "
        "uses defaultAzureCredential).",
        "servicePrincipal",
    ),
    Spec(
        "databricks.serviceCredential",
        None,
        parse_text,
        "Databricks (Runtime 16.2+, 15.4 LTS in preview): sign in with this Unity Catalog service credential, the "
        "name Databricks' Kafka source takes too. No secret in any option: the driver and every executor get tokens "
        "from it (the Schema Registry, and an Entra-signed checkpoint store, too). With eventhubs.namespace and "
        "eventhubs.name; fails at load() off Databricks.",
        "eventhubs-reader",
        secret=True,
    ),
    Spec(
        "databricks.serviceCredential.scope",
        None,
        parse_text,
        "The scope Event Hubs tokens are asked for with databricks.serviceCredential (default: Event Hubs' own, "
        "https://eventhubs.azure.net/.default).",
        "https://eventhubs.azure.net/.default",
    ),
    Spec(
        "eventhubs.sasToken",
        None,
        parse_sas_token,
        "A shared access signature for the namespace or hub, with eventhubs.namespace. It cannot be renewed: "
        "it must outlive the query.",
        "SharedAccessSignature sr=NAMESPACE.servicebus.windows.net%2Fhub&sig=SIG&se=1900000000&skn=listen",
        secret=True,
    ),
    Spec(
        "eventhubs.entra.tenantId",
        None,
        parse_text,
        "Microsoft Entra tenant (directory) ID of the service principal or workload identity.",
        "00000000-0000-0000-0000-000000000000",
    ),
    Spec(
        "eventhubs.entra.clientId",
        None,
        parse_text,
        "Application (client) ID of the service principal or workload "
        "identity, or of a user-assigned managed identity.",
        "00000000-0000-0000-0000-000000000000",
    ),
    Spec(
        "eventhubs.entra.clientSecret",
        None,
        parse_text,
        "Service principal client secret.",
        "CLIENT_SECRET",
        secret=True,
    ),
    Spec(
        "eventhubs.entra.certificatePath",
        None,
        parse_text,
        "Service principal certificate: a PEM or PKCS12 file present on every node (e.g. a Unity Catalog volume path).",
        "/Volumes/main/secrets/certs/sp.pem",
    ),
    Spec(
        "eventhubs.entra.certificate",
        None,
        parse_text,
        "Service principal certificate as PEM text (private key and certificate), e.g. from a secret scope.",
        "-----BEGIN PRIVATE KEY-----...",
        secret=True,
    ),
    Spec(
        "eventhubs.entra.certificatePassword",
        None,
        parse_text,
        "Password of the certificate's private key, if any.",
        "PASSWORD",
        secret=True,
    ),
    Spec(
        "eventhubs.entra.federatedTokenFile",
        None,
        parse_text,
        "Workload identity: the federated token file (default: AZURE_FEDERATED_TOKEN_FILE).",
        "/var/run/secrets/azure/tokens/azure-identity-token",
    ),
    Spec(
        "eventhubs.entra.authorityHost",
        None,
        parse_authority,
        "Microsoft Entra authority for sovereign or private clouds (default: login.microsoftonline.com).",
        "https://login.microsoftonline.us",
    ),
    Spec(
        "eventhubs.entra.disableInstanceDiscovery",
        False,
        parse_bool,
        "Skip Entra instance discovery (private clouds, Azure Stack).",
        "true",
    ),
    Spec(
        "eventhubs.useDevelopmentEmulator",
        False,
        parse_bool,
        "Plain AMQP without TLS to a local emulator, as UseDevelopmentEmulator=true in a connection string.",
        "true",
    ),
    Spec(
        "eventhubs.transportType",
        None,
        parse_transport,
        "amqp: AMQP over TLS on port 5671 (the default). amqpWebSockets: AMQP over WebSockets on port 443, for "
        "networks that allow only HTTPS; implied by eventhubs.httpProxy.hostname.",
        "amqpWebSockets",
    ),
    Spec(
        "eventhubs.httpProxy.hostname",
        None,
        parse_host,
        "HTTP proxy (CONNECT) to reach the namespace through, with eventhubs.httpProxy.port; carries AMQP over "
        "WebSockets only. The checkpoint store and Entra sign-in (service principal, workload identity) go "
        "through it too.",
        "proxy.example.com",
    ),
    Spec("eventhubs.httpProxy.port", None, parse_port, "Port of the HTTP proxy.", "3128"),
    Spec(
        "eventhubs.httpProxy.username",
        None,
        parse_text,
        "User name for a proxy that asks for credentials (basic authentication).",
        "svc-spark",
    ),
    Spec(
        "eventhubs.httpProxy.password",
        None,
        parse_text,
        "Password for the proxy, with eventhubs.httpProxy.username.",
        "PASSWORD",
        secret=True,
    ),
    Spec(
        "eventhubs.customEndpointAddress",
        None,
        parse_endpoint,
        "Connect to this address instead of the namespace's (a private endpoint or an application gateway), "
        "keeping the namespace for sign-in; the port defaults to the transport's (5671 or 443).",
        "sb://eventhubs-gateway.internal.example.com:443",
    ),
    Spec(
        "eventhubs.connectionVerify",
        None,
        parse_ca_file,
        "A CA bundle (PEM file on every node) to trust instead of the default ones, e.g. a TLS-inspecting "
        "proxy's company CA, or the local emulator's certificate; the checkpoint store and Entra sign-in "
        "(service principal, workload identity) trust it too.",
        "/Volumes/main/certs/company-ca.pem",
    ),
)
