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

from eventhubs_spark.options.typed import read_options
from eventhubs_spark.positions.partition_catalog import PartitionInfo
from eventhubs_spark.process import runtime
from eventhubs_spark.source import json_schema

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=a2V5;EntityPath=hub"


class _Planner:
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
        self.held, self.release = held, threading.Event()

    def read_range(self, request: Any, use_service: bool, stats: dict) -> Any:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.read.append(request.partition)
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


def _options(sample: int = 320) -> Any:
    return read_options({"eventhubs.connectionString": CONN, "eventhubs.json.schemaLocation": "/tmp/unused",
                         "eventhubs.json.sampleEvents": str(sample)}, "batch")  # fmt: skip


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
        f"eventhubs.json: sampled {json_schema.SAMPLE_READERS} of 40 partitions within 1 s; the schema "
        "is inferred from those (give eventhubs.json.schema to read with a schema of your own)"
    ], said
