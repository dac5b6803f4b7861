"""Azure Event Hubs for Spark 4, in pure Python on Spark's Python Data Source API.

``spark.readStream.format("eventhubs")`` and ``spark.read.format("eventhubs")`` work once the package
is installed (through the ``pyspark_eventhubs`` module Spark discovers); :func:`register` does the
same explicitly, e.g. for Spark Connect, where the class is shipped to the server.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def register(spark: Any) -> None:
    """Register the ``eventhubs`` data source with ``spark`` (classic or Spark Connect)."""
    from .source import EventHubsDataSource

    spark.dataSource.register(EventHubsDataSource)
