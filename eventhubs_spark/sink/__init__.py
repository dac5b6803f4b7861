"""The sink: ``df.writeStream.format("eventhubs")`` and ``df.write.format("eventhubs")``.

Rows become events packed into batches up to the hub's maximum message size, grouped by target:
an explicit ``partitionId``, a ``partitionKey`` (the service routes each key to one partition), or
neither, in which case the connector deals the events over the partitions in turn itself (runs of
at least :data:`DEAL_RUN` events, as a partition-less send of the SDKs puts a batch in one partition), so
it can count events per partition. Targets are sent concurrently through a producer pooled per
executor process.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from eventhubs_spark.sink.exactly_once import ExactlyOnce
from eventhubs_spark.sink.layout import SinkLayout, layout_for
from eventhubs_spark.sink.sender import EventSender, SendReport, write_task
from eventhubs_spark.sink.writers import (
    EventHubsBatchWriter,
    EventHubsStreamArrowWriter,
    EventHubsStreamRowWriter,
    batch_writer,
    stream_writer,
)

__all__ = [
    "EventHubsBatchWriter",
    "EventHubsStreamArrowWriter",
    "EventHubsStreamRowWriter",
    "EventSender",
    "ExactlyOnce",
    "SendReport",
    "SinkLayout",
    "batch_writer",
    "layout_for",
    "stream_writer",
    "write_task",
]
