"""The SDK internals the connector uses (all in eventhubs_spark.amqp.sdk) exist on the installed SDK.

Run on live objects: a consumer the engine opened on its shared connection (with the frame tap on it)
after it received, a consumer client, and the async producer client the management link is built from.
A new azure-eventhub release that drops or renames one fails here, naming it.
"""

from __future__ import annotations

from types import SimpleNamespace

from eventhubs_spark.amqp import sdk
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.executor.receiver import PartitionReceiver
from eventhubs_spark.executor.runtime import current
from eventhubs_spark.ranges import RangeResult, ReceiverConfig

from .sdk_helpers import send


def test_the_installed_sdk_has_every_internal_the_connector_uses(eventhub):
    send(eventhub.connection_string, ["x"], partition_id="0")
    settings = parse_connection_string(eventhub.connection_string)
    receiver = PartitionReceiver(settings, ReceiverConfig("$Default", 10, 10.0, False), "0", current().connections)
    try:
        got = [seq for chunk in receiver.read_range(0, 1, True, RangeResult()) for seq in chunk.seqs]
        assert got == [0], "received through the internals"
        link = receiver._link
        assert link is not None and link.consumer is not None
        client = link.consumer._client
        assert sdk.missing_internals(consumer=link.consumer, client=client) == []
        producer = settings.async_producer()
        assert sdk.missing_internals(async_client=producer) == []
    finally:
        receiver.close()


def test_a_missing_internal_is_named():
    fake_consumer = SimpleNamespace(_keep_alive=1, _handler=SimpleNamespace(_link=SimpleNamespace()))
    missing = sdk.missing_internals(consumer=fake_consumer)
    assert "SimpleNamespace._handler._link._error" in missing and "SimpleNamespace._open" in missing
    assert "SimpleNamespace._keep_alive" not in missing


def test_the_sdk_functions_used_exist_and_a_missing_one_is_named(monkeypatch):
    assert sdk.missing_internals() == [], "the installed SDK lacks a module function the connector uses"
    monkeypatch.setattr(sdk, "MODULE_INTERNALS", ("azure.eventhub._pyamqp._decode.no_such", "no_such_module.f"))
    assert sdk.missing_internals() == ["azure.eventhub._pyamqp._decode.no_such", "no_such_module.f"]
