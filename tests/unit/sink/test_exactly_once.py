"""Unit tests of :mod:`eventhubs_spark.exactly_once` and the sink's exactly-once path: over generated histories of
attempts that die part-way, batches run again and commits, every row is stored once; an unanswered send is settled
by reading back, never sent blindly again."""

from __future__ import annotations

import re
import threading
import types
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventhubs_spark.errors import SinkError
from eventhubs_spark.positions.partition_catalog import PartitionInfo
from eventhubs_spark.sink.exactly_once import STAMP, TaskStamp, WriteGuard, stamped_rows
from eventhubs_spark.sink.write_fences import WriteFences

_PROPERTIES = pa.map_(pa.string(), pa.string())


class Hub:
    """Partitions of stamped events in memory, as the guard asks about them."""

    def __init__(self, partitions: int) -> None:
        self.events: dict[str, list[str | None]] = {str(p): [] for p in range(partitions)}
        self.reads = 0
        self._lock = threading.Lock()  # a read back reads partitions from several threads

    def store(self, partition: str, stamp: str | None) -> None:
        self.events[partition].append(stamp)

    def partition_ids(self) -> list[str]:
        return list(self.events)

    def properties(self, pids: list[str]) -> dict[str, PartitionInfo]:
        return {p: PartitionInfo(p, 0, len(self.events[p]) - 1, "0", None, not self.events[p]) for p in pids}

    def read(self, pid: str, start: int, end: int) -> list[pa.RecordBatch]:
        with self._lock:
            self.reads += end - start
        rows = [[(STAMP, s)] if s is not None else [] for s in self.events[pid][start:end]]
        return [pa.RecordBatch.from_arrays([pa.array(rows, _PROPERTIES)], ["properties"])]

    def stamps(self) -> list[str]:
        return [s for events in self.events.values() for s in events if s is not None]


def guard(hub: Hub, fences: WriteFences, batch: int, partition: int, stream: bool = True) -> WriteGuard:
    return WriteGuard(fences, TaskStamp("q1", batch, partition), stream, hub.partition_ids, hub.properties, hub.read)


def test_stamps_are_found_by_their_task_prefix_only():
    hub = Hub(1)
    for stamp in ["q1/3/1/0/aa", "q1/3/10/5/bb", "q1/3/1/7/cc", None, "q2/3/1/1/dd", "q1/3/1/12/ee"]:
        hub.store("0", stamp)
    assert stamped_rows(hub.read("0", 0, 6), "q1/3/1/") == {0: 0xAA, 7: 0xCC, 12: 0xEE}
    assert TaskStamp("q1", 3, 1).of(7, "x") == "q1/3/1/7/8cdc1683"  # the body's CRC-32


def test_a_read_back_reads_the_partitions_at_once(tmp_path):
    """A retried task of a round-robin write finds its rows in every partition: it reads them at once, not one
    link after another (1,024 in turn on a Dedicated hub before it sent a row), and merges what it finds."""
    hub = Hub(4)
    for p in range(4):
        hub.store(str(p), f"q1/0/2/{p}/{p:08x}")
        hub.store(str(p), f"q1/0/5/{p}/00000000")  # another task's
    together = threading.Barrier(4, timeout=10)  # broken, and the test failed, while partitions were read in turn
    plain_read = hub.read

    def read(pid: str, start: int, end: int) -> list[pa.RecordBatch]:
        together.wait()
        return plain_read(pid, start, end)

    fences = WriteFences(str(tmp_path), "q1", "ns/hub")
    first = WriteGuard(fences, TaskStamp("q1", 0, 2), True, hub.partition_ids, hub.properties, read)
    assert first.begin() == {}  # the first attempt: nothing to read back
    first.ready()  # its mark written, as before its first send
    again = WriteGuard(fences, TaskStamp("q1", 0, 2), True, hub.partition_ids, hub.properties, read)
    again.fences.write_mark(0, 2, {str(p): 0 for p in range(4)})
    assert again.begin() == {p: p for p in range(4)}
    assert again.read_back == 8


