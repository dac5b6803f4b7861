"""Unit tests of :mod:`eventhubs_spark.options.connection_specs`."""

from __future__ import annotations

from eventhubs_spark.options.connection_specs import CONNECTION_SPECS
from eventhubs_spark.options.parsers import WRITE


def test_the_connection_rows_say_where_a_hub_is_and_how_to_reach_it_for_reads_and_writes_alike():
    keys = [spec.key for spec in CONNECTION_SPECS]
    assert keys[0] == "eventhubs.connectionString" and "eventhubs.consumerGroup" not in keys
    assert {"eventhubs.namespace", "eventhubs.name", "eventhubs.auth", "eventhubs.transportType"} <= set(keys)
    assert all(WRITE in spec.modes for spec in CONNECTION_SPECS), "a sink reaches its hub the same way"
    assert all(spec.key.startswith(("eventhubs.", "databricks.")) for spec in CONNECTION_SPECS)
