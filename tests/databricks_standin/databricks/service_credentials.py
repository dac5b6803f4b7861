"""A stand-in for ``databricks.service_credentials`` (Databricks Runtime 16.2+), as Databricks documents it for UDFs:
``getServiceCredentialsProvider(name)`` gives an Azure ``TokenCredential`` for a Unity Catalog service credential.

Here each name maps to a service principal of the tests' local Entra ID, in ``EVENTHUBS_TEST_SERVICE_CREDENTIALS``
(JSON: name -> tenant, client, secret, authority), which the test sets for the Spark processes it starts: what an
admin's grant stands for. A name not there fails as Databricks fails an unknown or ungranted credential.
"""

from __future__ import annotations

import json
import os
from typing import Any


def getServiceCredentialsProvider(name: str) -> Any:  # Databricks' own name
    known = json.loads(os.environ.get("EVENTHUBS_TEST_SERVICE_CREDENTIALS", "{}"))
    spec = known.get(name)
    if spec is None:
        raise PermissionError(f"service credential {name!r} does not exist, or you do not have ACCESS on it")
    from azure.identity import ClientSecretCredential

    return ClientSecretCredential(spec["tenant"], spec["client"], spec["secret"], authority=spec["authority"],
                                  disable_instance_discovery=True)  # fmt: skip
