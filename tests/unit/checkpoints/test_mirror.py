"""Unit tests of :mod:`eventhubs_spark.checkpoints.mirror`: writes that overlap a batch, and their order."""

from __future__ import annotations

import logging
import pickle
import threading

from eventhubs_spark.checkpoints.mirror import CheckpointMirror
from eventhubs_spark.interprocess.task_ranges import ReceiverConfig
from eventhubs_spark.options import STREAM, read_options
from eventhubs_spark.positions.partition_catalog import PartitionInfo

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=a;SharedAccessKey=b;EntityPath=hub"
STORE = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net"


class SlowStore:
    """A checkpoint store whose writes wait for ``go`` (a storage account at 1,024 blobs a trigger)."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.started = threading.Event()
        self.writes: list[dict[str, int]] = []
        self.fail_next = False

    def update_checkpoints(self, checkpoints):
        items = list(checkpoints)
        self.started.set()
        assert self.go.wait(10), "the test never let the write finish"
        if self.fail_next:
            self.fail_next = False
            raise OSError("the storage account is unreachable")
        self.writes.append({c.partition_id: c.sequence_number for c in items})


def mirror_with(store: SlowStore) -> CheckpointMirror:
    options = read_options({"eventhubs.connectionString": CONN, "eventhubs.checkpointStore.connectionString": STORE,
                            "eventhubs.checkpointStore.container": "cp"}, STREAM)  # fmt: skip
    mirror = CheckpointMirror(options.checkpoint_store, options.settings, ReceiverConfig())
    mirror._store = store
    return mirror


def infos(ends: dict[str, int]) -> dict[str, PartitionInfo]:
    """Each partition's properties with its last event at ``end - 1`` (its offset known: no lookup on the hub)."""
    return {p: PartitionInfo(p, 0, e - 1, str(100 * (e - 1)), None, False) for p, e in ends.items()}


def test_a_write_in_the_background_does_not_hold_up_the_trigger_and_the_next_waits_for_it():
    """At 1,024 partitions a trigger's writes took 2.2 s of latestOffset on Azurite: with a batch to follow the
    write overlaps it; Spark's commit of the same batch adds nothing; the next write waits, so they land in order."""
    store = SlowStore()
    mirror = mirror_with(store)
    first = {"0": 5, "1": 7}
    mirror.mirror(first, infos(first), background=True)  # returns with the write still waiting on the store
    assert store.started.wait(5) and not store.writes
    mirror.mirror(first, infos(first), background=True)  # commit(end) of the same batch: the write in flight has it
    later = {"0": 9, "1": 7}
    waiter = threading.Thread(target=mirror.mirror, args=(later, infos(later)))  # a trigger with no batch after it
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive(), "a write with nothing after it to overlap must finish before the trigger returns"
    store.go.set()
    waiter.join(10)
    assert not waiter.is_alive()
    assert store.writes == [{"0": 4, "1": 6}, {"0": 8}]  # in order; partition 1 had not moved
    mirror.mirror(later, infos(later), background=True)
    mirror.settle()
    assert len(store.writes) == 2  # nothing new


def test_a_failed_background_write_is_said_and_written_again_at_the_next_call(caplog):
    store = SlowStore()
    store.go.set()
    store.fail_next = True
    mirror = mirror_with(store)
    first = {"0": 5}
    with caplog.at_level(logging.WARNING, logger="eventhubs_spark"):
        mirror.mirror(first, infos(first), background=True)
        mirror.settle()
    assert not store.writes
    assert "could not mirror progress to the checkpoint store" in caplog.text
    mirror.mirror(first, infos(first), background=True)
    mirror.settle()
    assert store.writes == [{"0": 4}]


def test_a_mirror_with_a_write_in_flight_still_travels_to_the_workers():
    store = SlowStore()
    mirror = mirror_with(store)
    mirror.mirror({"0": 5}, infos({"0": 5}), background=True)
    assert store.started.wait(5)
    state = mirror.__getstate__()
    state.pop("_store")  # the test's stand-in (the real one is built in the process that writes)
    copy = pickle.loads(pickle.dumps(state))
    assert copy["_pending"] is None and copy["_writer"] is None and copy["_in_flight"] == {}
    store.go.set()
    mirror.settle()
    assert store.writes == [{"0": 4}]


def test_settle_waits_at_most_the_time_it_is_given():
    """What the stream runner's end waits for (runtime.flush_on_termination): bounded, and the write still on its
    way is kept, so a later settle still waits for it."""
    store = SlowStore()
    mirror = mirror_with(store)
    mirror.mirror({"0": 5}, infos({"0": 5}), background=True)
    assert store.started.wait(5)
    assert mirror.settle(0.1) is False and mirror._pending is not None
    store.go.set()
    assert mirror.settle(10) is True and mirror._pending is None
    assert store.writes == [{"0": 4}]
    assert mirror.settle(0) is True  # nothing on its way
