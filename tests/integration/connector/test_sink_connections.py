"""The sink sends to every partition of a big hub over a few connections per process (a link per partition),
as the SDKs do, and not a connection per partition: descriptors and the namespace's connection quota stay
bounded at 1,024 partitions."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.executor.shared_producer import LANES
from eventhubs_spark.process import runtime
from eventhubs_spark.process.runtime import Runtime
from eventhubs_spark.sink import EventSender, SinkLayout


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.partitions(1024)
def test_a_write_to_1024_partitions_uses_a_few_connections_and_every_event_arrives(eventhub):
    settings = parse_connection_string(eventhub.connection_string)
    previous = runtime.use(Runtime(reap_every=0))
    try:
        before = _descriptors()
        rows = 3 * 1024
        layout = SinkLayout(body=0, body_is_text=True, partition_id=1)
        sender = EventSender(settings, layout, timeout=120.0)
        bodies = pa.array([f"e{i}" for i in range(rows)])
        sender.add_batch(pa.record_batch([bodies, pa.array([i % 1024 for i in range(rows)])], ["body", "partitionId"]))
        sender.flush()
        held = _descriptors() - before
        producer = runtime.current().producers.get(settings)
        assert producer.connections() <= LANES
    finally:
        runtime.current().producers.invalidate(settings)
        runtime.use(previous)
    assert sum(sender.report.by_partition.values()) == rows and len(sender.report.by_partition) == 1024
    sends = eventhub.emulator.stored_sends(eventhub.name)
    assert sum(s["count"] for s in sends) == rows and {s["partition"] for s in sends} == {str(p) for p in range(1024)}
    connections = {s["connection"] for s in sends}
    assert len(connections) <= LANES, f"{len(connections)} connections sent to the hub"
    # both ends of each connection live in this process (the emulator runs in it): a few sockets, not 2,048
    assert held <= 4 * LANES, f"the write left {held} more descriptors open"
    for p in (0, 511, 1023):
        assert eventhub.emulator.partition_properties(eventhub.name, p)["last_enqueued_sequence_number"] == 2


@pytest.mark.partitions(4)
def test_a_processs_first_write_opens_its_lanes_and_asks_the_partitions_once_without_the_sdks_own_opening(
    eventhub, monkeypatch
):
    """A fresh process's first write paid 0.46 s a lane in the SDK's ``_open`` (a 50 ms sleep between the steps of
    opening) and 0.36 s a lane for a management connection each lane's SDK client opened to learn the partitions:
    four lanes one after another, 2.4 s of a first write that then takes 0.3 s. The lanes' links open without that
    ``_open``, and the partitions come from the process's one kept management connection."""
    from azure.eventhub._producer import EventHubProducer

    def sdk_open(self: EventHubProducer) -> bool:
        if self.running:
            return False  # what the SDK's _open does with a producer already open
        raise AssertionError("the SDK's own _open (a 50 ms sleep between its steps) opened a producer")

    monkeypatch.setattr(EventHubProducer, "_open", sdk_open)
    settings = parse_connection_string(eventhub.connection_string)
    previous = runtime.use(Runtime(reap_every=0))
    before = eventhub.emulator.stats()
    try:
        sender = EventSender(settings, SinkLayout(body=0, body_is_text=True, partition_id=1), timeout=60.0)
        rows = 400
        bodies = pa.array([f"e{i}" for i in range(rows)])
        sender.add_batch(pa.record_batch([bodies, pa.array([i % 4 for i in range(rows)])], ["body", "partitionId"]))
        sender.flush()
        sender.add_batch(pa.record_batch([pa.array(["late"]), pa.array([3])], ["body", "partitionId"]))
        sender.flush()  # a later flush reuses what the first opened
    finally:
        runtime.current().producers.invalidate(settings)
        runtime.use(previous)
    after = eventhub.emulator.stats()
    assert sum(sender.report.by_partition.values()) == rows + 1
    opened = after["connections_accepted"] - before["connections_accepted"]
    assert opened <= LANES + 1, f"{opened} connections: more than the {LANES} lanes and one management connection"
    asked = after["management_requests"] - before["management_requests"]
    assert asked <= 1, f"the partitions were asked {asked} times"
