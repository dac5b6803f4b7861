"""The connector and the blob checkpoint store: Spark mirrors its progress, SDK processors resume from it."""

from __future__ import annotations

import itertools
import threading

import pytest

from tests.integration.sdk_helpers import send, wait_until
from tests.integration.spark.test_reader_spark import output, run_available_now

pytestmark = [pytest.mark.spark, pytest.mark.azurite]
_containers = itertools.count()


@pytest.fixture
def store_options(azurite):
    return {
        "eventhubs__checkpointStore__connectionString": azurite.connection_string,
        "eventhubs__checkpointStore__container": f"mirror{next(_containers)}",
    }


def run_and_mirror(spark, eventhub, tmp_path, **options) -> None:
    """An AvailableNow run whose progress is in the store when it returns. Spark 4.2+ asks the source
    for the next offset once more after the last batch (the mirror writes then); Spark 4.0/4.1 ask once
    per run, so a run's progress is mirrored when the next run starts: here, one that finds nothing new."""
    from eventhubs_spark.source import HAS_ADMISSION_CONTROL

    run_available_now(spark, eventhub, tmp_path, **options)
    if not HAS_ADMISSION_CONTROL:
        assert run_available_now(spark, eventhub, tmp_path, **options) == []


def official_store(azurite, options):
    from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore

    return BlobCheckpointStore.from_connection_string(
        azurite.connection_string, options["eventhubs__checkpointStore__container"]
    )


def sdk_processor_reads(eventhub, store, count: int) -> list[str]:
    """The bodies an official SDK processor reads with the official store, from its checkpoints (waiting for
    ``count`` of them)."""
    from azure.eventhub import EventHubConsumerClient

    client = EventHubConsumerClient.from_connection_string(
        eventhub.connection_string, consumer_group="$Default", checkpoint_store=store
    )
    seen: list[str] = []
    thread = threading.Thread(
        target=client.receive,
        kwargs={"on_event": lambda ctx, e: seen.append(e.body_as_str()), "starting_position": "-1"},
        daemon=True,
    )
    thread.start()
    try:
        wait_until(lambda: len(seen) >= count, timeout=60, message="the SDK processor's events")
    finally:
        client.close()
        thread.join(30)
    return seen


def test_spark_mirrors_progress_and_an_sdk_processor_resumes_after_it(spark, azurite, eventhub, tmp_path,
                                                                      store_options):  # fmt: skip
    for p in range(4):
        send(eventhub.connection_string, [f"spark-{p}-{i}" for i in range(5 + p)], partition_id=str(p))
    run_and_mirror(spark, eventhub, tmp_path, eventhubs__startingPosition='{"offset": "-1"}', **store_options)
    assert len(output(spark, tmp_path)) == 5 + 6 + 7 + 8
    store = official_store(azurite, store_options)
    namespace = eventhub.emulator.fully_qualified_namespace
    checkpoints = {c["partition_id"]: c for c in store.list_checkpoints(namespace, eventhub.name, "$Default")}
    assert {p: c["sequence_number"] for p, c in checkpoints.items()} == {"0": 4, "1": 5, "2": 6, "3": 7}
    assert all(c["offset"] not in (None, "", "None") for c in checkpoints.values())

    # An SDK processor with the official store starts right after Spark's last event, by offset.
    for p in range(4):
        send(eventhub.connection_string, [f"sdk-{p}"], partition_id=str(p))
    assert sorted(sdk_processor_reads(eventhub, store, 4)) == ["sdk-0", "sdk-1", "sdk-2", "sdk-3"]


def test_a_new_query_starts_from_the_store(spark, azurite, eventhub, tmp_path, store_options):
    from azure.eventhub import EventHubConsumerClient

    send(eventhub.connection_string, [f"a{i}" for i in range(6)], partition_id="0")
    send(eventhub.connection_string, [f"b{i}" for i in range(3)], partition_id="1")
    # an SDK processor reads partition 0 and checkpoints after its 4th event
    store = official_store(azurite, store_options)
    from azure.storage.blob import ContainerClient

    ContainerClient.from_connection_string(
        azurite.connection_string, store_options["eventhubs__checkpointStore__container"]
    ).create_container()
    client = EventHubConsumerClient.from_connection_string(
        eventhub.connection_string, consumer_group="$Default", checkpoint_store=store
    )
    done = threading.Event()

    def on_event(ctx, event):
        if event.sequence_number == 3:
            ctx.update_checkpoint(event)
            done.set()

    thread = threading.Thread(
        target=client.receive,
        kwargs={"on_event": on_event, "partition_id": "0", "starting_position": "-1"},
        daemon=True,
    )
    thread.start()
    assert done.wait(60)
    client.close()
    thread.join(30)
    # a new Spark query: partition 0 resumes after the checkpoint, partition 1 (none) from the start
    run_available_now(spark, eventhub, tmp_path, eventhubs__startFromCheckpointStore="true",
                      eventhubs__startingPosition='{"offset": "-1"}', **store_options)  # fmt: skip
    assert sorted(output(spark, tmp_path)) == ["a4", "a5", "b0", "b1", "b2"]


def test_store_by_account_url_and_sas_token(spark, azurite, eventhub, tmp_path):
    import datetime as dt

    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    from eventhubs_spark.checkpoints.blob import BlobCheckpointStore
    from tests.conftest import AZURITE_ACCOUNT, AZURITE_KEY

    sas = generate_account_sas(
        AZURITE_ACCOUNT, AZURITE_KEY, ResourceTypes(service=True, container=True, object=True),
        AccountSasPermissions(read=True, write=True, list=True, create=True, add=True),
        expiry=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1),
    )  # fmt: skip
    send(eventhub.connection_string, [f"u{i}" for i in range(5)], partition_id="1")
    url = f"http://127.0.0.1:{azurite.port}/{AZURITE_ACCOUNT}"
    run_and_mirror(spark, eventhub, tmp_path, eventhubs__startingPosition='{"offset": "-1"}',
                   eventhubs__checkpointStore__accountUrl=url, eventhubs__checkpointStore__sasToken=sas,
                   eventhubs__checkpointStore__container="by-url")  # fmt: skip
    store = BlobCheckpointStore.from_connection_string(azurite.connection_string, "by-url")
    listed = store.list_checkpoints(eventhub.emulator.fully_qualified_namespace, eventhub.name, "$Default")
    assert {c.partition_id: c.sequence_number for c in listed} == {"1": 4}
