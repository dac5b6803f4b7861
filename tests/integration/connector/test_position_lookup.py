"""Where a stream starts by offset or enqueued time: every partition's first event looked up at once over the
process's one connection (planning/position_lookup.py), exact as one receiver a partition was."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from eventhubs_spark.planning import position_lookup
from eventhubs_spark.positions.event_positions import EnqueuedTime, Offset
from eventhubs_spark.source.planner import plan_reading


@pytest.mark.partitions(8)
def test_starts_by_time_and_offset_are_found_over_one_connection_for_every_partition(eventhub, monkeypatch):
    """Five events a partition, a moment, five more: a start at that moment is each partition's sixth event; by an
    offset, that event (inclusive) or the one after (exclusive); past the last event, the partition's end. No
    partition needs a receiver of its own (the shared connection found them all), and a single partition's lookup
    still has one, as before."""
    from azure.eventhub import EventData, EventHubProducerClient

    with EventHubProducerClient.from_connection_string(eventhub.connection_string) as producer:  # one, for speed

        def send(prefix: str, counts: dict[int, int]) -> None:
            for p, n in counts.items():
                producer.send_batch([EventData(f"{prefix}{p}-{i}") for i in range(n)], partition_id=str(p))

        send("a", {p: 5 for p in range(8)})
        time.sleep(1.1)
        moment = dt.datetime.now(dt.timezone.utc)
        time.sleep(1.1)
        send("b", {p: 5 + p for p in range(8)})
    planner = plan_reading({"eventhubs.connectionString": eventhub.connection_string}, "stream", None, None, None)[0]
    infos = planner.partition_infos(0.0)
    config, settings = planner.config, planner.settings
    at_seventh = {str(p): position_lookup.offset_of(settings, config, str(p), 7, 30) for p in range(8)}
    own: list[str] = []
    original = position_lookup._first_sequence

    def counted(settings, config, pid, pos, timeout):
        own.append(pid)
        return original(settings, config, pid, pos, timeout)

    monkeypatch.setattr(position_lookup, "_first_sequence", counted)
    by_time = position_lookup.resolve(settings, config, infos, {str(p): EnqueuedTime(moment) for p in range(8)}, 30)
    assert by_time == {str(p): 5 for p in range(8)}
    inclusive = position_lookup.resolve(
        settings, config, infos, {p: Offset(o, True) for p, o in at_seventh.items()}, 30
    )
    exclusive = position_lookup.resolve(settings, config, infos, {p: Offset(o, False) for p, o in at_seventh.items()},
                                        30)  # fmt: skip
    assert inclusive == {str(p): 7 for p in range(8)} and exclusive == {str(p): 8 for p in range(8)}
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=5)
    assert position_lookup.resolve(settings, config, infos, {str(p): EnqueuedTime(later) for p in range(8)}, 30) == {
        str(p): 10 + p for p in range(8)
    }
    assert own == [], "every partition was found over the shared connection"
    assert position_lookup.resolve(settings, config, infos, {"3": EnqueuedTime(moment)}, 30) == {"3": 5}
    assert own == ["3"]
