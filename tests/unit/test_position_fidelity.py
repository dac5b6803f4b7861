"""Positions select exactly the events azure-event-hubs-spark 2.3.x selected (issue 13).

Its ``EventPosition`` defaults ``isInclusive`` to true; its ``translate()`` takes a ``seqNo`` as it is
and turns any other position into the sequence number of the first event a receiver at that
position gets (the Java client filters offsets with ``>=`` or ``>`` by ``isInclusive``, enqueued
times always with ``>``). A start reads from that event; an end stops before it. ``ROWS`` is the
README's table: every row is checked here on the translation and in
``tests/integration/test_position_fidelity_spark.py`` by a Spark batch read.
"""

from __future__ import annotations

import datetime as dt

import pytest

from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.interprocess.task_ranges import ReceiverConfig
from eventhubs_spark.options import parse_options
from eventhubs_spark.planning import position_lookup as resolve_module
from eventhubs_spark.positions.event_positions import parse_position, selector
from eventhubs_spark.positions.partition_catalog import PartitionInfo

# A partition of 10 events, sequence numbers 0..9. Offsets and times are placeholders filled per
# partition: "O5" is event 5's offset, "T5" its enqueued time.
COUNT = 10

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


def fill(text: str, offsets: list[str], times: list[dt.datetime]) -> str:
    """Put real offsets and times (of events 5 and 9) into a row's JSON."""
    iso = {i: t.isoformat(timespec="milliseconds").replace("+00:00", "Z") for i, t in enumerate(times)}
    return text.replace('"O5"', f'"{offsets[5]}"').replace('"O9"', f'"{offsets[9]}"').replace('"T5"', f'"{iso[5]}"')


class FakePartition:
    """Events 0..9 with byte offsets and distinct millisecond times, as the emulator stamps them."""

    def __init__(self) -> None:
        base = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
        self.offsets = [str(100 * i + 7) for i in range(COUNT)]
        self.times = [base + dt.timedelta(milliseconds=3 * i) for i in range(COUNT)]
        self.info = PartitionInfo("0", 0, COUNT - 1, self.offsets[-1], self.times[-1], False)

    def first(self, field: str, inclusive: bool, value: object) -> int | None:
        """What a receiver at the filter gets first: the service's selector semantics."""
        for seq in range(COUNT):
            have: object = {"sequence-number": seq, "offset": int(self.offsets[seq]), "enqueued-time": self.times[seq]}[
                field
            ]
            want = int(str(value)) if field == "offset" else value
            if have > want or (inclusive and have == want):  # type: ignore[operator]
                return seq
        return None


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


def test_equal_enqueued_times_are_skipped_together_as_the_java_client_did():
    partition = FakePartition()
    partition.times[6] = partition.times[5]
    position = parse_position(fill('{"enqueuedTime": "T5"}', partition.offsets, partition.times), "x")
    assert partition.first(*selector(position)) == 7


def test_the_batch_default_start_differs_from_the_old_connector():
    """The old connector started batch reads at the end of the stream (so read nothing by default);
    here a batch read starts at the beginning. Streams start at the end in both."""
    conn = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=n;SharedAccessKey=k;EntityPath=hub"
    batch = parse_options({"eventhubs.connectionString": conn}, "batch")
    stream = parse_options({"eventhubs.connectionString": conn}, "stream")
    assert batch.default_start.to_json() == {"offset": "-1"}
    assert stream.default_start.to_json() == {"offset": "@latest"}


# --- every option the old connector knew gets an answer -------------------------------------------------

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=n;SharedAccessKey=k;EntityPath=hub"