def test_fences_keep_the_latest_before_a_batch_and_drop_what_no_run_reads_again(tmp_path):
    fences = WriteFences(str(tmp_path), "q1", "ns/hub")
    assert fences.fence_before(0) is None
    fences.write_mark(0, 1, {"0": 5})
    fences.write_fence(0, {"0": 10})
    fences.write_mark(1, 0, None)
    fences.write_fence(1, {"0": 20})
    fences.write_fence(2, {"0": 30})
    assert fences.fence_before(3) == {"0": 30}
    assert fences.fence_before(2) == {"0": 20}  # batch 2 run again reads from before it
    assert fences.fence_before(1) is None  # dropped: batch 1 never runs again once batch 2 committed
    assert fences.mark(0, 1) is None and fences.mark(1, 0) is None
    # what exactly once did, added up over the batches
    fences.write_fence(3, {"0": 40}, {"sends settled": 1, "rows found stored": 5})
    fences.write_fence(4, {"0": 50}, {"sends settled": 2, "rows found stored": 0})
    assert fences.totals() == {"sends settled": 3, "rows found stored": 5, "last batch": 4}
    # another target under the same write: not this one's fence
    assert WriteFences(str(tmp_path), "q1", "ns/other").fence_before(3) is None
    with pytest.raises(ValueError, match="write id"):
        WriteFences(str(tmp_path), "../x", "ns/hub")


@st.composite
def histories(draw: Any) -> dict[str, Any]:
    partitions = draw(st.integers(1, 4))
    batches = []
    for _ in range(draw(st.integers(1, 4))):
        tasks = []
        for _ in range(draw(st.integers(1, 3))):
            rows = draw(st.integers(0, 12))
            # each row's target: a partition id, or None (the service's choice by key: any partition)
            targets = draw(st.lists(st.one_of(st.none(), st.integers(0, partitions - 1)), min_size=rows,
                                    max_size=rows))  # fmt: skip
            # attempts that die after sending this many rows, then one that finishes
            deaths = draw(st.lists(st.integers(0, rows), max_size=3))
            tasks.append((rows, targets, deaths))
        # runs of the batch that die before their commit (a driver killed, a failed stage) before the one that commits
        reruns = draw(st.integers(0, 2))
        batches.append((tasks, reruns))
    other_producer = draw(st.booleans())
    return {"partitions": partitions, "batches": batches, "other": other_producer, "seed": draw(st.integers(0, 99))}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories())
def test_any_interleaving_of_attempts_partial_sends_and_commits_stores_each_row_once(tmp_path_factory, history):
    import random

    rnd = random.Random(history["seed"])
    hub = Hub(history["partitions"])
    fences = WriteFences(str(tmp_path_factory.mktemp("fences")), "q1", "ns/hub")
    expected: set[str] = set()

    def attempt(batch: int, task: int, rows: int, targets: list[int | None], die_after: int | None) -> None:
        g = guard(hub, fences, batch, task)
        stored = g.begin()
        g.ready()  # as the sender does before its first send
        sent = 0
        for row in range(rows):
            if row in stored:
                continue
            if die_after is not None and sent >= die_after:
                return
            target = targets[row]
            partition = str(target if target is not None else rnd.randrange(history["partitions"]))
            hub.store(partition, g.stamp.of(row))
            sent += 1
            if history["other"] and rnd.random() < 0.3:  # another producer writes the same hub meanwhile
                hub.store(str(rnd.randrange(history["partitions"])), None)

    for batch, (tasks, reruns) in enumerate(history["batches"]):
        for task, (rows, _, _) in enumerate(tasks):
            expected |= {TaskStamp("q1", batch, task).of(r) for r in range(rows)}
        for run in range(reruns + 1):
            for task, (rows, targets, deaths) in enumerate(tasks):
                for die_after in deaths if run == 0 else [rnd.randint(0, rows)]:
                    attempt(batch, task, rows, targets, die_after)
                if run == reruns:
                    attempt(batch, task, rows, targets, None)
        ends = {p: info.end for p, info in hub.properties(hub.partition_ids()).items()}
        fences.write_fence(batch, ends)
    stamps = hub.stamps()
    assert len(stamps) == len(set(stamps)), "a row stored twice"
    assert set(stamps) == expected


