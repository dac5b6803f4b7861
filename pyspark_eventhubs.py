"""Lets ``spark.read.format("eventhubs")`` work with no register call.

Spark imports every top-level module whose name starts with ``pyspark_`` and registers its
``DefaultSource`` under ``DefaultSource.name()``.
"""

from eventhubs_spark.source import EventHubsDataSource as DefaultSource

__all__ = ["DefaultSource"]
