"""Receivers never fail a query by displacing each other, and never lock other readers out (issue 14).

1. The mirror's offset lookups on the driver displace the executors' idle receivers between
   micro-batches; each must reopen at its position, so every run reads every event exactly once.
2. Two ownership-mode queries and an official SDK processor share 12 partitions: the split converges
   within one, and partitions handed to the processor are not held by idle owner-level receivers.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time

import pytest

from tests.integration.sdk_helpers import LiveProducer, send, wait_until
from tests.integration.spark.test_ownership_spark import owners, ownership_options
from tests.integration.spark.test_reader_spark import output, run_available_now, stream

pytestmark = [pytest.mark.spark, pytest.mark.azurite, pytest.mark.slow]
_containers = itertools.count()


def test_mirror_lookups_never_fail_a_query_ten_runs_in_a_row(spark, azurite, eventhub, tmp_path):
    expected = []
    for p in range(4):
        batch = [f"e-{p}-{i}" for i in range(2000)]
        send(eventhub.connection_string, batch, partition_id=str(p))
        expected += batch
    for run in range(10):
        # A fresh store each run: every batch that is not caught up mirrors through offset lookups.
        rows = run_available_now(
            spark, eventhub, tmp_path / f"run{run}",
            maxEventsPerTrigger="3000",
            eventhubs__startingPosition='{"offset": "-1"}',
            eventhubs__checkpointStore__connectionString=azurite.connection_string,
            eventhubs__checkpointStore__container=f"lookups{next(_containers)}",
        )  # fmt: skip
        assert len(rows) >= 3, f"run {run}: rate-limited batches, got {len(rows)}"
        got = output(spark, tmp_path / f"run{run}")
        counts = collections.Counter(got)
        assert len(got) == len(expected) and set(counts) == set(expected), f"run {run}: every event"
        assert max(counts.values()) == 1, f"run {run}: nothing read twice"


@pytest.mark.partitions(12)
def test_two_queries_and_an_sdk_processor_share_twelve_partitions(spark, azurite, eventhub, tmp_path):
    from azure.eventhub import EventHubConsumerClient
    from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore
    from azure.storage.blob import ContainerClient

    container = f"shared{next(_containers)}"
    ContainerClient.from_connection_string(azurite.connection_string, container).create_container()
    options = ownership_options(azurite, container)
    expected: list[str] = []
    for p in range(12):
        batch = [f"first-{p}-{i}" for i in range(10)]
        send(eventhub.connection_string, batch, partition_id=str(p))
        expected += batch

    seen: list[str] = []
    store = BlobCheckpointStore.from_connection_string(azurite.connection_string, container)
    client = EventHubConsumerClient.from_connection_string(
        eventhub.connection_string, consumer_group="$Default", checkpoint_store=store,
        load_balancing_interval=1, partition_ownership_expiration_interval=6, load_balancing_strategy="balanced",
    )  # fmt: skip

    def on_event(ctx, event):
        if event is not None:
            seen.append(event.body_as_str())
            ctx.update_checkpoint(event)

    processor = threading.Thread(
        target=client.receive, kwargs={"on_event": on_event, "starting_position": "-1"}, daemon=True
    )
    trigger = {"processingTime": "500 milliseconds"}
    queries = []

    def split_within_one(count: int) -> bool:
        split = owners(azurite, container, eventhub)
        counts = sorted(split.values())
        return len(split) == count and sum(counts) == 12 and counts[-1] - counts[0] <= 1

    def read_all() -> set[str]:
        return set(output(spark, tmp_path / "a")) | set(output(spark, tmp_path / "b")) | set(seen)

    producer = LiveProducer(eventhub.connection_string, 12, seed=11)
    try:
        queries.append(stream(spark, eventhub, tmp_path / "a", trigger, eventhubs__ownerId="query-a", **options))
        queries.append(stream(spark, eventhub, tmp_path / "b", trigger, eventhubs__ownerId="query-b", **options))
        wait_until(lambda: split_within_one(2), timeout=120, message="a 6/6 split between the queries")
        wait_until(lambda: set(expected) <= read_all(), timeout=120, message="the queries catching up")
        # The processor joins while the queries are caught up: the partitions it takes were just read,
        # so their idle owner-level receivers sit in the executors' pools, where they would lock it out.
        processor.start()
        wait_until(lambda: split_within_one(3), timeout=150, message="a split within one over three owners")
        producer.start()
        time.sleep(3)
        expected += producer.stop()
        for p in range(12):
            send(eventhub.connection_string, [f"last-{p}"], partition_id=str(p))
            expected.append(f"last-{p}")
        wait_until(lambda: set(expected) <= read_all(), timeout=120, message="every event read by someone")
        assert split_within_one(3), f"the split stays within one: {owners(azurite, container, eventhub)}"
        processor_partitions = {body.split("-")[1] for body in seen if body.startswith("last-")}
        assert len(processor_partitions) >= 3, f"the processor reads its share, got {processor_partitions}"
    finally:
        producer.stop()
        for query in queries:
            query.stop()
        client.close()
        processor.join(30)