def test_a_first_attempt_reads_nothing_and_a_retry_reads_only_from_the_fence(tmp_path):
    hub = Hub(2)
    fences = WriteFences(str(tmp_path), "q1", "ns/hub")
    for _ in range(1000):
        hub.store("0", None)  # history before the write
    fences.write_fence(4, {"0": 1000, "1": 0})
    first = guard(hub, fences, 5, 0)
    assert first.begin() == {} and hub.reads == 0
    first.ready()
    hub.store("1", first.stamp.of(0))
    hub.store("0", TaskStamp("q1", 5, 1).of(0))  # another task's row
    again = guard(hub, fences, 5, 0)
    assert again.begin() == {0: 0}
    assert hub.reads == 2  # the two events after the fence, not the thousand before it


def test_a_write_without_a_fence_records_the_ends_in_its_mark_before_its_first_send(tmp_path):
    """A df.write (or a stream's first batch) has no fence: the task asks where the hub ends while it packs its first
    events, and its first send waits for the mark that records them; a look-up that failed fails the send."""
    hub = Hub(1)
    for _ in range(50):
        hub.store("0", None)
    fences = WriteFences(str(tmp_path), "w", "ns/hub")
    asked = threading.Event()

    def properties(ids: list[str]) -> dict:
        assert asked.wait(10), "the look-up runs beside the task"
        return hub.properties(ids)

    first = WriteGuard(fences, TaskStamp("w", 0, 3), False, hub.partition_ids, properties, hub.read)
    assert first.begin() == {}, "a first attempt: nothing to skip, known before the hub is asked"
    assert fences.mark(0, 3) is None
    asked.set()
    first.ready()  # what the sender calls before its first send
    assert fences.mark(0, 3) == {"0": 50}

    def broken(ids: list[str]) -> dict:
        raise OSError("the namespace went away")

    failing = WriteGuard(fences, TaskStamp("w", 0, 4), False, hub.partition_ids, broken, hub.read)
    assert failing.begin() == {}
    with pytest.raises(OSError, match="the namespace went away"):
        failing.ready()
    assert fences.mark(0, 4) is None, "no mark: nothing was sent"
    hub.store("0", first.stamp.of(0))
    again = WriteGuard(fences, TaskStamp("w", 0, 3), False, hub.partition_ids, hub.properties, hub.read)
    assert list(again.begin()) == [0] and hub.reads == 1


class _Batch:
    def __init__(self, partition_id: str | None, partition_key: str | None) -> None:
        self.partition_id, self.partition_key = partition_id, partition_key
        self._message: list[Any] = [None] * 5 + [[]]
        self._size, self._count, self.max_size_in_bytes = 0, 0, 1 << 20


class _Client:
    """A producer whose chosen sends are stored and then go unanswered (the answer lost with its connection)."""

    def __init__(self, hub: Hub, unanswered: set[int]) -> None:
        self.hub, self.unanswered, self.sends = hub, unanswered, 0

    def create_batch(
        self, partition_id: str | None = None, partition_key: str | None = None, timeout: float = 60.0
    ) -> _Batch:
        return _Batch(partition_id, partition_key)

    def partition_ids(self, lookup: Any = None, timeout: float = 60.0) -> list[str]:
        return self.hub.partition_ids()

    def send(self, batch: _Batch, timeout: float) -> None:
        self.sends += 1
        partition = batch.partition_id or "0"
        for message in batch._message[5]:
            found = re.search(rb"eventhubs-spark-stamp.(?:.)([\w/.-]+)", message)
            self.hub.store(partition, found.group(1).decode() if found else None)
        if self.sends in self.unanswered:
            raise TimeoutError("no answer")


