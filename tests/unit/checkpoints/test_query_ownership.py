"""Unit tests of :mod:`eventhubs_spark.checkpoints.query_ownership`."""

from __future__ import annotations

from eventhubs_spark.checkpoints import Checkpoint
from eventhubs_spark.checkpoints.balancer import Tenure
from eventhubs_spark.checkpoints.query_ownership import checkpoint_position, takeover_start
from eventhubs_spark.positions import geo_segments
from eventhubs_spark.positions.event_positions import Earliest, Offset, SequenceNumber


def _checkpoint(seq: int | None, offset: str | None = None, released_by: str | None = None,
                at: float | None = None) -> Checkpoint:  # fmt: skip
    return Checkpoint("ns", "hub", "$default", "0", seq, offset, released_by, at)


def test_a_partition_starts_just_after_its_checkpoint_by_sequence_number_else_offset_else_as_configured():
    assert checkpoint_position(_checkpoint(41, "4100"), Earliest()) == SequenceNumber(42)
    assert checkpoint_position(_checkpoint(None, "4100"), Earliest()) == Offset("4100", inclusive=False)
    assert checkpoint_position(None, Earliest()) == Earliest()
    # on a geo-replicated hub the offset names the replication segment the sequence number is in
    assert checkpoint_position(_checkpoint(41, "3:4100"), Earliest()) == SequenceNumber(geo_segments.pack(3, 42))


def test_a_partition_stolen_from_a_live_owner_waits_for_its_hand_over_or_for_the_ownership_to_expire():
    stolen = Tenure(since=100.0, taken_from="q1")
    assert takeover_start(stolen, None, Earliest(), now=110.0, expiry=60.0) is None, "q1 may still read it"
    older = _checkpoint(9, released_by="q1", at=90.0)  # a release before the steal is not this hand-over
    assert takeover_start(stolen, older, Earliest(), now=110.0, expiry=60.0) is None
    handed = _checkpoint(19, released_by="q1", at=105.0)
    assert takeover_start(stolen, handed, Earliest(), now=110.0, expiry=60.0) == SequenceNumber(20)
    unmarked = _checkpoint(29, at=105.0)  # an SDK processor's checkpoint: no hand-over, so the expiry decides
    assert takeover_start(stolen, unmarked, Earliest(), now=110.0, expiry=60.0) is None
    assert takeover_start(stolen, unmarked, Earliest(), now=161.0, expiry=60.0) == SequenceNumber(30)
    free = Tenure(since=100.0)  # unowned, released or expired: no one to wait for
    assert takeover_start(free, None, Earliest(), now=100.0, expiry=60.0) == Earliest()
