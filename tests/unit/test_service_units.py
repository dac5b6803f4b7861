"""The executor's receiver service with its reads scripted: where it lives, what crosses the socket,
how errors come back, how a task reads on when the service dies, and when the service ends."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from eventhubs_spark.arrow import Columns
from eventhubs_spark.client import service
from eventhubs_spark.client.receiver import RangeRequest, RangeResult, ReceiverConfig
from eventhubs_spark.client.settings import parse_connection_string
from eventhubs_spark.errors import DataLossError, OptionError

SETTINGS = parse_connection_string(
    "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=a;SharedAccessKey=TOPSECRET;EntityPath=hub;UseDevelopmentEmulator=true"
)


def request(start: int, end: int) -> RangeRequest:
    return RangeRequest(SETTINGS, ReceiverConfig(receiver_timeout=5.0), "3", start, end, True)


def scripted(fail_at: int | None = None, error: Exception | None = None, pause_at: int | None = None):
    """A read_here that hands out [start, end) in chunks of 10, raising ``error`` at ``fail_at``."""
    starts: list[int] = []

    def read_here(req: RangeRequest, result: RangeResult) -> Iterator[Columns]:
        starts.append(req.start)
        for first in range(req.start, req.end, 10):
            if fail_at is not None and first >= fail_at:
                raise error or RuntimeError("boom")
            if pause_at is not None and first >= pause_at:
                time.sleep(60)
            cols = Columns()
            for seq in range(first, min(first + 10, req.end)):
                cols.append(b"x", seq, str(seq), 1_700_000_000_000, None, None, None, None)
            result.read += len(cols)
            yield cols

    return read_here, starts


@pytest.fixture
def running(tmp_path, monkeypatch):
    """A service on a socket in tmp_path, run on a thread, and the client's place pointing at it."""
    local = tmp_path / "blockmgr-x"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(local))
    where = service.place()
    assert where is not None
    svc = service.ReceiverService(where.socket_path, str(local), None, idle_exit=600)
    thread = threading.Thread(target=svc.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while service._try_connect(where.socket_path) is None:
        assert time.monotonic() < deadline, "the service did not listen"
        time.sleep(0.02)
    monkeypatch.setattr(service, "_CLIENT", None)
    yield where, svc, local
    os.rmdir(local) if local.exists() and not any(local.iterdir()) else None
    thread.join(5)


def test_the_socket_path_is_short_private_and_one_per_executor_directory(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 100) / ("e" * 100) / "blockmgr-0f3c"
    deep.mkdir(parents=True)
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{deep},{tmp_path}")
    where = service.place()
    assert where is not None and len(where.socket_path.encode()) < 100
    assert where.local_dir == str(deep) and where.lock_path.startswith(str(deep))
    assert stat.S_IMODE(os.stat(os.path.dirname(where.socket_path)).st_mode) == 0o700
    other = tmp_path / "blockmgr-other"
    other.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(other))
    assert service.place().socket_path != where.socket_path  # type: ignore[union-attr]
    monkeypatch.delenv("SPARK_LOCAL_DIRS")
    assert service.place() is None, "outside an executor there is no service"


def test_a_range_comes_back_as_record_batches_with_its_counts(running, monkeypatch):
    where, _svc, _ = running
    read_here, starts = scripted()
    monkeypatch.setattr(service, "read_here", read_here)
    stats: dict = {}
    batches = list(service.read_batches(request(100, 135), True, stats))
    seqs = [s for b in batches for s in b.column("sequenceNumber").to_pylist()]
    assert seqs == list(range(100, 135)) and starts == [100]
    assert stats["via"] == "service" and stats["read"] == 35 and stats["pid"] == os.getpid()
    assert stat.S_IMODE(os.stat(where.socket_path).st_mode) == 0o600


@pytest.mark.parametrize(
    "error",
    [
        DataLossError("hub 'hub' partition 3: sequence numbers [110, 120) are no longer in the hub"),
        OptionError("eventhubs.prefetchCount: bad", ".option('eventhubs.prefetchCount', '500')"),
    ],
)
def test_the_task_raises_the_services_error_as_itself(running, monkeypatch, error):
    read_here, _ = scripted(fail_at=110, error=error)
    monkeypatch.setattr(service, "read_here", read_here)
    got = []
    with pytest.raises(type(error)) as info:
        for batch in service.read_batches(request(100, 135), True, {}):
            got += batch.column("sequenceNumber").to_pylist()
    assert str(info.value) == str(error) and getattr(info.value, "example", None) == getattr(error, "example", None)
    assert got == list(range(100, 110))