def sending_through(monkeypatch: Any, task: Any, hub: Hub, client: _Client, batch: str) -> tuple[Any, Any]:
    """The sink's process producer replaced by ``client`` and its guard asking ``hub``, in a task of query q9's
    batch ``batch``: the settings and layout an EventSender takes (partition ids from column 1)."""
    from eventhubs_spark import sink
    from eventhubs_spark.options import write_options
    from eventhubs_spark.sink import exactly_once

    class Pool:
        def get(self, settings: Any) -> _Client:
            return client

        def invalidate(self, settings: Any) -> None:
            pass

    class Runtime:
        producers = Pool()

    monkeypatch.setattr(sink.sender.runtime, "current", lambda: Runtime())
    properties = {"sql.streaming.queryId": "q9", "streaming.sql.batchId": batch}
    monkeypatch.setattr(task, "getLocalProperty", properties.get)

    def guard_for(settings: Any, group: str, location: str, stream: bool, write_id: Any, timeout: float,
                  partition_ids: Any) -> WriteGuard:  # fmt: skip
        stamp = exactly_once.task_stamp(stream, write_id)
        return WriteGuard(WriteFences(location, stamp.write, "ns/hub"), stamp, stream, hub.partition_ids,
                          hub.properties, hub.read)  # fmt: skip

    monkeypatch.setattr(sink.sender, "guard_for", guard_for)
    conn = "Endpoint=sb://localhost/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub"
    return write_options({"eventhubs.connectionString": conn}).settings, sink.SinkLayout(0, True, partition_id=1)


def test_an_unanswered_send_is_settled_by_reading_back_not_sent_again(monkeypatch, tmp_path, in_spark_task):
    from eventhubs_spark import sink

    hub = Hub(2)
    client = _Client(hub, unanswered={1})
    settings, layout = sending_through(monkeypatch, in_spark_task, hub, client, batch="7")
    once = sink.ExactlyOnce(str(tmp_path), True, None, "$Default")
    sender = sink.EventSender(settings, layout, 30.0, once)
    sender.add_columns([[f"b{i}" for i in range(10)], ["1"] * 10])
    sender.flush()
    # stored once, though unanswered
    assert sorted(hub.stamps()) == sorted(TaskStamp("q9", 7, 0).of(i, f"b{i}") for i in range(10))
    assert client.sends == 1 and sender.report.settled == 1 and sender.report.resent == 0
    assert sender.report.by_partition == {"1": 10}
    # the task run again (a retry): everything is found, nothing is sent
    again = sink.EventSender(settings, layout, 30.0, once)
    again.add_columns([[f"b{i}" for i in range(10)], ["1"] * 10])
    again.flush()
    assert again.report.skipped == 10 and client.sends == 1 and len(hub.stamps()) == 10


def test_a_row_whose_body_changed_between_attempts_is_sent_not_skipped(monkeypatch, tmp_path, in_spark_task):
    """A query that is not deterministic: the row at a place an earlier attempt filled has another body now. It is
    sent again and counted (at least once for it), never skipped: nothing is lost."""
    from eventhubs_spark import sink

    hub = Hub(1)
    client = _Client(hub, unanswered=set())
    settings, layout = sending_through(monkeypatch, in_spark_task, hub, client, batch="0")
    once = sink.ExactlyOnce(str(tmp_path), True, None, "$Default")
    first = sink.EventSender(settings, layout, 30.0, once)
    first.add_columns([["a", "b", "c"], ["0"] * 3])
    first.flush()
    again = sink.EventSender(settings, layout, 30.0, once)
    again.add_columns([["a", "B", "c"], ["0"] * 3])  # row 1 changed
    again.flush()
    assert (again.report.skipped, again.report.differed) == (2, 1)
    assert len(hub.stamps()) == 4 and TaskStamp("q9", 0, 0).of(1, "B") in hub.stamps()


def test_a_lost_connection_is_settled_and_a_send_that_never_answers_fails_in_the_end(monkeypatch, tmp_path,
                                                                                       in_spark_task):  # fmt: skip
    from azure.eventhub.exceptions import ConnectionLostError

    from eventhubs_spark import sink

    hub = Hub(2)

    class Lost(_Client):
        def send(self, batch: _Batch, timeout: float) -> None:
            super().send(batch, 0)
            if self.sends == 1:
                raise ConnectionLostError("the connection went away after the transfer")

    client = Lost(hub, unanswered=set())
    settings, layout = sending_through(monkeypatch, in_spark_task, hub, client, batch="3")
    once = sink.ExactlyOnce(str(tmp_path), True, None, "$Default")
    sender = sink.EventSender(settings, layout, 30.0, once)
    sender.add_columns([["a", "b"], ["0", "0"]])
    sender.flush()
    assert len(hub.stamps()) == 2 and sender.report.settled == 1  # stored by the lost send, not sent again

    class Silent(_Client):
        def send(self, batch: _Batch, timeout: float) -> None:
            self.sends += 1
            raise TimeoutError("no answer")

    silent = Silent(Hub(2), unanswered=set())
    settings, layout = sending_through(monkeypatch, in_spark_task, silent.hub, silent, batch="4")
    stuck = sink.EventSender(settings, layout, 30.0, once)
    stuck.add_columns([["a"], ["1"]])
    with pytest.raises(SinkError, match="failed 11 times in a row without an answer"):
        stuck.flush()


