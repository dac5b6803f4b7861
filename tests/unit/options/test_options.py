"""Unit tests of :mod:`eventhubs_spark.options`."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventhubs_spark.errors import OptionError
from eventhubs_spark.options import (
    SPECS,
    STREAM,
    WRITE,
    options_table,
    parse_options,
    read_options,
    write_options,
)
from tests.unit.options.test_typed import CONN
from tests.unit.support.position_fidelity import CONN as position_fidelity_CONN
from tests.unit.support.service_credential import BASE


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_typo_within_two_edits_suggests_the_option_or_one_as_near(data):
    from eventhubs_spark.options import SPECS, STREAM, edit_distance, suggestion

    spec = data.draw(st.sampled_from([s for s in SPECS if STREAM in s.modes]))
    typo = spec.key
    for _ in range(data.draw(st.integers(1, 2))):
        at = data.draw(st.integers(0, len(typo) - 1))
        edit = data.draw(st.sampled_from(["drop", "swap", "change", "add"]))
        letter = data.draw(st.sampled_from("abcdefghijklmnopqrstuvwxyz"))
        if edit == "drop":
            typo = typo[:at] + typo[at + 1 :]
        elif edit == "swap" and at + 1 < len(typo):
            typo = typo[:at] + typo[at + 1] + typo[at] + typo[at + 2 :]
        elif edit == "change":
            typo = typo[:at] + letter + typo[at + 1 :]
        else:
            typo = typo[:at] + letter + typo[at:]
    if typo.lower() in {s.key.lower() for s in SPECS}:
        return  # the edits made another real option
    near = suggestion(typo, STREAM)
    assert near is not None, typo

    def distance(key: str) -> int:  # as suggestion() measures it: the eventhubs. prefix may be left out
        return min(edit_distance(typo.lower(), k) for k in {key.lower(), key.lower().removeprefix("eventhubs.")})

    assert distance(near) <= distance(spec.key), (typo, near, spec.key)


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


def test_the_docs_generated_parts_are_in_step_with_their_sources():
    """The Options page's table (from the option specs) and the Performance page's figures (from
    bench/results.json) are what docs/generate.py makes of them now: no option or figure copied by hand."""
    import importlib.util

    path = Path(__file__).resolve().parents[3] / "docs" / "generate.py"
    spec = importlib.util.spec_from_file_location("docs_generate", path)
    assert spec is not None and spec.loader is not None
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    drifted = [page for page, (old, new) in generate.pages_now().items() if old != new]
    assert not drifted, f"{drifted} drifted from their sources: run ./dev docs"
    options = (path.parent / "pages" / "options.md").read_text()
    assert options_table() in options and all(f"\n### `{spec.key}`\n" in options for spec in SPECS)
    assert len(SPECS) >= 15


def test_off_databricks_the_option_fails_at_load_naming_the_runtime_that_brings_it(no_databricks):
    for mode, parse in ((STREAM, read_options), (WRITE, lambda raw, _m: write_options(raw))):
        with pytest.raises(OptionError, match=r"Databricks Runtime 16\.2 or later .*databricks\.service_credentials"):
            parse(dict(BASE), mode)
