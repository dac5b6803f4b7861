"""A geo-replicated hub through a promotion that loses events: Spark's progress and the blob checkpoint
store carry the replication segment, so a query, a new query started from the store, and an SDK processor
each go on exactly after what was read (the emulator's rules: eventhubs_emulator.broker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.sdk_helpers import send, wait_until
from tests.integration.spark.test_checkpoint_mirror_spark import (  # noqa: F401
    official_store,
    run_and_mirror,
    sdk_processor_reads,
    store_options,
)
from tests.integration.spark.test_reader_spark import output, run_available_now

pytestmark = [pytest.mark.spark, pytest.mark.azurite]


def last_offsets(tmp: Path) -> dict:
    files = sorted((tmp / "checkpoint" / "offsets").glob("[0-9]*"), key=lambda f: int(f.name))
    return json.loads(files[-1].read_text().splitlines()[-1])


@pytest.mark.geo_replicated
@pytest.mark.partitions(2)
def test_a_forced_promotion_loses_nothing_the_query_has_not_read_and_repeats_nothing(
    spark,
    azurite,
    eventhub,
    tmp_path,
    store_options,  # noqa: F811
):

    for p in range(2):
        send(eventhub.connection_string, [f"old-{p}-{i}" for i in range(30)], partition_id=str(p))
    options = dict(eventhubs__startingPosition='{"offset": "-1"}', **store_options)
    run_and_mirror(spark, eventhub, tmp_path, **options)
    assert sorted(output(spark, tmp_path)) == sorted(f"old-{p}-{i}" for p in range(2) for i in range(30))
    assert last_offsets(tmp_path)[eventhub.name] == {"0": "1:30", "1": "1:30"}
    store = official_store(azurite, store_options)
    namespace = eventhub.emulator.fully_qualified_namespace
    listed = {c["partition_id"]: c for c in store.list_checkpoints(namespace, eventhub.name, "$Default")}
    assert {p: c["sequence_number"] for p, c in listed.items()} == {"0": 29, "1": 29}
    assert all(str(c["offset"]).startswith("1:") for c in listed.values()), listed

    # A forced promotion: partition 0 loses its last 4 events (the query read them), and the new segment's
    # sequence numbers go on from 26: by sequence number alone the query would skip 26..29 of the new ones.
    assert eventhub.emulator.promote(eventhub.name, lose={"0": 4}) == {"0": 4, "1": 0}
    for p in range(2):
        send(eventhub.connection_string, [f"new-{p}-{i}" for i in range(10)], partition_id=str(p))
    # a new query from the store's checkpoints, written before the promotion: right after them
    from_store = tmp_path / "from-store"
    run_available_now(spark, eventhub, from_store, eventhubs__startFromCheckpointStore="true", **store_options)
    assert sorted(output(spark, from_store)) == sorted(f"new-{p}-{i}" for p in range(2) for i in range(10))
    # and the first query, from its own checkpoint
    run_and_mirror(spark, eventhub, tmp_path, **options)
    rows = output(spark, tmp_path)
    assert len(rows) == len(set(rows)) == 80, "every event once"
    assert {r for r in rows if r.startswith("new-")} == {f"new-{p}-{i}" for p in range(2) for i in range(10)}
    assert last_offsets(tmp_path)[eventhub.name] == {"0": "2:36", "1": "2:40"}
    listed = {c["partition_id"]: c for c in store.list_checkpoints(namespace, eventhub.name, "$Default")}
    assert {p: c["sequence_number"] for p, c in listed.items()} == {"0": 35, "1": 39}
    assert all(str(c["offset"]).startswith("2:") for c in listed.values()), listed

    # The official SDK's processor from the store, then another new query from the store: both right after.
    for p in range(2):
        send(eventhub.connection_string, [f"more-{p}-{i}" for i in range(3)], partition_id=str(p))
    seen = sdk_processor_reads(eventhub, store, 6)
    assert sorted(seen) == sorted(f"more-{p}-{i}" for p in range(2) for i in range(3))
    fresh = tmp_path / "fresh"
    run_available_now(spark, eventhub, fresh, eventhubs__startFromCheckpointStore="true", **store_options)
    assert sorted(output(spark, fresh)) == sorted(f"more-{p}-{i}" for p in range(2) for i in range(3))


@pytest.mark.geo_replicated
@pytest.mark.partitions(3)
def test_a_promotion_mid_stream_leaves_every_surviving_event_in_the_sink_once(spark, eventhub, tmp_path):
    """A live producer and a running query; the secondary region is promoted, losing the last 3 events of each
    partition (read or not). The sink then holds every event the hub still has, once, and nothing else but
    events the promotion lost that the query had read before it."""
    import time

    from tests.integration.sdk_helpers import LiveProducer, receive
    from tests.integration.spark.test_reader_spark import stream

    sent = [f"pre-{p}-{i}" for p in range(3) for i in range(20)]
    for p in range(3):
        send(eventhub.connection_string, [f"pre-{p}-{i}" for i in range(20)], partition_id=str(p))
    query = stream(spark, eventhub, tmp_path, {"processingTime": "500 milliseconds"},
                   eventhubs__startingPosition='{"offset": "-1"}', eventhubs__maxEventsPerTrigger="25")  # fmt: skip
    producer = LiveProducer(eventhub.connection_string, 3, seed=5)
    try:
        wait_until(lambda: len(output(spark, tmp_path)) >= 40, timeout=120, message="the query reading")
        producer.start()
        time.sleep(2)
        assert eventhub.emulator.promote(eventhub.name, lose=3) == {"0": 3, "1": 3, "2": 3}
        time.sleep(2)
        sent += producer.stop()
        for p in range(3):
            send(eventhub.connection_string, [f"last-{p}"], partition_id=str(p))
            sent.append(f"last-{p}")
        surviving = {e.body_as_str() for e in receive(eventhub.connection_string, len(sent) - 9, timeout=20,
                                                      starting_position="-1", consumer_group="other")}  # fmt: skip
        assert len(surviving) == len(sent) - 9
        wait_until(lambda: surviving <= set(output(spark, tmp_path)), timeout=120, message="every surviving event")
        assert query.exception() is None, query.exception()
    finally:
        producer.stop()
        query.stop()
    rows = output(spark, tmp_path)
    assert len(rows) == len(set(rows)), "nothing read twice"
    assert set(rows) - surviving <= set(sent) - surviving, "nothing but events the promotion lost"
