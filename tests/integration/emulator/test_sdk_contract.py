"""The SDK internals the connector uses (all in eventhubs_spark.amqp.sdk) exist on the installed SDK.

Run on live objects: a consumer the engine opened on its shared connection (with the frame tap on it)
after it received, a consumer client, and the async producer client the management link is built from.
A new azure-eventhub release that drops or renames one fails here, naming it.
"""

from __future__ import annotations

from types import SimpleNamespace

from azure.eventhub import EventData

from eventhubs_spark.amqp import sdk
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.executor.partition_receiver import PartitionReceiver
from eventhubs_spark.executor.shared_producer import SharedProducer
from eventhubs_spark.interprocess.task_ranges import RangeResult, ReceiverConfig
from eventhubs_spark.process.runtime import current
from tests.integration.sdk_helpers import send


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
        sync_producer = settings.producer(retry_total=0)
        try:
            batch = sync_producer.create_batch(partition_id="0")
            assert sdk.missing_internals(producer=sync_producer, batch=batch) == []
            batch.add(EventData("once"))
            sdk.send_once(sync_producer, batch, 30.0)  # the sink's send, through those internals
        finally:
            sync_producer.close()
        assert eventhub.emulator.partition_properties(eventhub.name, 0)["last_enqueued_sequence_number"] == 1
        shared = SharedProducer(settings, lanes=1)  # the sink's: every partition's link on one connection
        try:
            for partition in ("0", "1"):
                batch = shared.create_batch(partition_id=partition)
                batch.add(EventData("shared"))
                shared.send(batch, 30.0)
            client = shared._lanes[0].client
            assert sdk.missing_internals(producer=client, partition_producer=client._producers["1"]) == []
            assert shared.connections() == 1
        finally:
            shared.close()
        assert eventhub.emulator.partition_properties(eventhub.name, 1)["last_enqueued_sequence_number"] == 0
    finally:
        receiver.close()


def test_a_missing_internal_is_named():
    fake_consumer = SimpleNamespace(_keep_alive=1, _handler=SimpleNamespace(_link=SimpleNamespace()))
    missing = sdk.missing_internals(consumer=fake_consumer)
    assert "SimpleNamespace._handler._link._error" in missing and "SimpleNamespace._open" in missing
    assert "SimpleNamespace._keep_alive" not in missing


def test_the_sdk_functions_used_exist_and_a_missing_one_is_named(monkeypatch):
    assert sdk.missing_internals() == [], "the installed SDK lacks a module function the connector uses"
    missing = ("azure.eventhub._pyamqp._decode.no_such", "no_such_module.f")
    monkeypatch.setattr(sdk.contract, "MODULE_INTERNALS", missing)
    assert sdk.missing_internals() == ["azure.eventhub._pyamqp._decode.no_such", "no_such_module.f"]


def test_websocket_client_has_every_private_field_the_frame_reader_uses(eventhub):
    """Over AMQP over WebSockets the frame tap reads websocket-client's own frame buffer (pinned below 1.10 in
    pyproject.toml): a release that renames one of those fields fails here, naming it."""
    import websocket

    from eventhubs_spark.options import read_options
    from tests.integration.network_helpers import network_options

    send(eventhub.connection_string, ["x"], partition_id="0")
    settings = read_options(network_options(eventhub, "websockets"), "batch").settings
    receiver = PartitionReceiver(settings, ReceiverConfig("$Default", 10, 10.0, False), "0", current().connections)
    try:
        got = [seq for chunk in receiver.read_range(0, 1, True, RangeResult()) for seq in chunk.seqs]
        assert got == [0]
        consumer = receiver._link.consumer  # type: ignore[union-attr]
        transport = consumer._handler._connection._transport
        assert sdk.websocket_of(transport) is not None, "the consumer reads AMQP over WebSockets"
        assert sdk.missing_internals(consumer=consumer) == [], websocket.__version__
    finally:
        receiver.close()
    # a websocket-client whose WebSocket lacks one of them (here ``pong``) is named
    ws = SimpleNamespace(sock=object(), frame_buffer=transport.sock.frame_buffer, cont_frame=transport.sock.cont_frame)
    older = SimpleNamespace(_handler=SimpleNamespace(_connection=SimpleNamespace(_transport=SimpleNamespace(sock=ws))))
    assert "SimpleNamespace._handler._connection._transport.sock.pong" in sdk.missing_internals(consumer=older)
