"""Unit tests of :mod:`eventhubs_spark.cli.reports`."""

from __future__ import annotations

import json

import pytest

from eventhubs_spark.lag import LagFiles
from eventhubs_spark.options import STREAM, read_options


def test_the_lag_commands_text_gives_a_floor_for_the_max_when_a_partitions_time_is_unknown():
    """The summary's maxSecondsBehindLatest is None while a partition has no time (nothing read from it yet), as
    the figures over the others would say less than is true; the text shows the others' max as a floor, naming
    the partitions without a time, rather than "max -" beside a partition 62.7 s behind."""
    from eventhubs_spark.cli.reports import lag_text

    def row(seconds: float | None, events: int) -> dict:
        return {"committed": 10, "latest": 10 + events, "eventsBehind": events, "secondsBehind": seconds,
                "lastReadEnqueuedTime": None, "stalled": None}  # fmt: skip

    report = {"hub": "h", "batch": 3, "commitAgeSeconds": 1.5, "maxOffsetsBehindLatest": 40,
              "maxSecondsBehindLatest": None, "partitions": {"0": row(62.7, 40), "1": row(None, 5)}}  # fmt: skip
    head = lag_text(report).splitlines()[0]
    assert "max at least 62.7 s (no time yet for partition 1)" in head, head
    report["maxSecondsBehindLatest"], report["partitions"]["1"] = 62.7, row(3.0, 5)
    assert lag_text(report).splitlines()[0].endswith("max 40 events, max 62.7 s")


def test_a_query_stores_its_options_without_secrets_and_the_lag_command_takes_them_back(tmp_path):
    """`eventhubs-spark lag` given only the checkpoint location: the hub, namespace and options come from the
    query's source.json (secrets left out); the key, never stored, from the user, or a message saying so."""
    from eventhubs_spark.cli.reports import with_stored_options
    from eventhubs_spark.lag import LocalFolder, stored_sources
    from eventhubs_spark.options import shareable_options

    key = "k3y-TOPSECRET"
    raw = {"eventhubs.connectionString": f"Endpoint=sb://ns.example:5672;SharedAccessKeyName=a;SharedAccessKey={key}",
           "eventhubs.name": "orders", "eventhubs.consumerGroup": "spark", "eventhubs.entra.clientSecret": "s3cret",
           "maxEventsPerTrigger": "100", "path": "/not/an/option"}  # fmt: skip
    kept = shareable_options(raw, "ns.example:5672", "orders", True, "connectionString")
    assert kept == {"eventhubs.name": "orders", "eventhubs.consumerGroup": "spark", "maxEventsPerTrigger": "100",
                    "eventhubs.namespace": "ns.example:5672", "eventhubs.useDevelopmentEmulator": "true",
                    "_signIn": "connectionString"}  # fmt: skip
    LagFiles(str(tmp_path), "orders").write_source(kept)
    LagFiles(str(tmp_path), "other").write_source({**kept, "eventhubs.name": "other", "_signIn": "managedIdentity"})
    stored = stored_sources(LocalFolder(str(tmp_path)))
    assert set(stored) == {"orders", "other"} and key not in json.dumps(stored)

    namespace_key = f"Endpoint=sb://ns.example:5672;SharedAccessKeyName=a;SharedAccessKey={key}"
    with pytest.raises(SystemExit, match="holds the lag of hubs orders, other: name one, e.g. --option eventhubs.name"):
        with_stored_options({}, stored, namespace_key, "LOC")
    options = with_stored_options({"eventhubs.name": "orders"}, stored, namespace_key, "LOC")
    assert options == {"eventhubs.name": "orders", "eventhubs.consumerGroup": "spark", "maxEventsPerTrigger": "100",
                       "eventhubs.connectionString": namespace_key}  # fmt: skip
    read_options(options, STREAM)  # a valid set: the namespace from the key's connection string, the hub stored
    with_path = f"{namespace_key};EntityPath=orders"  # the hub by the connection string; the stored name gives way
    assert "eventhubs.name" not in with_stored_options({}, {"orders": stored["orders"]}, with_path, "LOC")
    with pytest.raises(SystemExit, match="pass --connection-string or set EVENTHUBS_CONNECTION_STRING \\(its hub "
                       "'orders' is known from LOC; its key is not stored\\)"):  # fmt: skip
        with_stored_options({"eventhubs.name": "orders"}, stored, None, "LOC")
    # a query that signed in with Entra needs no key: its stored options are the whole sign-in
    entra = with_stored_options({"eventhubs.name": "other"}, stored, None, "LOC")
    assert "eventhubs.connectionString" not in entra and entra["eventhubs.namespace"] == "ns.example:5672"
    with pytest.raises(SystemExit, match="pass --connection-string or set EVENTHUBS_CONNECTION_STRING$"):
        with_stored_options({}, {}, None, "LOC")  # nothing stored, nothing given
