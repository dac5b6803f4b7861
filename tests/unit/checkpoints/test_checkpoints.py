"""Unit tests of :mod:`eventhubs_spark.checkpoints`."""

from __future__ import annotations

from dataclasses import replace

from eventhubs_spark.checkpoints import Checkpoint, InMemoryCheckpointStore, Ownership
from tests.unit.support.checkpoints import CG, HUB, NS


def test_in_memory_claims_are_conditional_on_etags():
    store = InMemoryCheckpointStore()
    fresh = Ownership(NS, HUB, CG, "0", "a")
    (won,) = store.claim_ownership([fresh])
    assert won.etag and won.last_modified_time
    assert store.claim_ownership([replace(fresh, owner_id="b")]) == []  # exists: creation lost (409)
    stale = replace(won, owner_id="b", etag="not-the-etag")
    assert store.claim_ownership([stale]) == []  # 412
    (taken,) = store.claim_ownership([replace(won, owner_id="b")])
    assert taken.owner_id == "b" and taken.etag != won.etag
    assert store.claim_ownership([replace(won, owner_id="a")]) == []  # a's etag is old now
    assert [o.owner_id for o in store.list_ownership(NS.upper(), HUB, CG)] == ["b"]


def test_in_memory_checkpoints_last_writer_wins():
    store = InMemoryCheckpointStore()
    store.update_checkpoints([Checkpoint(NS, HUB, CG, "0", 5, "500"), Checkpoint(NS, HUB, CG, "1", 7, "70")])
    store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", 9, "900"))
    assert [(c.partition_id, c.sequence_number) for c in store.list_checkpoints(NS, HUB, CG)] == [("0", 9), ("1", 7)]
