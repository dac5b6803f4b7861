"""The executor's fast path: events decoded from the wire by the frame tap make the same batch as the SDK's
EventData of the same events (every body type, properties, system properties, a partition key)."""

from __future__ import annotations

import uuid

from azure.eventhub import EventData, EventHubProducerClient
from azure.eventhub.amqp import AmqpAnnotatedMessage, AmqpMessageProperties

from eventhubs_spark.amqp.messages import RawEvents
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.codec.columns import events_to_batch
from eventhubs_spark.codec.layout import decode_spans, events_batch
from eventhubs_spark.interprocess.task_ranges import RangeResult, ReceiverConfig
from eventhubs_spark.process.runtime import current
from tests.integration.sdk_helpers import receive


def test_raw_messages_and_event_data_make_the_same_batch(eventhub):
    plain = EventData(b"\x00binary\xff")
    rich = EventData("text body")
    rich.properties = {"k": "v", "n": 7, "b": b"raw", "f": 1.5, "flag": True}
    rich.message_id = "id-1"
    rich.content_type = "application/json"
    rich.correlation_id = uuid.UUID(int=7)
    value = AmqpAnnotatedMessage(
        value_body={"a": [1, 2]}, annotations={}, properties=AmqpMessageProperties(subject="s")
    )
    sequence = AmqpAnnotatedMessage(sequence_body=[[1, "x"]], annotations={})
    multi = AmqpAnnotatedMessage(data_body=[b"part1-", b"part2"], annotations={})
    with EventHubProducerClient.from_connection_string(eventhub.connection_string) as producer:
        batch = producer.create_batch(partition_key="key-1")
        for event in (plain, rich, value, sequence, multi):
            batch.add(event)
        producer.send_batch(batch)
    sdk_events = sorted(receive(eventhub.connection_string, 5, starting_position="-1"), key=lambda e: e.sequence_number)
    assert len(sdk_events) == 5
    emulator = eventhub.emulator
    (pid,) = [str(p) for p in range(4) if not emulator.partition_properties(eventhub.name, p)["is_partition_empty"]]
    settings = parse_connection_string(eventhub.connection_string)
    config = ReceiverConfig(consumer_group="$Default", prefetch=50, receiver_timeout=10.0, exclusive=False)
    receiver = current().pool.acquire(settings, config, pid, 0, retry=False)
    try:
        got = RawEvents()
        for chunk in receiver.read_range(0, 5, True, RangeResult()):
            got.extend(chunk)
    finally:
        current().pool.release(receiver, True)
    # a task's way (a chunk this small is decoded message by message), and column by column
    fast_batch, fallbacks = events_batch(got, pid)
    assert fallbacks == 2, "the value and sequence bodies were left to the SDK's decoder, the rest not"
    columnwise, fallbacks = decode_spans(*got.spans(), pid, min_rows=0)
    assert fallbacks == 2
    fast = fast_batch.to_pylist()
    reference = events_to_batch(sdk_events, pid).to_pylist()
    for row in fast + reference:  # map order is not part of the data
        row["properties"] = sorted(row["properties"])
        row["systemProperties"] = sorted(row["systemProperties"])
    assert fast == reference
    assert columnwise.to_pylist() == fast_batch.to_pylist()
    assert fast[1]["partitionKey"] == "key-1" and dict(fast[1]["properties"])["n"] == "7"
    assert fast[4]["body"] == b"part1-part2"