def _connect_error() -> Exception:
    """What the SDK raises when the connection fails under a send (a socket error, a connection closed): its
    ConnectError, which says nothing of whether the batch was written."""
    from azure.eventhub._pyamqp import error as errors
    from azure.eventhub.exceptions import ConnectError

    cause = errors.AMQPConnectionError(errors.ErrorCondition.SocketError, description="the socket closed")
    return ConnectError(str(cause), cause)


def _link_timeout() -> Exception:
    """A sending link the service detached with com.microsoft:timeout, as the SDK reports it: a ConnectError (a
    vendor condition), though the batch may have been stored before the detach."""
    from azure.eventhub._pyamqp import error as errors
    from azure.eventhub.exceptions import ConnectError

    cause = errors.AMQPLinkError(errors.ErrorCondition.LinkDetachForced, description="detached")
    cause.condition = "com.microsoft:timeout"
    return ConnectError(str(cause), cause)


def _bare_error() -> Exception:
    from azure.eventhub.exceptions import EventHubError

    return EventHubError("a failure of unknown meaning")


@pytest.mark.parametrize(
    "failure", [_connect_error, _link_timeout, _bare_error], ids=["connection-lost", "link-timeout", "bare-error"]
)
def test_a_send_whose_outcome_is_unknown_is_settled_whatever_its_error_type(monkeypatch, tmp_path, in_spark_task,
                                                                            failure):  # fmt: skip
    """A send the service stored, whose answer never came because its link or connection failed under it: the sink
    cannot tell from the error's type (the SDK says ConnectError, a bare EventHubError...) whether it was stored, so
    it asks the hub, and sends nothing twice. (Before, only a timeout, ConnectionLostError and EventDataSendError
    were settled, and these were sent again: stored twice.)"""
    from eventhubs_spark import sink

    hub = Hub(2)

    class Failing(_Client):
        def send(self, batch: _Batch, timeout: float) -> None:
            super().send(batch, 0)
            if self.sends == 1:
                raise failure()

    client = Failing(hub, unanswered=set())
    settings, layout = sending_through(monkeypatch, in_spark_task, hub, client, batch="5")
    sender = sink.EventSender(settings, layout, 30.0, sink.ExactlyOnce(str(tmp_path), True, None, "$Default"))
    sender.add_columns([["a", "b", "c"], ["1", "1", "1"]])
    sender.flush()
    assert len(hub.stamps()) == 3 and sender.report.settled == 1 and client.sends == 1


@pytest.mark.parametrize("refusal", ["busy", "unsent"])
def test_a_send_certainly_not_stored_is_sent_again_without_reading_back(monkeypatch, tmp_path, in_spark_task, refusal):
    """The namespace refused the send as busy, or it failed before anything of it was written (its link could not
    open): nothing was stored, so it is simply sent again, with no read-back."""
    from azure.eventhub._pyamqp import error as errors
    from azure.eventhub.exceptions import EventDataSendError

    from eventhubs_spark import sink
    from eventhubs_spark.amqp import conditions, sdk

    hub = Hub(2)

    class Refusing(_Client):
        def send(self, batch: _Batch, timeout: float) -> None:
            if self.sends == 0:
                self.sends += 1
                if refusal == "busy":
                    cause = errors.MessageException(errors.ErrorCondition.UnknownError, description="throttled")
                    cause.condition = conditions.SERVER_BUSY.encode()  # as pyamqp decodes it
                    raise EventDataSendError(str(cause), cause)
                error = _connect_error()
                sdk.mark_unsent(error)
                raise error
            super().send(batch, 0)

    client = Refusing(hub, unanswered=set())
    settings, layout = sending_through(monkeypatch, in_spark_task, hub, client, batch="6")
    sender = sink.EventSender(settings, layout, 30.0, sink.ExactlyOnce(str(tmp_path), True, None, "$Default"))
    sender.add_columns([["a", "b"], ["0", "0"]])
    sender.flush()
    assert len(hub.stamps()) == 2 and sender.report.settled == 0 and sender.report.read_back == 0


