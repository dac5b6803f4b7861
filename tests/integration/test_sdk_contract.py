"""The SDK internals the connector uses (all in eventhubs_spark.client.sdk) exist on the installed SDK.

Run on live objects: a consumer that has received once (its connection, link and transport exist
only then), a consumer client, and the async producer client the management link is built from.
A new azure-eventhub release that drops or renames one fails here, naming it.
"""

from __future__ import annotations

from types import SimpleNamespace

from eventhubs_spark.client import sdk
from eventhubs_spark.client.settings import parse_connection_string

from .sdk_helpers import send


def test_the_installed_sdk_has_every_internal_the_connector_uses(eventhub):
    send(eventhub.connection_string, ["x"], partition_id="0")
    settings = parse_connection_string(eventhub.connection_string)
    client = settings.consumer(consumer_group="$Default")
    got: list = []
    consumer = sdk.create_consumer(client, "$Default", "0", "-1", got.extend, inclusive=True, owner_level=None,
                                   prefetch=10)  # fmt: skip
    try:
        assert sdk.deliver_raw(consumer), "the pyamqp transport hands out raw messages"
        sdk.bounded_reads(consumer, 10)
        for _ in range(50):
            sdk.receive_frames(consumer, 10, 10)
            if got:
                break
        assert got, "received through the internals"
        assert sdk.missing_internals(consumer=consumer, client=client) == []
        producer = settings.async_producer()
        assert sdk.missing_internals(async_client=producer) == []
    finally:
        consumer.close()
        client.close()


def test_a_missing_internal_is_named():
    fake_consumer = SimpleNamespace(_prefetch=1, _handler=SimpleNamespace(_link=SimpleNamespace()))
    missing = sdk.missing_internals(consumer=fake_consumer)
    assert "SimpleNamespace._handler._link._error" in missing and "SimpleNamespace._create_handler" in missing
    assert "SimpleNamespace._prefetch" not in missing
