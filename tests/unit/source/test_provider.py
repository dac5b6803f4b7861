"""Unit tests of :mod:`eventhubs_spark.source.provider`."""

from __future__ import annotations

import pickle

from eventhubs_spark.process.runtime import current
from tests.unit.support.reader import CONN


def test_every_reader_and_writer_pickles_after_the_process_runtime_is_in_use():
    """Spark pickles readers and writers to executors (and Connect between processes); none may hold the runtime."""
    from pyspark import cloudpickle
    from pyspark.sql.types import StringType, StructField, StructType

    from eventhubs_spark.source import EventHubsDataSource

    assert current().producers is not None  # the runtime exists, with its locks, before the readers are made
    source = EventHubsDataSource({"eventhubs.connectionString": CONN})
    body = StructType([StructField("body", StringType())])
    made = {
        "batch reader": source.reader(source.schema()),
        "stream reader": source.streamReader(source.schema()),
        "batch writer": source.writer(body, False),
        "stream writer": source.streamWriter(body, False),
    }
    from eventhubs_spark.source.partition_reader import TaskReader

    for name, obj in made.items():
        copy = pickle.loads(cloudpickle.dumps(obj))
        # a reader is pickled only for its tasks: they get its read, not its planning
        assert type(copy) is (TaskReader if "reader" in name else type(obj)), name
    reader = made["stream reader"]
    copy = pickle.loads(cloudpickle.dumps(reader.read)).__self__
    assert type(copy) is TaskReader and copy.columns == reader.columns and not hasattr(copy, "planner")
    assert len(cloudpickle.dumps(reader.read)) < 1000