def test_send_once_says_a_failure_while_its_link_opens_was_before_anything_was_sent():
    """sdk.send_once: a failure while the partition's producer starts or its link opens is marked unsent;
    one from the send itself is not."""
    from azure.eventhub.exceptions import ConnectError

    from eventhubs_spark.amqp import sdk

    class Producer:
        closed, running = False, True

        def send(self, batch: Any, partition_key: Any = None, timeout: float = 0) -> None:
            raise ConnectError("lost under the send")

    class Client:
        def __init__(self, start_fails: bool) -> None:
            self._producers: dict[str, Any] = {}
            self.start_fails = start_fails

        def _start_producer(self, partition: str, timeout: float) -> None:
            if self.start_fails:
                raise ConnectError("could not open")
            self._producers[partition] = Producer()

    batch = types.SimpleNamespace(_partition_id="0")
    with pytest.raises(ConnectError) as opening:
        sdk.send_once(Client(start_fails=True), batch, 5.0)
    assert sdk.unsent(opening.value)
    with pytest.raises(ConnectError) as sending:
        sdk.send_once(Client(start_fails=False), batch, 5.0)
    assert not sdk.unsent(sending.value)


def test_a_batch_that_cannot_be_opened_on_a_dead_connection_is_opened_again(monkeypatch, tmp_path, in_spark_task):
    """A lane's first batch signs in on its connection; one fallen into a black hole fails that with "Authorization
    timeout" (the SDK's AuthenticationError, an internal error, not a refusal): the sink opens it again, and the
    write goes on instead of failing the task."""
    from azure.eventhub._pyamqp import error as errors
    from azure.eventhub.exceptions import AuthenticationError

    from eventhubs_spark import sink

    hub = Hub(1)

    class Holed(_Client):
        opened = 0

        def create_batch(
            self, partition_id: str | None = None, partition_key: str | None = None, timeout: float = 60.0
        ) -> _Batch:
            self.opened += 1
            if self.opened == 1:  # as the SDK's transport says a sign-in that timed out
                timeout = errors.AuthenticationException(errors.ErrorCondition.InternalError,
                                                         description="Authorization timeout.")  # fmt: skip
                raise AuthenticationError(str(timeout), timeout)
            return super().create_batch(partition_id, partition_key)

    client = Holed(hub, unanswered=set())
    settings, layout = sending_through(monkeypatch, in_spark_task, hub, client, batch="2")
    sender = sink.EventSender(settings, layout, 30.0, sink.ExactlyOnce(str(tmp_path), True, None, "$Default"))
    sender.add_columns([["a", "b"], ["0", "0"]])
    sender.flush()
    assert client.opened == 2 and len(hub.stamps()) == 2


def test_a_lane_whose_batch_cannot_be_opened_starts_over_on_a_new_connection(monkeypatch):
    from eventhubs_spark.amqp import sdk
    from eventhubs_spark.executor import shared_producer
    from eventhubs_spark.options import write_options

    conn = "Endpoint=sb://localhost/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub"
    producer = shared_producer.SharedProducer(write_options({"eventhubs.connectionString": conn}).settings, lanes=1)
    first = producer._lanes[0].client
    failures = [RuntimeError("Authorization timeout."), None]

    def create_batch(client: Any, shared: Any, **kwargs: Any) -> str:
        failure = failures.pop(0)
        if failure is not None:
            raise failure
        return "batch"

    monkeypatch.setattr(sdk, "create_batch", create_batch)
    with pytest.raises(RuntimeError):
        producer.create_batch("0")
    assert producer._lanes[0].client is not first  # a new client (and connection) for the next attempt
    assert producer.create_batch("0") == "batch"
    producer.close()
