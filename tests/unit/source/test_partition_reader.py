"""Unit tests of :mod:`eventhubs_spark.source.partition_reader`."""

from __future__ import annotations


def test_a_workers_second_task_freezes_what_the_worker_holds_out_of_the_collections(monkeypatch, in_spark_task):
    import gc

    from eventhubs_spark.process import runtime
    from eventhubs_spark.source import EventHubsPartition, read_partition

    monkeypatch.setattr(runtime, "_tasks_started", 0)
    monkeypatch.delenv(runtime.GC_FREEZE_ENV, raising=False)
    gc.unfreeze()
    try:
        list(read_partition(EventHubsPartition(())))
        assert gc.get_freeze_count() == 0  # the first task may still import: nothing yet
        list(read_partition(EventHubsPartition(())))
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # pytest, pyspark, pyarrow and the connector's modules: all the process holds
        gc.collect()
        assert gc.get_count()[0] < 1_000  # what the collector still walks is what was made since
        list(read_partition(EventHubsPartition(())))
        assert gc.get_freeze_count() <= frozen  # once per worker: later tasks freeze nothing more
    finally:
        gc.unfreeze()
