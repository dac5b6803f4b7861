"""Signing in, end to end: every ``eventhubs.auth`` method through Spark, against real token services.

The emulator checks shared access signatures and Microsoft Entra ID tokens; :class:`LocalEntra` issues
those tokens to azure-identity's real credentials (client secret, certificate, workload identity, managed
identity over the App Service protocol, DefaultAzureCredential from ``AZURE_*`` variables); Azurite in
https + ``basic`` OAuth mode takes the same identity for the checkpoint store. The Spark jobs run in a
driver of their own (``auth_app``) started with the environment a cluster node would have, so the
Python workers build and use the credentials themselves, and with the Spark UI on, so its pages are
searched for the secrets too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eventhubs_emulator import Emulator
from eventhubs_emulator.entra import EVENTHUBS_AUDIENCE, LocalEntra
from tests.conftest import ROOT, Azurite

pytestmark = [pytest.mark.spark]

KEY_NAME, KEY = "listen-send", "sas-key-TOPSECRET-1"
SECRET = "client-secret-TOPSECRET-2"
ENV_SECRET = "env-secret-TOPSECRET-3"
HUBS = ["sas", "secret", "certpath", "certpem", "workload", "managed", "default", "store"]


def _sas(namespace: str, hub: str, key: str, lifetime: int = 3600) -> str:
    """A SAS token for the hub, signed as the SDK signs one."""
    from azure.eventhub._pyamqp.utils import generate_sas_token

    return generate_sas_token(f"{namespace}/{hub}", KEY_NAME, key, int(time.time()) + lifetime)


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    """LocalEntra, an emulator that checks its tokens, and an https Azurite that takes them."""
    entra = LocalEntra().start()
    emulator = Emulator({hub: 2 for hub in HUBS}, keys={KEY_NAME: KEY}, token_verifier=entra.verify).start()
    azurite = Azurite(tls=(entra.cert_file, entra.key_file))
    try:
        yield entra, emulator, azurite, tmp_path_factory.mktemp("auth")
    finally:
        azurite.stop()
        emulator.stop()
        entra.stop()


@pytest.mark.azurite
@pytest.mark.slow
def test_every_sign_in_method_reads_and_writes_through_spark(setting):
    entra, emulator, azurite, tmp = setting
    entra.add_secret_client("app-secret", SECRET)
    cert_path = entra.add_certificate_client("app-cert")
    pem_client = entra.add_certificate_client("app-pem")
    pem_text = Path(pem_client).read_text()
    token_file = entra.add_workload_client("app-workload")
    entra.add_secret_client("app-env", ENV_SECRET)
    namespace = emulator.fully_qualified_namespace

    def opts(hub: str, **extra: str) -> dict[str, str]:
        base = {"eventhubs.namespace": namespace, "eventhubs.name": hub, "eventhubs.useDevelopmentEmulator": "true"}
        if extra.get("eventhubs.auth") != "managedIdentity" and "eventhubs.sasToken" not in extra:
            base |= {
                "eventhubs.entra.authorityHost": entra.authority,
                "eventhubs.entra.disableInstanceDiscovery": "true",
            }
        return base | extra

    sp = {"eventhubs.entra.tenantId": entra.tenant_id}
    jobs = [
        {"name": "sas", "options": opts("sas", **{"eventhubs.sasToken": _sas(namespace, "sas", KEY)})},
        {"name": "secret", "options": opts("secret", **sp, **{"eventhubs.entra.clientId": "app-secret",
                                                              "eventhubs.entra.clientSecret": SECRET})},
        {"name": "certpath", "options": opts("certpath", **sp, **{"eventhubs.auth": "servicePrincipal",
                                                                  "eventhubs.entra.clientId": "app-cert",
                                                                  "eventhubs.entra.certificatePath": cert_path})},
        {"name": "certpem", "options": opts("certpem", **sp, **{"eventhubs.entra.clientId": "app-pem",
                                                                "eventhubs.entra.certificate": pem_text})},
        {"name": "workload", "options": opts("workload", **sp, **{"eventhubs.auth": "workloadIdentity",
                                                                  "eventhubs.entra.clientId": "app-workload",
                                                                  "eventhubs.entra.federatedTokenFile": token_file})},
        {"name": "managed", "options": opts("managed", **{"eventhubs.auth": "managedIdentity"})},
        {"name": "default", "options": opts("default")},  # DefaultAzureCredential, from the AZURE_* variables
        {"name": "store", "options": opts("store", **sp, **{
            "eventhubs.entra.clientId": "app-secret", "eventhubs.entra.clientSecret": SECRET,
            "eventhubs.checkpointStore.accountUrl": azurite.account_url,
            "eventhubs.checkpointStore.container": "entra-checkpoints",
        }), "stream": str(tmp / "store-checkpoint")},
        {"name": "wrong-secret", "options": opts("secret", **sp, **{"eventhubs.entra.clientId": "app-secret",
                                                                    "eventhubs.entra.clientSecret": "not-it"})},
        {"name": "unknown-client", "options": opts("secret", **sp, **{"eventhubs.entra.clientId": "nobody",
                                                                      "eventhubs.entra.clientSecret": SECRET})},
        {"name": "wrong-sas", "options": opts("sas", **{"eventhubs.sasToken": _sas(namespace, "sas", "wrong")})},
    ]  # fmt: skip
    for job in jobs:
        if "wrong" in job["name"] or "unknown" in job["name"]:
            job["read"] = True
        else:
            job["write"] = [f"{job['name']}-{i}" for i in range(5)]
            job.setdefault("read", "stream" not in job)
    jobs_file, results_file, log = tmp / "jobs.json", tmp / "results.json", tmp / "driver.log"
    jobs_file.write_text(json.dumps(jobs))
    env = {
        **os.environ,
        "REQUESTS_CA_BUNDLE": entra.ca_file,  # the nodes trust the token service (and Azurite) certificate
        "IDENTITY_ENDPOINT": entra.identity_endpoint,  # a managed identity, App Service style
        "IDENTITY_HEADER": entra.identity_header,
        "AZURE_TENANT_ID": entra.tenant_id,  # what DefaultAzureCredential's EnvironmentCredential reads
        "AZURE_CLIENT_ID": "app-env",
        "AZURE_CLIENT_SECRET": ENV_SECRET,
    }
    with open(log, "wb") as out:
        done = subprocess.run([sys.executable, "-m", "tests.integration.auth_app", str(jobs_file), str(results_file)],
                              cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=600)  # fmt: skip
    output = log.read_text(errors="replace")
    assert done.returncode == 0, output[-4000:]
    report = json.loads(results_file.read_text())
    results = {r["name"]: r for r in report["jobs"]}
    ui = report["ui"]
    assert "eventhubs" in ui["sql?details=true&planDescription=true"].lower(), "the UI's SQL plans were read"

    for job in jobs:
        if "write" in job:
            result = results[job["name"]]
            assert "error" not in result, result
            assert result["read"] == sorted(job["write"]), result

    # Each identity signed in as itself, for Event Hubs (and for Storage, the checkpoint store).
    audiences: dict[str, set[str]] = {}
    for claims in entra.issued:
        audiences.setdefault(claims["appid"], set()).add(claims["aud"])
    for client in ("app-secret", "app-cert", "app-pem", "app-workload", "app-env", entra.managed_identity_id):
        assert EVENTHUBS_AUDIENCE in audiences.get(client, set()), (client, audiences)
    assert "https://storage.azure.com" in audiences["app-secret"], audiences

    # The stream's progress is in the checkpoint store, written with the Entra identity.
    from eventhubs_spark.checkpoints.blob import BlobCheckpointStore

    store = BlobCheckpointStore.from_connection_string(azurite.connection_string, "entra-checkpoints",
                                                       connection_verify=entra.ca_file)  # fmt: skip
    checkpoints = store.list_checkpoints(namespace, "store", "$Default")
    assert sum(c.sequence_number + 1 for c in checkpoints) == 5, checkpoints

    # A refused sign-in fails at once, names the method and what to check, and shows no secret.
    for name, needle in (("wrong-secret", "AADSTS7000215"), ("unknown-client", "AADSTS700016"),
                         ("wrong-sas", "InvalidSignature")):  # fmt: skip
        error, seconds = results[name].get("error", ""), results[name]["seconds"]
        assert "AuthenticationFailedError" in error and needle in error, error
        assert "eventhubs.auth=" in error and "Check " in error, error
        assert seconds < 60, f"{name} took {seconds:.0f} s to fail"
        assert "not-it" not in error

    key_body = pem_text.split("-----")[2].strip().splitlines()[1]
    for secret in (KEY, SECRET, ENV_SECRET, key_body, Path(token_file).read_text().split(".")[2],
                   _sas(namespace, "sas", KEY).split("sig=")[1].split("&")[0]):  # fmt: skip
        assert secret not in output, "a secret reached the driver or worker output"
        assert secret not in json.dumps(results), "a secret reached an error message"
        assert secret not in json.dumps(ui), "a secret reached the Spark UI"


def test_a_namespace_connection_string_with_the_hub_named_by_option(spark, eventhub):
    """The portal's first connection string is the namespace's (no EntityPath): eventhubs.name completes it."""
    from tests.integration.sdk_helpers import send

    send(eventhub.connection_string, [f"n{i}" for i in range(6)])
    options = {"eventhubs.connectionString": eventhub.namespace_connection_string, "eventhubs.name": eventhub.name}
    spark.createDataFrame([("w",)], "body string").write.format("eventhubs").options(**options).mode("append").save()
    rows = spark.read.format("eventhubs").options(**options).load().selectExpr("cast(body as string) b").collect()
    assert sorted(r.b for r in rows) == sorted([*(f"n{i}" for i in range(6)), "w"])
    with pytest.raises(Exception, match="EntityPath=<event hub name> is missing"):
        spark.read.format("eventhubs").option(
            "eventhubs.connectionString", eventhub.namespace_connection_string
        ).load().count()
