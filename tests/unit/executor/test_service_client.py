"""Unit tests of :mod:`eventhubs_spark.executor.service_client`."""

from __future__ import annotations

import time

from eventhubs_spark.executor import receiver_service, service_client
from tests.unit.support.service import request, scripted


def test_chunks_that_have_arrived_are_decoded_as_one_record_batch(running, monkeypatch):
    """A worker that comes back to the socket finds several chunks there: it decodes them as one record batch (a
    chunk's decoding has a fixed cost, and so has each batch Spark takes), never past MERGE_EVENTS or MERGE_BYTES."""
    worker = running[2]
    read_here, _ = scripted()
    monkeypatch.setattr(receiver_service, "read_here", read_here)
    monkeypatch.setattr(service_client, "MERGE_EVENTS", 25)
    reader = worker.read(request(100, 160), True, {})
    first = next(reader)  # the first chunk is decoded as soon as it is here (the others may follow it)
    time.sleep(0.5)  # the rest of the range arrives meanwhile
    batches = [first, *reader]
    seqs = [s for b in batches for s in b.column("sequenceNumber").to_pylist()]
    assert seqs == list(range(100, 160)), "each event once, in order"
    assert max(b.num_rows for b in batches[1:]) == 30, "arrived chunks went together, up to the limit's chunk"
    assert len(batches) < 6
    monkeypatch.setattr(service_client, "MERGE_BYTES", 1)  # large events: no more than one chunk's bytes at a time
    reader = worker.read(request(100, 160), True, {})
    first = next(reader)
    time.sleep(0.5)
    batches = [first, *reader]
    assert [b.num_rows for b in batches] == [10] * 6
