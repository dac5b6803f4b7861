"""The blob checkpoint store on Azurite, against the official azure-eventhub-checkpointstoreblob store."""

from __future__ import annotations

import itertools
import time

import pytest

from eventhubs_spark.checkpoints import Checkpoint, Ownership
from eventhubs_spark.checkpoints.blob import BlobCheckpointStore

pytestmark = pytest.mark.azurite
NS, HUB, CG = "MyNamespace.servicebus.windows.net", "MyHub", "$Default"
_names = itertools.count()


@pytest.fixture
def container(azurite):
    from azure.storage.blob import ContainerClient

    client = ContainerClient.from_connection_string(azurite.connection_string, f"checkpoints{next(_names)}")
    client.create_container()
    return client


@pytest.fixture
def ours(container):
    return BlobCheckpointStore(container)


@pytest.fixture
def official(azurite, container):
    from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore as OfficialStore

    return OfficialStore.from_connection_string(azurite.connection_string, container.container_name)


def test_the_official_store_reads_our_checkpoints(ours, official, container):
    ours.update_checkpoints([Checkpoint(NS, HUB, CG, str(p), 100 + p, str(1000 * p)) for p in range(12)])
    got = official.list_checkpoints(NS, HUB, CG)
    assert sorted((c["partition_id"], c["sequence_number"], c["offset"]) for c in got) == sorted(
        (str(p), 100 + p, str(1000 * p)) for p in range(12)
    )
    names = [b.name for b in container.list_blobs()]
    assert "mynamespace.servicebus.windows.net/myhub/$default/checkpoint/0" in names  # lower-cased layout


def test_we_read_the_official_stores_checkpoints_and_ownership(ours, official):
    for p in range(3):
        official.update_checkpoint(
            {
                "fully_qualified_namespace": NS,
                "eventhub_name": HUB,
                "consumer_group": CG,
                "partition_id": str(p),
                "sequence_number": 7 * p,
                "offset": str(70 * p),
            }
        )
    claimed = official.claim_ownership(
        [
            {
                "fully_qualified_namespace": NS,
                "eventhub_name": HUB,
                "consumer_group": CG,
                "partition_id": "0",
                "owner_id": "python-processor",
            }
        ]
    )
    assert len(claimed) == 1
    assert [(c.partition_id, c.sequence_number, c.offset) for c in ours.list_checkpoints(NS, HUB, CG)] == [
        ("0", 0, "0"), ("1", 7, "70"), ("2", 14, "140"),
    ]  # fmt: skip
    (owner,) = ours.list_ownership(NS, HUB, CG)
    assert owner.owner_id == "python-processor" and owner.etag and owner.last_modified_time


def test_official_store_sees_our_claims_and_we_take_over_released_ones(ours, official):
    (mine,) = ours.claim_ownership([Ownership(NS, HUB, CG, "5", "spark-query")])
    listed = official.list_ownership(NS, HUB, CG)
    assert [(o["partition_id"], o["owner_id"]) for o in listed] == [("5", "spark-query")]
    # the official processor takes it with the etag it listed: our old etag is then stale
    taken = official.claim_ownership([{**listed[0], "owner_id": "other"}])
    assert len(taken) == 1
    assert ours.claim_ownership([Ownership(NS, HUB, CG, "5", "spark-query", etag=mine.etag)]) == []


def test_conflicting_claims_one_winner(ours, container):
    other = BlobCheckpointStore(container)
    # two create the same never-owned partition: Put Blob with If-None-Match lets one win
    first = ours.claim_ownership([Ownership(NS, HUB, CG, "0", "a")])
    second = other.claim_ownership([Ownership(NS, HUB, CG, "0", "b")])
    assert len(first) + len(second) == 1
    (listed,) = ours.list_ownership(NS, HUB, CG)
    # two claim with the same listed etag: If-Match lets one win
    results = [
        ours.claim_ownership([Ownership(NS, HUB, CG, "0", "a", etag=listed.etag)]),
        other.claim_ownership([Ownership(NS, HUB, CG, "0", "b", etag=listed.etag)]),
    ]
    assert sorted(len(r) for r in results) == [0, 1]


