"""Unit tests of :mod:`eventhubs_spark.planning.position_lookup`."""

from __future__ import annotations

import pytest

from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.interprocess.task_ranges import ReceiverConfig
from eventhubs_spark.planning import position_lookup as resolve_module
from eventhubs_spark.positions.event_positions import parse_position, selector
from tests.unit.support.position_fidelity import COUNT, FakePartition, fill

# (position JSON, first sequence number read as a start, first sequence number not read as an end)
ROWS: list[tuple[str, int, int]] = [
    ('{"seqNo": 5}', 5, 5),
    ('{"seqNo": 5, "isInclusive": true}', 5, 5),
    ('{"seqNo": 5, "isInclusive": false}', 5, 5),  # the old connector ignored isInclusive for seqNo
    ('{"offset": "O5"}', 5, 5),  # isInclusive defaults to true
    ('{"offset": "O5", "isInclusive": true}', 5, 5),
    ('{"offset": "O5", "isInclusive": false}', 6, 6),
    ('{"enqueuedTime": "T5"}', 6, 6),  # strictly after: the Java client's filter is ">"
    ('{"enqueuedTime": "T5", "isInclusive": true}', 6, 6),  # isInclusive ignored for times
    ('{"enqueuedTime": "T5", "isInclusive": false}', 6, 6),
    ('{"offset": "-1"}', 0, 0),
    ('{"offset": "@latest"}', COUNT, COUNT),
    ('{"offset": "O9", "isInclusive": false}', COUNT, COUNT),  # past the last event: the partition's end
    ('{"seqNo": 7, "enqueuedTime": null, "offset": null, "isInclusive": false}', 7, 7),  # the old JSON shape
]


@pytest.mark.parametrize(("text", "start", "end"), ROWS)
def test_each_row_translates_as_the_old_connector(monkeypatch, text, start, end):
    partition = FakePartition()
    position = parse_position(fill(text, partition.offsets, partition.times), "eventhubs.startingPosition")

    def lookup(settings, config, pid, pos, timeout):
        return partition.first(*selector(pos))

    monkeypatch.setattr(resolve_module, "_first_sequence", lookup)
    settings = parse_connection_string(
        "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=a;SharedAccessKey=b;EntityPath=hub;UseDevelopmentEmulator=true"
    )
    got = resolve_module.resolve(settings, ReceiverConfig(), {"0": partition.info}, {"0": position}, 5.0)["0"]
    # A start reads from the event a position names; an end stops before that same event.
    assert got == start == end
