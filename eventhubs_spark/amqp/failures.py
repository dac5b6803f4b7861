"""What a failure to sign in or to get through means, for one hub: one clear error naming the options.

The service refuses a sign-in when the client hands it a token (put-token, with status 401 or 404) or a link
(``amqp:unauthorized-access``, ``amqp:not-found``); azure-identity refuses to issue a token (a wrong secret, an
unknown client, no identity on the node); the network refuses a connection (see
:mod:`eventhubs_spark.auth.network`). The SDK wraps each in errors of its own, sometimes several deep, and calls
some failures to connect failed sign-ins. :func:`failure` walks an error's chain and says which it is, by AMQP
condition and status (:func:`~eventhubs_spark.amqp.conditions.condition`), never by the text: the first in the
chain decides, so an attempt that failed to connect and a later one refused at sign-in are told apart.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Callable, Iterator

from eventhubs_spark.amqp import conditions, sdk
from eventhubs_spark.amqp.network_errors import causes, classify, network_failure
from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.errors import (
    AuthenticationFailedError,
    ConsumerGroupNotFoundError,
    HubNotFoundError,
    NetworkError,
    retriable,
)

Failure = AuthenticationFailedError | HubNotFoundError | NetworkError


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
    "serviceCredential": "Check databricks.serviceCredential (the Unity Catalog service credential's name), that "
    f"you have ACCESS on it, that its managed identity has {_ROLES}, and databricks.serviceCredential.scope.",
    "defaultAzureCredential": "DefaultAzureCredential tries environment variables, workload identity, managed "
    "identity and the Azure CLI, in each Spark process; name one with eventhubs.auth "
    f"(e.g. servicePrincipal) for a precise error, and check {_ROLES}.",
}


# A namespace this process has never reached whose port refuses (or whose host has no address) is most likely a
# wrong host or port: its first connection is given up after this long, with the error that names what was tried,
# not after eventhubs.operationTimeout (5 minutes by default). Once reached, the same refusal is retried to the end.
FIRST_CONNECT_GRACE = 10.0
_REACHED: set[str] = set()  # namespaces this process has connected to
# A query's driver (the processes that plan it, where a user's mistake first meets the namespace) gives a wrong
# address no grace at all: its first contact is the query's, and a refusal there is said at once
# (first_contact_fails_fast). An executor keeps the grace: the driver reached the namespace before any task ran,
# so a refusal there is more likely a blip of that node's network.
_grace = FIRST_CONNECT_GRACE


def first_contact_fails_fast() -> None:
    """This process plans queries (a driver's): a namespace it never reached that refuses its port, or whose host
    has no address, fails the first call at once instead of after :data:`FIRST_CONNECT_GRACE` seconds of retries."""
    global _grace
    _grace = 0.0


def reached(settings: ConnectionSettings) -> None:
    """This process has connected to the namespace: refusals from now on are retried as any transient failure."""
    _REACHED.add(settings.namespace)


def give_up_early(
    settings: ConnectionSettings, clock: Callable[[], float] = time.monotonic
) -> Callable[[BaseException], bool]:
    """A retry loop's ``is_retriable`` for calls that may be the process's first to the namespace: as
    :func:`~eventhubs_spark.errors.retriable`, but a wrong address (a refused port, a host with no address) of a
    namespace never reached stops being retried :data:`FIRST_CONNECT_GRACE` seconds after the first one (at once in a
    driver's process: :func:`first_contact_fails_fast`)."""
    first: list[float] = []

    def is_retriable(exc: BaseException) -> bool:
        if not retriable(exc):
            return False
        if isinstance(exc, NetworkError) and exc.wrong_address and settings.namespace not in _REACHED:
            first.append(clock())
            return _grace > 0 and first[-1] - first[0] < _grace
        return True

    return is_retriable


@contextlib.contextmanager
def sign_in_errors(settings: ConnectionSettings) -> Iterator[None]:
    """Turn a failed sign-in or a failure to connect raised inside the block (however deeply chained) into
    its clear error (:func:`failure`), without the SDK's chain, which adds nothing the message lacks.
    Everything else passes through as it is."""
    try:
        yield
    except Exception as exc:
        found = failure(settings, exc)
        if found is None or found is exc:
            raise
        raise found from None


def failure(settings: ConnectionSettings, exc: BaseException) -> Failure | None:
    """:class:`AuthenticationFailedError` when ``exc`` (or what it came from) is a refused sign-in,
    :class:`HubNotFoundError` when the hub does not exist, :class:`NetworkError` when the namespace could
    not be reached; None for anything else."""
    for seen in causes(exc):
        if isinstance(seen, AuthenticationFailedError | HubNotFoundError | NetworkError):
            return seen
        network = classify(seen, settings.namespace, settings.network, settings.emulator)
        if network is not None:
            return network
        meaning = conditions.condition(seen)
        if meaning == conditions.NOT_FOUND:  # what the service said may sit deeper in the chain than ``seen``
            return not_found(settings, " ".join(dict.fromkeys(str(c) for c in causes(seen) if str(c))))
        # azure-core's ClientAuthenticationError: azure-identity's refusal to issue a token (not an AMQP error)
        if meaning == conditions.UNAUTHORIZED or _is_client_authentication_error(seen):
            return auth_error(settings, str(seen))
        if meaning is None and isinstance(seen, sdk.sign_in_wrappers()):
            # The SDK reports some failures to connect as failed sign-ins (a host name that does not resolve
            # over WebSockets, a custom endpoint that refuses): what it wraps decides.
            inner = getattr(seen, "error", None) or getattr(seen, "inner_error", None) or seen.__cause__
            wrapped = (
                network_failure(inner, settings.namespace, settings.network, settings.emulator)
                if inner is not None
                else None
            )
            return wrapped or auth_error(settings, str(seen))
    return None


def _is_client_authentication_error(exc: BaseException) -> bool:
    """azure-core's ``ClientAuthenticationError``, looked up only where azure-core is loaded (it is wherever one
    was raised): importing it here would cost every fresh Python worker a tenth of a second (azure-core pulls in
    asyncio, email and http.client), and a service-mode task worker loads nothing else of the Azure SDK."""
    module = sys.modules.get("azure.core.exceptions")
    error = getattr(module, "ClientAuthenticationError", None)
    return error is not None and isinstance(exc, error)


def auth_error(settings: ConnectionSettings, cause: str) -> AuthenticationFailedError:
    """The sign-in error for this hub: what was refused, and which options to check."""
    text = " ".join(cause.split())[:400].rstrip(". ")
    return AuthenticationFailedError(
        f"could not sign in to {settings.namespace} (hub {settings.hub!r}) with eventhubs.auth="
        f"{settings.auth_method}: {text}. {_AUTH_HINTS[settings.auth_method]}"
    )


# The service names what it could not find: "The messaging entity 'sb://<ns>/<hub>/consumergroups/<group>' could
# not be found." for a consumer group the hub lacks (the hub itself exists then: a missing hub fails at its token).
_MISSING_GROUP = re.compile(r"/consumergroups/([^'/\s]+)'?\s+could not be found", re.IGNORECASE)


def not_found(settings: ConnectionSettings, cause: str) -> HubNotFoundError:
    """The error for a hub the namespace does not have (the service refuses its sign-in with 404), or for a
    consumer group the hub does not have (its receiving link refused as not found)."""
    said = " ".join(cause.split())[:300]
    group = _MISSING_GROUP.search(cause)
    if group is not None:
        name = group.group(1)
        return ConsumerGroupNotFoundError(
            f"consumer group {name!r} was not found in event hub {settings.hub!r} of namespace {settings.namespace}: "
            f"check eventhubs.consumerGroup (default $Default), or create the group: in the Azure portal under the "
            f"event hub's Consumer groups, or `az eventhubs eventhub consumer-group create --resource-group "
            f"<resource-group> --namespace-name <namespace> --eventhub-name {settings.hub} --name {name}` (the Basic "
            f"tier has only $Default). The service said: {said}"
        )
    where = (
        "eventhubs.name, or EntityPath in eventhubs.connectionString"
        if settings.connection_string is not None
        else "eventhubs.name"
    )
    return HubNotFoundError(
        f"event hub {settings.hub!r} was not found in namespace {settings.namespace}: check the hub's name in "
        f"{where} (names are listed in the Azure portal under the namespace's Event Hubs). The service said: "
        f"{said}"
    )
