"""Unit tests of :mod:`eventhubs_spark.options.retired`."""

from __future__ import annotations

import pytest

from eventhubs_spark.errors import OptionError
from eventhubs_spark.options import (
    parse_options,
)
from tests.unit.options.test_typed import CONN
from tests.unit.support.position_fidelity import CONN as position_fidelity_CONN

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


def test_the_old_max_events_key_is_an_alias():
    options = parse_options(
        {"eventhubs.connectionString": position_fidelity_CONN, "eventhubs.maxEventsPerTrigger": "42"}, "stream"
    )
    assert options.max_events_per_trigger == 42

    with pytest.raises(OptionError, match="another name for maxEventsPerTrigger"):
        parse_options({"eventhubs.connectionString": position_fidelity_CONN, "eventhubs.maxEventsPerTrigger": "42",
                       "maxEventsPerTrigger": "7"}, "stream")  # fmt: skip


@pytest.mark.parametrize("key", sorted(OLD_CONNECTOR_KEYS))
def test_every_old_key_is_taken_or_answered_with_its_replacement(key):
    from eventhubs_spark.options import ALIASES, BY_KEY, RETIRED

    raw = {"eventhubs.connectionString": position_fidelity_CONN, key: OLD_CONNECTOR_KEYS[key]}
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
