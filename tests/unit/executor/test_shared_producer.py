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
