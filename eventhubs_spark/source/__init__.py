"""The Spark data source ``eventhubs``: the provider, the stream and batch readers, the planner, the partition reader.

As Kafka's source: :mod:`~eventhubs_spark.source.provider` is what Spark registers (``KafkaSourceProvider``),
:mod:`~eventhubs_spark.source.stream_reader` the micro-batch stream (``KafkaMicroBatchStream``),
:mod:`~eventhubs_spark.source.batch_reader` the batch (``KafkaBatch``), :mod:`~eventhubs_spark.source.planner` the
offset ranges' planning both share, and :mod:`~eventhubs_spark.source.partition_reader` what a task runs
(``KafkaBatchPartitionReader``).
"""

from __future__ import annotations

import importlib
from typing import Any

# Names resolved on first use (PEP 562): Spark's Python worker answers .load() by importing the provider, which must
# not pull the readers' machinery in before a query runs (bench load).
_WHERE = {
    "EventHubsBatchReader": "batch_reader",
    "EventHubsPartition": "partition_reader",
    "read_partition": "partition_reader",
    "slow_path_taken": "partition_reader",
    "EventHubsDataSource": "provider",
    "HAS_ADMISSION_CONTROL": "stream_reader",
    "LAG_KEY": "stream_reader",
    "UNHEARD_AFTER": "stream_reader",
    "EventHubsStreamReader": "stream_reader",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
