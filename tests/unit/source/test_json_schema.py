"""Unit tests of JSON schema inference's sampling (:func:`eventhubs_spark.source.json_schema.infer`): the ranges
are read several at once and within a time budget, with the reads faked (no emulator); end to end in
``tests/integration/spark/test_json_spark.py``."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pyarrow as pa
import pytest

from eventhubs_spark.interprocess.task_ranges import ReceiverConfig
from eventhubs_spark.options.typed import read_options
from eventhubs_spark.positions.partition_catalog import PartitionInfo
from eventhubs_spark.process import runtime
from eventhubs_spark.source import json_schema

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=a2V5;EntityPath=hub"


class _Planner:
    config = ReceiverConfig(exclusive=True, owner_level=0)  # the query's own receivers, as Planner makes them

    def __init__(self, partitions: int) -> None:
        self.infos = {str(p): PartitionInfo(str(p), 0, 99, "0", None, False) for p in range(partitions)}

    def partition_infos(self) -> dict[str, PartitionInfo]:
        return self.infos

    def configured_starts(self, infos: Any) -> dict[str, int]:
        return {p: 0 for p in infos}

    def resolve(self, infos: Any, starts: dict[str, int]) -> dict[str, int]:
        return starts


class _Reads:
    """Each partition's range read back as documents with a field named after the partition; counts the reads
    running at once; partitions in ``held`` wait for ``release``."""

    def __init__(self, held: frozenset[str] = frozenset()) -> None:
        self.lock = threading.Lock()
        self.running = self.most = 0
        self.read: list[str] = []
        self.requests: list[Any] = []
        self.held, self.release = held, threading.Event()

    def read_range(self, request: Any, use_service: bool, stats: dict) -> Any:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.read.append(request.partition)
            self.requests.append(request)
        try:
            if request.partition in self.held:
                self.release.wait(10)
            time.sleep(0.02)  # a link attach and a round trip
            docs = [json.dumps({"id": i, f"p{request.partition}": "x"}) for i in range(request.start, request.end)]
            yield pa.record_batch([pa.array([d.encode() for d in docs], pa.binary())], ["body"])
        finally:
            with self.lock:
                self.running -= 1


@pytest.fixture
def reads(monkeypatch):
    fake = _Reads()

    class _Runtime:
        read = staticmethod(lambda request, use_service, stats: fake.read_range(request, use_service, stats))

    monkeypatch.setattr(runtime, "current", lambda: _Runtime())
    return fake


def _options(sample: int = 320, start: str | None = '{"seqNo": 0}', mode: str = "batch") -> Any:
    given = {"eventhubs.startingPosition": start} if start else {}
    return read_options({"eventhubs.connectionString": CONN, "eventhubs.json.schemaLocation": "/tmp/unused",
                         "eventhubs.json.sampleEvents": str(sample), **given}, mode)  # fmt: skip


def test_partitions_are_sampled_several_at_once_and_every_partitions_fields_are_in_the_schema(reads):
    schema = json_schema.infer(_Planner(32), _options())
    assert sorted(reads.read, key=int) == [str(p) for p in range(32)], "every partition sampled once"
    assert reads.most > 1, "the ranges were read one after another"
    assert reads.most <= json_schema.SAMPLE_READERS
    assert {f.name for f in schema} == {"id"} | {f"p{p}" for p in range(32)}
    assert [f.name for f in schema][1:4] == ["p0", "p1", "p2"], "merged in partition order, whatever ended first"


def test_partitions_not_begun_within_the_budget_are_left_out_and_said(reads, caplog):
    reads.held = frozenset(str(p) for p in range(json_schema.SAMPLE_READERS))  # every reader busy past the budget
    threading.Timer(2.0, reads.release.set).start()  # well past the budget, even on a loaded machine
    schema = json_schema.infer(_Planner(40), _options(400), budget=1.0)
    assert len(reads.read) == json_schema.SAMPLE_READERS, "the partitions left waiting were not begun"
    assert {f.name for f in schema} == {"id"} | {f"p{p}" for p in range(json_schema.SAMPLE_READERS)}
    said = [r.getMessage() for r in caplog.records if "sampled" in r.getMessage()]
    assert said == [
        f"eventhubs.json: sampled {json_schema.SAMPLE_READERS} of 40 ranges within 1 s; the schema "
        "is inferred from those (give eventhubs.json.schema to read with a schema of your own)"
    ], said


@pytest.mark.parametrize("mode", ["stream", "batch"])
def test_without_a_starting_position_each_partition_is_sampled_at_both_ends(reads, mode):
    """Spark does not tell a source at .load() whether the DataFrame is a stream (it starts at the end) or a batch
    read (at the start of the stream): each partition is sampled at both, half each, so the fields of its first
    events are in the schema as well as its newest's (a batch read of earthquakes then films had only the films')."""
    planner = _Planner(2)
    planner.infos = {p: PartitionInfo(p, 0, 9_999, "0", None, False) for p in ("0", "1")}
    json_schema.infer(planner, _options(sample=200, start=None, mode=mode))
    ranges = sorted((r.partition, r.start, r.end) for r in reads.requests)
    assert ranges == [("0", 0, 50), ("0", 9_950, 10_000), ("1", 0, 50), ("1", 9_950, 10_000)]


def test_a_partition_of_few_events_is_sampled_once_whatever_the_ends():
    info = PartitionInfo("0", 5, 10, "0", None, False)  # events 5..10
    assert json_schema._sample_ranges(info, 0, 100, both_ends=True) == [(5, 11)]
    assert json_schema._sample_ranges(info, 8, 100, both_ends=False) == [(8, 11)]
    assert json_schema._sample_ranges(info, 11, 4, both_ends=False) == [(7, 11)]  # nothing new: the newest stand in


def test_the_sample_reads_with_the_querys_own_receivers(reads):
    """An owner-level receiver the pool kept from a read a moment ago refused a sampler without an owner level
    (ReceiverDisconnectedError at .load()); the sampler opens receivers as the query's reads do, taking the partition
    from an idle one as they do."""
    json_schema.infer(_Planner(2), _options())
    assert {r.config.exclusive for r in reads.requests} == {True}
    assert {r.config.owner_level for r in reads.requests} == {_Planner.config.owner_level}
