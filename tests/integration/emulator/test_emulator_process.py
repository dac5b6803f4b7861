"""The emulator as a process (``python -m eventhubs_emulator``), and the shared test services."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest
from azure.eventhub import EventHubProducerClient

from tests.conftest import free_port
from tests.integration.sdk_helpers import receive, send


def _start(args: list[str]) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "eventhubs_emulator", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = [proc.stdout.readline()]
    assert "listening on" in lines[0], lines[0]
    return proc, lines


def test_module_runs_until_sigterm_and_prints_connection_strings(tmp_path):
    config = tmp_path / "Config.json"
    config.write_text(
        json.dumps(
            {
                "UserConfig": {
                    "NamespaceConfig": [
                        {
                            "Name": "ns",
                            "Entities": [
                                {"Name": "fromfile", "PartitionCount": "2", "ConsumerGroups": [{"Name": "analytics"}]}
                            ],
                        }
                    ]
                }
            }
        )
    )
    port = free_port()
    proc, lines = _start(["--port", str(port), "--hub", "flagged:3", "--config", str(config)])
    try:
        assert proc.stdout is not None
        lines += [proc.stdout.readline(), proc.stdout.readline()]
        text = "".join(lines)
        assert f"127.0.0.1:{port}" in text
        conns = dict(re.findall(r"^\s+(\w+) \(.*?\): (Endpoint=\S+)$", text, flags=re.M))
        assert set(conns) == {"fromfile", "flagged"}
        assert "UseDevelopmentEmulator=true" in conns["flagged"]
        with EventHubProducerClient.from_connection_string(conns["flagged"]) as producer:
            assert producer.get_partition_ids() == ["0", "1", "2"]
        send(conns["fromfile"], ["hello"], partition_id="1")
        events = receive(conns["fromfile"], 1, consumer_group="analytics", partition_id="1", starting_position="-1")
        assert [e.body_as_str() for e in events] == ["hello"]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert "emulator stopped" in out


def test_entra_flag_runs_a_token_service_the_sdk_signs_in_with(monkeypatch):
    """``--entra`` prints what to sign in with; azure-identity's real credential gets a token the emulator takes."""
    from azure.identity import ClientSecretCredential

    from eventhubs_spark.options import parse_options

    proc, lines = _start(["--port", "0", "--hub", "secured:2", "--entra"])
    try:
        assert proc.stdout is not None
        lines += [proc.stdout.readline() for _ in range(4)]
        text = "".join(lines)
        pairs = dict(re.findall(r"(eventhubs\.[\w.]+|REQUESTS_CA_BUNDLE)=(\S+)", text))
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", pairs.pop("REQUESTS_CA_BUNDLE"))
        settings = parse_options({**pairs, "eventhubs.name": "secured"}, "batch").settings
        assert settings.auth_method == "servicePrincipal"
        with settings.producer() as producer:
            assert producer.get_partition_ids() == ["0", "1"]
        wrong = ClientSecretCredential(pairs["eventhubs.entra.tenantId"], "local-app", "wrong",
                                       authority=pairs["eventhubs.entra.authorityHost"],
                                       disable_instance_discovery=True)  # fmt: skip
        with pytest.raises(Exception, match="AADSTS7000215"):
            wrong.get_token("https://eventhubs.azure.net/.default")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    assert proc.returncode == 0


def test_sigint_stops_it_too():
    proc, _ = _start(["--port", "0", "--hub", "x:1"])
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=20)
    assert proc.returncode == 0


def test_the_cli_emulator_verb_takes_the_same_flags():
    exe = os.path.join(os.path.dirname(sys.executable), "eventhubs-spark")
    proc = subprocess.Popen([exe, "emulator", "--port", "0", "--hub", "cli:2"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert "listening on" in proc.stdout.readline()
        assert "cli (2 partitions" in proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    assert proc.returncode == 0


@pytest.mark.azurite
def test_azurite_fixture_is_a_real_blob_service(azurite):
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(azurite.connection_string)
    container = service.create_container("smoke")
    container.upload_blob("a/b", b"", metadata={"sequencenumber": "5"})
    blobs = list(container.list_blobs(name_starts_with="a/", include=["metadata"]))
    assert [(b.name, b.metadata) for b in blobs] == [("a/b", {"sequencenumber": "5"})]


@pytest.mark.spark
def test_spark_fixture_runs_python_workers(spark):
    assert spark.range(1000).selectExpr("sum(id) as s").collect()[0]["s"] == 499500
    rdd = spark.sparkContext.parallelize(range(10), 2).map(lambda x: x * 2)
    assert sum(rdd.collect()) == 90