# The key constants of azure-event-hubs-spark 2.3.x's EventHubsConf (and its source's failOnDataLoss),
# with a value each would take there.
OLD_CONNECTOR_KEYS = {
    "eventhubs.connectionString": CONN,
    "eventhubs.consumerGroup": "$Default",
    "eventhubs.startingPosition": '{"offset": "-1", "seqNo": -1, "enqueuedTime": null, "isInclusive": true}',
    "eventhubs.startingPositions": '{"{\\"ehName\\":\\"hub\\",\\"partitionId\\":0}": {"seqNo": 5}}',
    "eventhubs.endingPosition": '{"offset": "@latest", "seqNo": -1, "enqueuedTime": null, "isInclusive": true}',
    "eventhubs.endingPositions": '{"0": {"seqNo": 9}}',
    "eventhubs.maxRatePerPartition": "1000",
    "eventhubs.maxRatesPerPartition": '{"{\\"ehName\\":\\"hub\\",\\"partitionId\\":0}": 10}',
    "eventhubs.receiverTimeout": "PT60S",
    "eventhubs.operationTimeout": "PT300S",
    "eventhubs.prefetchCount": "500",
    "eventhubs.threadPoolSize": "16",
    "eventhubs.useExclusiveReceiver": "true",
    "maxEventsPerTrigger": "1000",
    "eventhubs.maxEventsPerTrigger": "1000",
    "useSimulatedClient": "false",
    "eventhubs.metricPlugin": "org.apache.spark.eventhubs.utils.SimpleLogMetricPlugin",
    "partitionPreferredLocationStrategy": "Hash",
    "eventhubs.maxBatchReceiveTime": "PT5S",
    "eventhubs.maxAcceptableBatchReceiveTime": "PT30S",
    "eventhubs.throttlingStatusPlugin": "org.apache.spark.eventhubs.utils.SimpleThrottlingStatusPlugin",
    "eventhubs.slowPartitionAdjustment": "false",
    "eventhubs.maxSilentTime": "PT60S",
    "eventhubs.DynamicPartitionDiscovery": "false",
    "eventhubs.useAadAuth": "true",
    "eventhubs.aadAuthCallback": "com.example.AuthBySecretCallBack",
    "eventhubs.AadAuthCallbackParams": '{"clientId": "c"}',
    "failOnDataLoss": "true",
}


@pytest.mark.parametrize("key", sorted(OLD_CONNECTOR_KEYS))
def test_every_old_key_is_taken_or_answered_with_its_replacement(key):
    from eventhubs_spark.errors import OptionError
    from eventhubs_spark.options import ALIASES, BY_KEY, RETIRED

    raw = {"eventhubs.connectionString": CONN, key: OLD_CONNECTOR_KEYS[key]}
    lower = key.lower()
    mode = "batch" if "ending" in lower else "stream"
    if lower in RETIRED:
        with pytest.raises(OptionError) as info:
            parse_options(raw, mode)
        text = str(info.value)
        assert text.startswith(key) and "remove it" in text and f"e.g. {info.value.example}" in text, text
    else:
        assert lower in BY_KEY or lower in ALIASES, f"{key} is neither taken nor answered"
        parse_options(raw, mode)  # the old value is valid here too


def test_the_old_max_events_key_is_an_alias():
    options = parse_options({"eventhubs.connectionString": CONN, "eventhubs.maxEventsPerTrigger": "42"}, "stream")
    assert options.max_events_per_trigger == 42
    from eventhubs_spark.errors import OptionError

    with pytest.raises(OptionError, match="another name for maxEventsPerTrigger"):
        parse_options({"eventhubs.connectionString": CONN, "eventhubs.maxEventsPerTrigger": "42",
                       "maxEventsPerTrigger": "7"}, "stream")  # fmt: skip


def test_read_options_on_a_write_are_ignored_with_one_warning_and_typos_still_fail(caplog):
    from eventhubs_spark.errors import OptionError

    shared = {
        "eventhubs.connectionString": CONN,
        "maxEventsPerTrigger": "1000",
        "eventhubs.consumerGroup": "spark",
        "eventhubs.startingPosition": '{"offset": "-1"}',
    }
    with caplog.at_level("WARNING", logger="eventhubs_spark"):
        parse_options(shared, "write")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    for key in ("maxEventsPerTrigger", "eventhubs.consumerGroup", "eventhubs.startingPosition"):
        assert key in warnings[0]
    assert "ignored on this write" in warnings[0]
    with pytest.raises(OptionError, match="did you mean"):
        parse_options({**shared, "eventhubs.consumerGrop": "x"}, "write")
    with pytest.raises(OptionError, match="maxEventsPerTrigger"):
        parse_options({**shared, "maxEventsPerTrigger": "lots"}, "write")
