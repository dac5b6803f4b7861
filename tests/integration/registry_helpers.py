"""The emulator's Schema Registry behind a local Microsoft Entra ID, as the Avro and JSON Schema tests (and bench
``json_registry``) use it: the registry takes Entra ID only, over HTTPS with the local authority's certificate."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from eventhubs_emulator import Emulator
from eventhubs_emulator.entra import LocalEntra


@contextlib.contextmanager
def registry_emulator(
    client_id: str, secret: str, hubs: Mapping[str, int], schema_groups: Mapping[str, str], **emulator: Any
) -> Iterator[tuple[LocalEntra, Emulator]]:
    """A local Entra ID with the app ``client_id`` (signing in with ``secret``), and an emulator with ``hubs`` whose
    Schema Registry holds ``schema_groups`` (name -> format); this process's official clients trust the registry's
    certificate meanwhile (``REQUESTS_CA_BUNDLE``). ``emulator``: the Emulator's other keyword arguments."""
    entra = LocalEntra().start()
    entra.add_secret_client(client_id, secret)
    before = os.environ.get("REQUESTS_CA_BUNDLE")
    os.environ["REQUESTS_CA_BUNDLE"] = entra.ca_file
    started = Emulator(dict(hubs), token_verifier=entra.verify, schema_registry_port=0,
                       certificate=(entra.cert_file, entra.key_file), schema_groups=dict(schema_groups),
                       **emulator).start()  # fmt: skip
    try:
        yield entra, started
    finally:
        started.stop()
        entra.stop()
        if before is None:
            os.environ.pop("REQUESTS_CA_BUNDLE", None)
        else:
            os.environ["REQUESTS_CA_BUNDLE"] = before


def entra_options(entra: LocalEntra, client_id: str, secret: str) -> dict[str, str]:
    """The connector's options that sign in to the registry as ``client_id`` and trust its certificate."""
    return {
        "eventhubs.entra.tenantId": entra.tenant_id,
        "eventhubs.entra.clientId": client_id,
        "eventhubs.entra.clientSecret": secret,
        "eventhubs.entra.authorityHost": entra.authority,
        "eventhubs.entra.disableInstanceDiscovery": "true",
        "eventhubs.connectionVerify": entra.ca_file,  # the registry's (and the sign-in's) CA
    }


def credential(entra: LocalEntra, client_id: str, secret: str) -> Any:
    """The official clients' credential for ``client_id``."""
    from azure.identity import ClientSecretCredential

    return ClientSecretCredential(entra.tenant_id, client_id, secret, authority=entra.authority,
                                  disable_instance_discovery=True)  # fmt: skip
