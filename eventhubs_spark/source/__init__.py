"""The Spark data source ``eventhubs``: the provider, the stream and batch readers, the planner, the partition reader.

As Kafka's source: :mod:`~eventhubs_spark.source.provider` is what Spark registers (``KafkaSourceProvider``),
:mod:`~eventhubs_spark.source.stream_reader` the micro-batch stream (``KafkaMicroBatchStream``),
:mod:`~eventhubs_spark.source.batch_reader` the batch (``KafkaBatch``), :mod:`~eventhubs_spark.source.planner` the
offset ranges' planning both share, and :mod:`~eventhubs_spark.source.partition_reader` what a task runs
(``KafkaBatchPartitionReader``).
"""

from __future__ import annotations

from eventhubs_spark.source.batch_reader import EventHubsBatchReader
from eventhubs_spark.source.partition_reader import EventHubsPartition, read_partition, slow_path_taken
from eventhubs_spark.source.provider import EventHubsDataSource
from eventhubs_spark.source.stream_reader import HAS_ADMISSION_CONTROL, LAG_KEY, UNHEARD_AFTER, EventHubsStreamReader

__all__ = [
    "HAS_ADMISSION_CONTROL",
    "LAG_KEY",
    "UNHEARD_AFTER",
    "EventHubsBatchReader",
    "EventHubsDataSource",
    "EventHubsPartition",
    "EventHubsStreamReader",
    "read_partition",
    "slow_path_taken",
]
