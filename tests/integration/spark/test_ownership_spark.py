"""Ownership mode: two streaming queries share one consumer group through the blob checkpoint store."""

from __future__ import annotations

import collections
import itertools

import pytest

from tests.integration.sdk_helpers import LiveProducer, send, wait_until
from tests.integration.spark.test_reader_spark import output, stream

pytestmark = [pytest.mark.spark, pytest.mark.azurite, pytest.mark.partitions(6)]
_containers = itertools.count()


def owners(azurite, container: str, eventhub) -> dict[str, int]:
    """Partitions per owner in the store (live ownerships only)."""
    import time

    from eventhubs_spark.checkpoints.balancer import active_ownerships
    from eventhubs_spark.checkpoints.blob import BlobCheckpointStore

    store = BlobCheckpointStore.from_connection_string(azurite.connection_string, container)
    listed = store.list_ownership(eventhub.emulator.fully_qualified_namespace, eventhub.name, "$Default")
    return dict(collections.Counter(o.owner_id for o in active_ownerships(listed, time.time(), 6.0).values()))


def ownership_options(azurite, container: str) -> dict[str, str]:
    """Ownership mode on the store in ``container``, with short cycles, every partition from its start."""
    return {
        "eventhubs__checkpointStore__connectionString": azurite.connection_string,
        "eventhubs__checkpointStore__container": container,
        "eventhubs__ownership": "true",
        "eventhubs__loadBalancing__updateInterval": "1s",
        "eventhubs__loadBalancing__ownershipExpiration": "6s",
        "eventhubs__startingPosition": '{"offset": "-1"}',
    }


def test_two_queries_share_the_partitions_and_read_every_event_once(spark, azurite, eventhub, tmp_path):
    container = f"owners{next(_containers)}"
    options = ownership_options(azurite, container)
    trigger = {"processingTime": "500 milliseconds"}
    expected: list[str] = []
    for p in range(6):
        batch = [f"first-{p}-{i}" for i in range(20)]
        send(eventhub.connection_string, batch, partition_id=str(p))
        expected += batch

    a = stream(spark, eventhub, tmp_path / "a", trigger, eventhubs__ownerId="query-a", **options)
    b = None
    producer = LiveProducer(eventhub.connection_string, 6, seed=7)
    try:
        wait_until(lambda: len(output(spark, tmp_path / "a")) >= 120, timeout=120, message="query A alone")
        assert owners(azurite, container, eventhub) == {"query-a": 6}
        # Query B joins while events keep arriving: the partitions are split 3/3 and handed over.
        producer.start()
        b = stream(spark, eventhub, tmp_path / "b", trigger, eventhubs__ownerId="query-b", **options)
        wait_until(lambda: owners(azurite, container, eventhub) == {"query-a": 3, "query-b": 3}, timeout=90,
                   message="a 3/3 split")  # fmt: skip
        wait_until(lambda: len(output(spark, tmp_path / "b")) > 0, timeout=90, message="query B reading")
        expected += producer.stop()
        for p in range(6):
            send(eventhub.connection_string, [f"mid-{p}"], partition_id=str(p))
            expected.append(f"mid-{p}")

        def read_all() -> list[str]:
            return output(spark, tmp_path / "a") + output(spark, tmp_path / "b")

        wait_until(lambda: len(read_all()) >= len(expected), timeout=120, message="every event")
        mids_of_b = {body for body in output(spark, tmp_path / "b") if body.startswith("mid-")}
        assert len(mids_of_b) == 3, f"B reads its three partitions, got {mids_of_b}"
        counts = collections.Counter(read_all())
        assert sorted(counts) == sorted(expected)
        assert [body for body, n in counts.items() if n > 1] == [], "a live hand-over reads nothing twice"

        # B stops (Spark never tells the source): A takes B's partitions over after the expiry, from
        # B's checkpoints. B's very last batch may not be mirrored yet, so only it may be read twice.
        b.stop()
        b = None
        after: list[str] = []
        for p in range(6):
            batch = [f"after-{p}-{i}" for i in range(5)]
            send(eventhub.connection_string, batch, partition_id=str(p))
            after += batch
        wait_until(lambda: set(after) <= set(output(spark, tmp_path / "a")), timeout=120, message="the takeover")
        assert owners(azurite, container, eventhub) == {"query-a": 6}
        counts = collections.Counter(read_all())
        assert set(counts) == set(expected) | set(after)
        assert all(counts[body] == 1 for body in after)
    finally:
        producer.stop()
        for query in (a, b):
            if query is not None:
                query.stop()