def test_reads_tolerate_other_sdks_shapes(ours, container):
    prefix = "mynamespace.servicebus.windows.net/myhub/$default/checkpoint/"
    container.upload_blob(prefix + "0", b"", metadata={"sequencenumber": "5", "offset": ""})
    container.upload_blob(prefix + "1", b"", metadata={"SequenceNumber": "6", "Offset": "60"})
    container.upload_blob(prefix + "2", b"", metadata={"sequencenumber": "7", "offset": "no offset"})
    container.upload_blob(prefix + "3", b"", metadata={"sequencenumber": "8", "clientidentifier": "dotnet"})
    got = [(c.partition_id, c.sequence_number, c.offset) for c in ours.list_checkpoints(NS, HUB, CG)]
    assert got == [("0", 5, None), ("1", 6, "60"), ("2", 7, None), ("3", 8, None)]
    container.upload_blob("mynamespace.servicebus.windows.net/myhub/$default/ownership/0", b"",
                          metadata={"OwnerId": "old-sdk"})  # fmt: skip
    assert [o.owner_id for o in ours.list_ownership(NS, HUB, CG)] == ["old-sdk"]


def test_many_partitions_are_written_concurrently(ours):
    started = time.perf_counter()
    ours.update_checkpoints([Checkpoint(NS, HUB, CG, str(p), p, str(p)) for p in range(64)])
    ours.claim_ownership([Ownership(NS, HUB, CG, str(p), "me") for p in range(64)])
    elapsed = time.perf_counter() - started
    assert len(ours.list_checkpoints(NS, HUB, CG)) == 64
    assert len(ours.list_ownership(NS, HUB, CG)) == 64
    print(f"64 checkpoints and 64 claims in {elapsed:.2f} s")


def test_an_azurite_that_refuses_the_api_version_is_said_once_with_the_fix(tmp_path, caplog):
    """Azurite older than the storage SDK refuses every request (started without --skipApiVersionCheck): the
    mirror says so in one line naming the fix, once, not a dozen lines at every commit."""
    import logging
    import subprocess

    from eventhubs_spark.checkpoints.mirror import CheckpointMirror
    from eventhubs_spark.interprocess.task_ranges import ReceiverConfig
    from eventhubs_spark.options import STREAM, read_options
    from tests.conftest import AZURITE_ACCOUNT, AZURITE_KEY, ROOT, free_port, wait_for_port

    port = free_port()
    proc = subprocess.Popen(
        [str(ROOT / "node_modules" / ".bin" / "azurite-blob"), "--blobHost", "127.0.0.1", "--blobPort", str(port),
         "--location", str(tmp_path), "--silent"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for_port(port)
        conn = (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
                f"BlobEndpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT};")  # fmt: skip
        options = read_options({
            "eventhubs.connectionString": "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=a;SharedAccessKey=b;"
                                          "EntityPath=hub;UseDevelopmentEmulator=true",
            "eventhubs.checkpointStore.connectionString": conn,
            "eventhubs.checkpointStore.container": "refused",
        }, STREAM)  # fmt: skip
        mirror = CheckpointMirror(options.checkpoint_store, options.settings, ReceiverConfig())
        with caplog.at_level(logging.DEBUG, logger="eventhubs_spark"):
            for n in range(1, 4):  # three commits
                mirror.mirror({"0": n}, {})
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1, warnings
        assert "Azurite refuses the storage SDK's API version" in warnings[0] and "--skipApiVersionCheck" in warnings[0]
        assert "\n" not in warnings[0] and "AccountKey" not in warnings[0]
    finally:
        proc.terminate()
        proc.wait(10)
