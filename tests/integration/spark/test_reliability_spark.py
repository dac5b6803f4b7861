"""Reliability: faults injected with the emulator's controls, Azurite and SIGKILL; nothing lost.

Each test says what it injects and what it checks. Retention removing unread events
(``failOnDataLoss`` true and false) is ``test_reader_spark.py::test_data_loss_fails_or_continues``.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, Azurite
from tests.integration.sdk_helpers import send, wait_until
from tests.integration.spark.test_reader_spark import fill, output, run_available_now, stream

pytestmark = pytest.mark.spark


class Producer:
    """Sends small batches to random partitions on a thread until stopped; remembers every body."""

    def __init__(self, eventhub, prefix: str, partitions: int = 4, pause: float = 0.1) -> None:
        self.eventhub, self.prefix, self.partitions, self.pause = eventhub, prefix, partitions, pause
        self.sent: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rng = random.Random(11)
        n = 0
        while not self._stop.wait(self.pause):
            p = rng.randrange(self.partitions)
            bodies = [f"{self.prefix}-{p}-{n + i}" for i in range(5)]
            send(self.eventhub.connection_string, bodies, partition_id=str(p))
            self.sent += bodies
            n += 5

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(30)
        return self.sent

    def __exit__(self, *exc: object) -> None:
        self.stop()


def test_connections_dropped_in_the_middle_of_ranges(spark, eventhub, tmp_path):
    """Injects: every client connection (receivers and the driver's management link) aborted at the
    TCP level, eight times 0.7 s apart, while partitions 0 and 1 deliver slowly (1 ms an event), so
    the drops land in the middle of their ranges. Checks: the run completes and holds every event
    exactly once."""
    emulator = eventhub.emulator
    expected = fill(eventhub, {p: 2000 for p in range(4)}, "drop")
    stop = threading.Event()
    dropped: list[int] = []
    mid_range: list[bool] = []

    def dropper() -> None:
        while not stop.is_set() and not any(emulator.receiver_count(eventhub.name, p) for p in (0, 1)):
            time.sleep(0.05)
        while len(dropped) < 8 and not stop.wait(0.7):
            mid_range.append(any(emulator.receiver_count(eventhub.name, p) for p in (0, 1)))
            dropped.append(emulator.drop_connections())

    for p in (0, 1):
        emulator.slow(eventhub.name, p, 0.001)
    thread = threading.Thread(target=dropper, daemon=True)
    thread.start()
    try:
        run_available_now(spark, eventhub, tmp_path, eventhubs__startingPosition='{"offset": "-1"}',
                          eventhubs__prefetchCount="50", maxEventsPerTrigger="4000")  # fmt: skip
    finally:
        stop.set()
        thread.join(10)
        for p in (0, 1):
            emulator.slow(eventhub.name, p, 0)
    assert sum(mid_range) >= 3, f"drops while a slow partition was being read: {mid_range} ({dropped} connections)"
    got = output(spark, tmp_path)
    missing = collections.Counter(body.rsplit("-", 1)[0] for body in expected - set(got))
    assert not missing, f"missing per partition: {missing}"
    assert len(got) == len(expected), "nothing read twice"


def test_management_calls_failing_are_retried_then_fail_clearly(spark, eventhub):
    """Injects: the management node answers 503 (server busy), first for 3 calls, then for good.
    Checks: a few failures are retried away; endless ones end after eventhubs.operationTimeout with an
    error that names the option, both on the client and through a Spark read."""
    from eventhubs_spark.auth.settings import parse_connection_string
    from eventhubs_spark.errors import EventHubsTimeoutError
    from eventhubs_spark.process.runtime import current

    emulator = eventhub.emulator
    settings = parse_connection_string(eventhub.connection_string)
    try:
        emulator.fail_management_calls(3)
        infos = current().management(settings, 30.0).partition_properties(["0", "1", "2", "3"])
        assert sorted(infos) == ["0", "1", "2", "3"]
        emulator.fail_management_calls(1_000_000)
        started = time.monotonic()
        with pytest.raises(EventHubsTimeoutError, match=r"eventhubs\.operationTimeout \(2 s") as info:
            current().management(settings, 2.0).partition_properties(["0"])
        elapsed = time.monotonic() - started
        assert 1.0 <= elapsed < 15, elapsed
        attempts = int(str(info.value).split(" attempts")[0].rsplit(" ", 1)[-1])
        assert 2 <= attempts <= 15, f"backoff, not a busy loop: {attempts} attempts in {elapsed:.1f} s"
        assert "503" in str(info.value) or "busy" in str(info.value).lower()
        with pytest.raises(Exception, match=r"eventhubs\.operationTimeout"):
            (spark.read.format("eventhubs").option("eventhubs.connectionString", eventhub.connection_string)
             .option("eventhubs.operationTimeout", "3s").load().count())  # fmt: skip
    finally:
        emulator.fail_management_calls(0)


def test_an_unanswered_management_request_is_retried_before_the_deadline(eventhub):
    """Injects: the management node leaves one request unanswered (lost on the way).
    Checks: the request is tried again on a new connection after a part of eventhubs.operationTimeout,
    and succeeds within it, instead of one attempt waiting for the whole deadline and failing."""
    from eventhubs_spark.amqp.management import ManagementClient
    from eventhubs_spark.auth.settings import parse_connection_string

    emulator = eventhub.emulator
    client = ManagementClient(parse_connection_string(eventhub.connection_string), operation_timeout=9.0)
    try:
        assert client.partition_ids() == ["0", "1", "2", "3"]  # the connection is open
        emulator.ignore_management_calls(1)
        infos = client.partition_properties(["0"])
        assert infos["0"].id == "0"
    finally:
        emulator.ignore_management_calls(0)
        client.close()


def test_a_reader_with_a_higher_owner_level_takes_the_partition(spark, eventhub, tmp_path):
    """Injects: an SDK consumer with owner level 100 on partition 0 while the query reads it.
    Checks: the query fails with an error that says another reader took the partition and what to do."""
    from azure.eventhub import EventHubConsumerClient

    fill(eventhub, {0: 10})
    query = stream(spark, eventhub, tmp_path, {"processingTime": "500 milliseconds"},
                   eventhubs__startingPosition='{"offset": "-1"}')  # fmt: skip
    client = EventHubConsumerClient.from_connection_string(eventhub.connection_string, consumer_group="$Default")
    seen: list[str] = []
    try:
        wait_until(lambda: len(output(spark, tmp_path)) >= 10, timeout=90, message="the first events")
        thread = threading.Thread(
            target=client.receive,
            kwargs={
                "on_event": lambda ctx, e: seen.append(e.body_as_str()),
                "partition_id": "0",
                "owner_level": 100,
                "starting_position": "-1",
            },
            daemon=True,
        )
        thread.start()
        wait_until(lambda: len(seen) >= 10, timeout=60, message="the other reader's events")
        send(eventhub.connection_string, [f"late-{i}" for i in range(5)], partition_id="0")
        with pytest.raises(Exception, match="STREAM_FAILED") as info:  # awaitTermination raises the failure
            query.awaitTermination(120)
        error = str(info.value)
        assert "owner level (epoch) took this partition" in error
        assert "partition 0" in error and "Give each query its own consumer group" in error
    finally:
        client.close()
        if query.isActive:
            query.stop()


@pytest.mark.azurite
def test_the_blob_service_down_and_back_while_batches_commit(spark, eventhub, tmp_path):
    """Injects: Azurite (the checkpoint store) stopped for 6 s and started again while the query runs.
    Checks: the query goes on reading through the outage, and the mirror catches up to its progress."""
    from eventhubs_spark.checkpoints.blob import BlobCheckpointStore

    store_service = Azurite()
    query = None
    try:
        query = stream(
            spark, eventhub, tmp_path, {"processingTime": "500 milliseconds"},
            eventhubs__startingPosition='{"offset": "-1"}',
            eventhubs__checkpointStore__connectionString=store_service.connection_string,
            eventhubs__checkpointStore__container="outage",
        )  # fmt: skip
        with Producer(eventhub, "outage") as producer:
            wait_until(lambda: len(output(spark, tmp_path)) >= 50, timeout=90, message="the first events")
            store_service.kill()
            down_at = time.monotonic()
            before = len(output(spark, tmp_path))
            wait_until(lambda: len(output(spark, tmp_path)) >= before + 50, timeout=60,
                       message="progress while the blob service is down")  # fmt: skip
            time.sleep(max(0.0, down_at + 6 - time.monotonic()))
            store_service.start()
            sent = producer.stop()
        wait_until(lambda: len(output(spark, tmp_path)) >= len(sent), timeout=90, message="every event")
        assert query.exception() is None
        rows = spark.read.parquet(str(tmp_path / "data")).collect()
        assert sorted(r.body for r in rows) == sorted(sent)
        last = {}
        for r in rows:
            last[r.partition] = max(last.get(r.partition, -1), r.sequenceNumber)
        store = BlobCheckpointStore.from_connection_string(store_service.connection_string, "outage")
        namespace = eventhub.emulator.fully_qualified_namespace

        def mirrored() -> dict[str, int | None]:
            listed = store.list_checkpoints(namespace, eventhub.name, "$Default")
            return {c.partition_id: c.sequence_number for c in listed}

        wait_until(lambda: mirrored() == last, timeout=60, message=f"the mirror to catch up to {last}")
    finally:
        if query is not None:
            query.stop()
        store_service.stop()


@pytest.mark.slow
def test_driver_killed_three_times_then_restarted_loses_and_repeats_nothing(eventhub, tmp_path):
    """Injects: SIGKILL to the whole driver (Python and JVM) at a random moment, three times, while
    events keep arriving. Checks: after each restart from the Spark checkpoint, and a last run that
    drains the hub, the file sink holds exactly the events produced, none twice."""
    rng = random.Random(5)
    out = tmp_path / "app"
    out.mkdir()

    def start() -> subprocess.Popen:
        (out / "started").unlink(missing_ok=True)
        return subprocess.Popen(
            [sys.executable, "-m", "tests.integration.crash_app", eventhub.connection_string, str(out)],
            cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=open(out / "driver.log", "ab"),
        )  # fmt: skip

    def committed() -> list[str]:
        import pyarrow.parquet as pq

        data = out / "data"
        files = _committed_files(data)
        return [b for f in files for b in pq.read_table(f, columns=["body"]).column("body").to_pylist()]

    with Producer(eventhub, "crash", pause=0.05) as producer:
        for _ in range(3):
            app = start()
            wait_until(lambda a=app: (out / "started").exists() or a.poll() is not None, timeout=120,
                       message="the query to start")  # fmt: skip
            assert app.poll() is None, (out / "driver.log").read_text()[-3000:]
            time.sleep(rng.uniform(3, 8))
            os.killpg(app.pid, signal.SIGKILL)
            app.wait()
        sent = producer.stop()
    app = start()
    try:
        wait_until(lambda: len(committed()) >= len(sent), timeout=180, message="every event after the restarts")
        time.sleep(2)  # anything read twice would be committed by now
    finally:
        os.killpg(app.pid, signal.SIGKILL)
        app.wait()
    counts = collections.Counter(committed())
    assert sorted(counts) == sorted(sent)
    assert [b for b, n in counts.items() if n > 1] == []


def _committed_files(data: Path) -> list[Path]:
    """The parquet files the sink's metadata log lists as committed (a killed batch leaves others), read as Spark
    reads it: every tenth batch's log is a compaction (``9.compact``: every file committed up to it), so the
    entries are the newest compaction's and those of the batches after it (counting the older batches' own logs
    too listed their files twice once a run passed ten batches); a ``delete`` action removes a file."""
    import json

    log = data / "_spark_metadata"
    if not log.exists():
        return []
    batches: dict[int, Path] = {}
    for entry in log.iterdir():
        name = entry.name
        if not name[0].isdigit() or name.endswith(".tmp"):
            continue
        batch = int(name.split(".")[0])
        if name.endswith(".compact") or batch not in batches:
            batches[batch] = entry
    compactions = [b for b, e in batches.items() if e.name.endswith(".compact")]
    since = max(compactions) if compactions else -1
    files: dict[str, None] = {}
    for batch in sorted(b for b in batches if b >= since):
        for line in batches[batch].read_text().splitlines()[1:]:
            if line.strip():
                entry = json.loads(line)
                path = entry["path"].replace("file://", "").replace("file:", "")
                if entry.get("action") == "delete":
                    files.pop(path, None)
                else:
                    files[path] = None
    return [Path(p) for p in files]


def test_one_partition_stalled(spark, eventhub):
    """Injects: partition 2 stops delivering events (sends and management still work).
    Checks: the other partitions' ranges are read at full speed meanwhile; the stalled one fails after
    eventhubs.receiverTimeout with an error naming the partition and the option, also through Spark."""
    from eventhubs_spark.auth.settings import parse_connection_string
    from eventhubs_spark.errors import EventHubsTimeoutError
    from eventhubs_spark.interprocess.task_ranges import RangeResult, ReceiverConfig
    from eventhubs_spark.process.runtime import current

    fill(eventhub, {p: 20 for p in range(4)}, "stall")
    settings = parse_connection_string(eventhub.connection_string)
    config = ReceiverConfig(consumer_group="$Default", prefetch=50, receiver_timeout=4.0, exclusive=False)
    eventhub.emulator.stall(eventhub.name, 2)
    finished: dict[str, float] = {}
    errors: dict[str, Exception] = {}
    started = time.monotonic()

    def read(pid: str) -> None:
        receiver = current().pool.acquire(settings, config, pid, 0, retry=False)
        healthy = False
        try:
            events = [s for chunk in receiver.read_range(0, 20, True, RangeResult()) for s in chunk.seqs]
            assert len(events) == 20
            healthy = True
        except Exception as exc:
            errors[pid] = exc
        finally:
            current().pool.release(receiver, healthy)
            finished[pid] = time.monotonic() - started

    try:
        threads = [threading.Thread(target=read, args=(str(p),)) for p in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert set(errors) == {"2"}, errors
        assert max(finished[p] for p in "013") < 3.5, f"the others were held up: {finished}"
        assert finished["2"] >= 4.0
        assert isinstance(errors["2"], EventHubsTimeoutError)
        assert "partition 2" in str(errors["2"]) and "eventhubs.receiverTimeout" in str(errors["2"])
        with pytest.raises(Exception, match=r"partition 2 for 4 s \(eventhubs\.receiverTimeout\)"):
            (spark.read.format("eventhubs").option("eventhubs.connectionString", eventhub.connection_string)
             .option("eventhubs.receiverTimeout", "4s").load().count())  # fmt: skip
    finally:
        eventhub.emulator.stall(eventhub.name, 2, False)
