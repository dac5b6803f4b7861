"""Issue 52 through Spark: databricks.serviceCredential with the tests' stand-in for Databricks' entry points.

Its Spark runs in a driver of its own (``auth_app``, as the other sign-in tests), so this module is not marked
``spark``: ``./dev test`` runs it beside the Spark tests rather than after them (the CI's time), and the
compatibility runs, which take the tests marked ``spark``, leave it to the newest Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from eventhubs_emulator import Emulator
from eventhubs_emulator.entra import EVENTHUBS_AUDIENCE, LocalEntra
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def setting(tmp_path_factory) -> Iterator[tuple[Any, Any, None, Any]]:
    """LocalEntra, and an emulator that checks its tokens."""
    entra = LocalEntra().start()
    emulator = Emulator({"secret": 2, "default": 2, "avro": 2}, token_verifier=entra.verify,
                        schema_registry_port=0, certificate=(entra.cert_file, entra.key_file),
                        schema_groups={"svc": "Avro"}).start()  # fmt: skip
    try:
        yield entra, emulator, None, tmp_path_factory.mktemp("service-credential")
    finally:
        emulator.stop()
        entra.stop()


SERVICE_SECRET = "svc-cred-secret-TOPSECRET-5"


def test_a_databricks_service_credential_signs_in_every_process_and_renews_its_tokens(setting):
    """Issue 52: databricks.serviceCredential, with the tests' stand-in for databricks.service_credentials on the
    Spark processes' path (tests/databricks_standin): a batch write and read, registered Avro written and read
    through the Schema Registry, and a stream fed by the sink for 45 s
    while tokens live 20 s, all signed in through it (the driver's planning and the executors' tasks alike), every
    event read once; its name and tokens nowhere in the output, the errors or the UI; a name without ACCESS fails
    naming the option, and no other identity is tried."""
    entra, emulator, _, tmp = setting
    entra.add_secret_client("app-svc", SERVICE_SECRET)
    namespace = emulator.fully_qualified_namespace
    name = "eh-cred-TOPSECRET-name"
    base = {"eventhubs.namespace": namespace, "eventhubs.useDevelopmentEmulator": "true",
            "databricks.serviceCredential": name}  # fmt: skip
    jobs = [
        {"name": "batch", "options": {**base, "eventhubs.name": "secret"}, "write": [f"svc-{i}" for i in range(5)],
         "read": True},
        {"name": "live", "options": {**base, "eventhubs.name": "default"},
         "live": {"seconds": 45, "every": 3, "count": 5, "checkpoint": str(tmp / "svc-live")}},
        {"name": "avro", "options": {**base, "eventhubs.name": "avro",
                                     "eventhubs.avro.schemaRegistry": emulator.schema_registry_namespace},
         "avro": {"group": "svc", "name": "svc.Order", "values": [{"id": i, "item": f"tea-{i}"} for i in range(6)],
                  "reader": json.dumps({"type": "record", "name": "Order", "namespace": "svc", "fields": [
                      {"name": "id", "type": "long"}, {"name": "item", "type": "string"}]})}},
        {"name": "no-access", "options": {**base, "eventhubs.name": "secret", "databricks.serviceCredential": "other"},
         "read": True},
    ]  # fmt: skip
    before = len(entra.issued)
    lifetime, entra.token_lifetime = entra.token_lifetime, 20
    jobs_file, results_file, log = tmp / "svc-jobs.json", tmp / "svc-results.json", tmp / "svc-driver.log"
    jobs_file.write_text(json.dumps(jobs))
    event_log = tmp / "event-log"
    event_log.mkdir()
    standin = str(ROOT / "tests" / "databricks_standin")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AZURE_")},  # nothing else to fall back to
        "REQUESTS_CA_BUNDLE": entra.ca_file,
        # executors of their own (they inherit this environment: the stand-in and its credentials), and the event
        # log, which a Spark history server shows, searched for the credential's name and tokens as well
        "EVENTHUBS_TEST_MASTER": "local-cluster[2,1,1024]",
        "EVENTHUBS_TEST_EVENT_LOG": str(event_log),
        "PYTHONPATH": os.pathsep.join(p for p in (standin, os.environ.get("PYTHONPATH")) if p),
        "EVENTHUBS_TEST_SERVICE_CREDENTIALS": json.dumps({name: {"tenant": entra.tenant_id, "client": "app-svc",
                                                                 "secret": SERVICE_SECRET,
                                                                 "authority": entra.authority}}),
    }  # fmt: skip
    try:
        with open(log, "wb") as out:
            done = subprocess.run([sys.executable, "-m", "tests.integration.auth_app", str(jobs_file),
                                   str(results_file)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=600)  # fmt: skip
    finally:
        entra.token_lifetime = lifetime
    output = log.read_text(errors="replace")
    assert done.returncode == 0, output[-4000:]
    report = json.loads(results_file.read_text())
    results = {r["name"]: r for r in report["jobs"]}
    assert results["batch"].get("read") == [f"svc-{i}" for i in range(5)], results["batch"]
    live = results["live"]
    assert "error" not in live, live
    assert live["read"] == sorted(f"live-{i}" for i in range(live["written"])) and live["written"] >= 50, live
    tokens = [c for c in entra.issued[before:] if c["appid"] == "app-svc"]
    assert {c["aud"] for c in tokens} == {EVENTHUBS_AUDIENCE}
    assert len(tokens) >= 4, f"{len(tokens)} tokens over 45 s of 20 s tokens: not renewed"
    assert all(c["appid"] == "app-svc" for c in entra.issued[before:]), "another identity was tried"
    # the Schema Registry, signed in through the same credential: the sink registered the schema and encoded, the
    # reader (driver and executors) fetched it by id and decoded
    assert results["avro"].get("read") == [{"id": i, "item": f"tea-{i}"} for i in range(6)], results["avro"]
    versions = emulator.schema_registry.versions("svc", "svc.Order")
    assert len(versions) == 1 and json.loads(versions[0].content)["name"] == "Order", versions
    error = results["no-access"].get("error", "")
    assert "AuthenticationFailedError" in error and "databricks.serviceCredential" in error, error
    logged = "".join(f.read_text(errors="replace") for f in event_log.rglob("*") if f.is_file())
    assert "local-cluster" in logged, "the event log was written, by a cluster with executors of their own"
    assert entra.issued_tokens, "tokens were issued"
    for secret in (name, SERVICE_SECRET, *entra.issued_tokens):
        assert secret not in logged, "the credential's name, secret or a token reached Spark's event log"
    for secret in (name, SERVICE_SECRET):
        assert secret not in output, "the credential's name or secret reached the driver or worker output"
        assert secret not in json.dumps(results), "the credential's name reached an error message"
        assert secret not in json.dumps(report["ui"]), "the credential's name reached the Spark UI"