def test_an_unexpected_error_names_its_type_and_never_the_secret(running, monkeypatch):
    read_here, _ = scripted(fail_at=100, error=KeyError("x-opt-sequence-number"))
    monkeypatch.setattr(service, "read_here", read_here)
    from eventhubs_spark.errors import EventHubsError

    with pytest.raises(EventHubsError, match="KeyError") as info:
        list(service.read_batches(request(100, 135), True, {}))
    assert "TOPSECRET" not in str(info.value)


def test_when_the_service_dies_mid_range_the_task_reads_on_here_from_the_next_event(running, monkeypatch):
    _where, _svc, _ = running
    read_here, _starts = scripted(pause_at=120)
    monkeypatch.setattr(service, "read_here", read_here)
    got: list[int] = []
    reader = service.read_batches(request(100, 150), True, {})
    for batch in reader:
        got += batch.column("sequenceNumber").to_pylist()
        if got[-1] == 119:
            break
    # the service's connection to this worker breaks (as when the service process is killed)
    service._CLIENT._sock.shutdown(2)  # type: ignore[union-attr]
    read_here_again, starts_again = scripted()
    monkeypatch.setattr(service, "read_here", read_here_again)
    for batch in reader:
        got += batch.column("sequenceNumber").to_pylist()
    assert got == list(range(100, 150)), "nothing lost, nothing twice"
    assert starts_again == [120], "read on in this worker from the first event not yet handed to Spark"


def test_without_a_service_the_worker_reads_for_itself(monkeypatch):
    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)
    monkeypatch.setattr(service, "_CLIENT", None)
    read_here, starts = scripted()
    monkeypatch.setattr(service, "read_here", read_here)
    stats: dict = {}
    assert sum(b.num_rows for b in service.read_batches(request(0, 25), True, stats)) == 25
    assert stats["via"] == "worker" and starts == [0]


def test_the_service_ends_with_its_executor_or_its_directory(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    svc = service.ReceiverService(str(tmp_path / "a.sock"), str(tmp_path), gone.pid, idle_exit=600)
    assert "has ended" in svc.run()
    local = tmp_path / "blockmgr-y"
    local.mkdir()
    svc = service.ReceiverService(str(tmp_path / "b.sock"), str(local), None, idle_exit=600)
    threading.Timer(0.5, local.rmdir).start()
    assert "is gone" in svc.run()
    assert not (tmp_path / "b.sock").exists(), "the socket is removed on exit"
    assert "idle" in service.ReceiverService(str(tmp_path / "c.sock"), None, None, idle_exit=0.5).run()


def test_raw_events_from_the_service_are_decoded_in_the_worker(running, monkeypatch):
    """The service holds messages undecoded (its receivers' RawEvents); the task decodes them."""
    from eventhubs_emulator import amqp
    from eventhubs_emulator.amqp import Symbol
    from eventhubs_spark.client.decode import RawEvents

    def message(seq: int) -> bytes:
        annotations = {Symbol("x-opt-sequence-number"): seq, Symbol("x-opt-offset"): str(seq)}
        return amqp.encode_section(amqp.MESSAGE_ANNOTATIONS, annotations) + amqp.encode_section(amqp.DATA, b"b%d" % seq)

    def read_here(req: RangeRequest, result: RangeResult) -> Iterator[RawEvents]:
        for first in range(req.start, req.end, 7):
            raw = RawEvents()
            for seq in range(first, min(first + 7, req.end)):
                raw.append(seq, message(seq))
            result.read += len(raw)
            yield raw

    monkeypatch.setattr(service, "read_here", read_here)
    stats: dict = {}
    rows = [r for b in service.read_batches(request(10, 40), True, stats) for r in b.to_pylist()]
    assert [r["sequenceNumber"] for r in rows] == list(range(10, 40))
    assert [r["body"] for r in rows] == [b"b%d" % s for s in range(10, 40)] and rows[0]["partition"] == "3"
    assert stats["via"] == "service" and stats["fallbacks"] == 0
