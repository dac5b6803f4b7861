"""How far behind a stream is, per partition, each trigger: in events and in time, and which partitions stall.

Spark's Kafka source answers "how far behind are we?" in every progress report; a Python source gets no
metrics hook on Spark 4.0 to 4.3, so the stream's driver works the figures out itself at each trigger
(:class:`LagTracker`) and gives them where a user can see them: a log line, the progress's
``latestOffset`` on Spark 4.2+ (the only field of a progress report a Python source fills), and a small
JSON file per trigger (:class:`LagFiles`) that ``eventhubs-spark lag`` and the notebooks read.
"""

from eventhubs_spark.lag.files import KEEP_FILES, LagFiles, LocalFolder, SparkCommit, last_commit, stored_sources
from eventhubs_spark.lag.tracker import LagReport, LagTracker, PartitionLag

__all__ = [
    "KEEP_FILES",
    "LagFiles",
    "LagReport",
    "LagTracker",
    "LocalFolder",
    "PartitionLag",
    "SparkCommit",
    "last_commit",
    "stored_sources",
]
