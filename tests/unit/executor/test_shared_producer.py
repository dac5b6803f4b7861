"""Unit tests of :mod:`eventhubs_spark.executor.shared_producer` (its sends run against the emulator in
``tests/integration/connector/test_sink_connections.py``)."""

from __future__ import annotations

import pytest

from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.executor.shared_producer import SharedProducer

CONN = "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub;UseDevelopmentEmulator=true"


def test_a_partition_or_a_key_always_goes_to_the_same_lane_and_no_connection_opens_until_a_send():
    producer = SharedProducer(parse_connection_string(CONN), lanes=4)
    try:
        lanes = producer._lanes
        assert [lanes.index(producer._lane(str(p), None)) for p in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
        assert producer._lane("7", None) is producer._lane("7", None)
        assert producer._lane(None, "device-1") is producer._lane(None, "device-1")
        assert producer._lane(None, None) is lanes[0]
        assert producer.connections() == 0, "nothing sent yet: no connection"
    finally:
        producer.close()
    with pytest.raises(ValueError, match="lanes must be at least 1"):
        SharedProducer(parse_connection_string(CONN), lanes=0)


def test_the_hubs_partitions_are_looked_up_once_a_discovery_interval_not_once_a_task(monkeypatch):
    """Every task of a write asks for the partitions; the process's producer asks the hub at most once a discovery
    interval (a kept management connection in a black hole would hold each task up), and again after it."""
    from eventhubs_spark.executor import shared_producer

    now = [100.0]
    monkeypatch.setattr(shared_producer.time, "monotonic", lambda: now[0])
    asked: list[int] = []

    def lookup() -> list[str]:
        asked.append(1)
        return [str(p) for p in range(len(asked) + 1)]  # a partition more at each look

    producer = SharedProducer(parse_connection_string(CONN), lanes=1)
    try:
        assert producer.partition_ids(lookup) == ["0", "1"]
        now[0] += shared_producer.PARTITION_DISCOVERY_INTERVAL - 1
        assert producer.partition_ids(lookup) == ["0", "1"] and len(asked) == 1
        now[0] += 1
        assert producer.partition_ids(lookup) == ["0", "1", "2"] and len(asked) == 2
    finally:
        producer.close()
