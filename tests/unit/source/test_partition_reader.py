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


def _events(partition: str, start: int, end: int):
    """Record batches of the source's schema for ``[start, end)`` of a partition, 5 rows each."""
    import pyarrow as pa

    from eventhubs_spark.codec.schema import ARROW_SCHEMA

    for first in range(start, end, 5):
        seqs = list(range(first, min(end, first + 5)))
        columns = []
        for field in ARROW_SCHEMA:
            if field.name == "partition":
                columns.append(pa.array([partition] * len(seqs), field.type))
            elif field.name == "sequenceNumber":
                columns.append(pa.array(seqs, field.type))
            elif field.name == "offset":
                columns.append(pa.array([str(s) for s in seqs], field.type))
            else:
                columns.append(pa.nulls(len(seqs), field.type))
        yield pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


class _Reads:
    """A runtime whose reads take longer the earlier the range (so later ones end first), counting reads at once;
    a range of partition ``fail`` fails, one of ``empty`` has no event left."""

    def __init__(self, fail: str | None = None, empty: str | None = None) -> None:
        import threading

        self.empty = empty  # a partition whose ranges have no event left to read

        self.lock = threading.Lock()
        self.running = self.most = 0
        self.begun: list[str] = []
        self.fail = fail
        self._readers = None

    def range_readers(self):
        from concurrent.futures import ThreadPoolExecutor

        if self._readers is None:
            self._readers = ThreadPoolExecutor(3)
        return self._readers

    def read(self, request, use_service, stats, needed=None):
        import time

        from eventhubs_spark.errors import EventHubsError

        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.begun.append(request.partition)
        try:
            time.sleep(0.05 / (1 + int(request.partition)))
            if request.partition == self.fail:
                raise EventHubsError(f"partition {request.partition} cannot be read")
            if request.partition != self.empty:
                yield from _events(request.partition, request.start, request.end)
        finally:
            with self.lock:
                self.running -= 1


def _packed(partitions: int, events: int):
    from eventhubs_spark.interprocess.task_ranges import RangeRequest, ReceiverConfig
    from eventhubs_spark.options import read_options
    from eventhubs_spark.source import EventHubsPartition

    conn = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=a2V5;EntityPath=hub"
    settings = read_options({"eventhubs.connectionString": conn}, "batch").settings
    requests = tuple(RangeRequest(ReceiverConfig(), str(p), 100, 100 + events, True, 0.0, settings=settings)
                     for p in range(partitions))  # fmt: skip
    return EventHubsPartition(requests, service=False)


def test_a_packed_tasks_ranges_are_read_at_once_and_handed_over_in_order_joined(monkeypatch, in_spark_task):
    """Several ranges read at once (the later, quicker ones ahead), handed to Spark in the plan's order, each range's
    events in sequence order, in batches joined up to JOIN_ROWS: the same rows in the same order on every run."""
    from eventhubs_spark.process import runtime
    from eventhubs_spark.source import partition_reader

    fake = _Reads()
    monkeypatch.setattr(runtime, "current", lambda: fake)
    monkeypatch.setattr(runtime, "RANGE_READERS", 3)
    monkeypatch.setattr(partition_reader, "JOIN_ROWS", 40)
    batches = list(partition_reader.read_partition(_packed(8, 12)))
    rows = [(b.column("partition")[i].as_py(), b.column("sequenceNumber")[i].as_py())
            for b in batches for i in range(b.num_rows)]  # fmt: skip
    assert rows == [(str(p), s) for p in range(8) for s in range(100, 112)]
    assert fake.most > 1, "the ranges were read one after another"
    assert fake.most <= 3
    assert all(b.num_rows <= 40 for b in batches) and len(batches) == 3, [b.num_rows for b in batches]


def test_a_packed_tasks_failing_range_fails_it_in_its_turn(monkeypatch, in_spark_task):
    """Its error is the task's, as itself, once the ranges before it are through; ranges further on than the readers
    reach ahead are not begun."""
    import pytest

    from eventhubs_spark.errors import EventHubsError
    from eventhubs_spark.process import runtime
    from eventhubs_spark.source import partition_reader

    fake = _Reads(fail="1")
    monkeypatch.setattr(runtime, "current", lambda: fake)
    monkeypatch.setattr(runtime, "RANGE_READERS", 2)
    monkeypatch.setattr(partition_reader, "JOIN_ROWS", 5)
    with pytest.raises(EventHubsError, match="partition 1 cannot be read"):
        list(partition_reader.read_partition(_packed(10, 5)))
    assert set(fake.begun[:2]) == {"0", "1"} and len(fake.begun) <= 4, fake.begun


def test_what_a_task_read_is_told_to_the_driver_before_its_last_batch_and_no_answer_is_awaited(
    monkeypatch, in_spark_task
):
    """The report of each range's end is sent while Spark still has the last batch to take, and the task ends
    without waiting for the driver (which waits at its next trigger for reports still on their way); a range with
    no event left to read is reported by its end alone; a task stopped early sends nothing."""
    import dataclasses

    from eventhubs_spark.interprocess import driver_channel
    from eventhubs_spark.interprocess.task_ranges import DriverAddress, new_query_key
    from eventhubs_spark.process import runtime
    from eventhubs_spark.source import EventHubsPartition, partition_reader

    steps: list[object] = []

    def tell(driver, query, message, timeout=3.0):
        steps.append(("told", [entry[:2] if len(entry) > 2 else ["empty", *entry] for entry in message["ranges"]]))
        return True

    monkeypatch.setattr(driver_channel, "tell_kept", tell)
    monkeypatch.setattr(runtime, "current", lambda: _Reads(empty="1"))
    monkeypatch.setattr(runtime, "RANGE_READERS", 2)
    where, query = DriverAddress(("127.0.0.1",), 9), new_query_key()
    for partitions in (1, 3):  # one range, and a packed task (whose partition 1 has nothing left)
        packed = _packed(partitions, 12)
        task = EventHubsPartition(tuple(dataclasses.replace(r, driver=where, query=query) for r in packed.requests))
        steps.clear()
        for batch in partition_reader.read_partition(task):
            steps.append(batch.num_rows)
        told = [["empty", str(p), 112] if p == 1 else [str(p), 112] for p in range(partitions)]
        assert steps[-2:] == [("told", told), steps[-1]] and isinstance(steps[-1], int), steps
        assert sum(n for n in steps if isinstance(n, int)) == 12 * (1 if partitions == 1 else partitions - 1)
        assert len([s for s in steps if isinstance(s, tuple)]) == 1
    one = EventHubsPartition(tuple(dataclasses.replace(r, driver=where, query=query) for r in _packed(1, 12).requests))
    steps.clear()
    reading = partition_reader.read_partition(one)
    next(reading)  # the first of its three batches
    reading.close()
    assert steps == [], "a task stopped early reported a read it did not hand over"
