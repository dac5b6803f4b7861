"""Unit tests of :mod:`eventhubs_spark.executor.receiver_service`."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time

import pytest

from eventhubs_spark.errors import DataLossError, OptionError
from eventhubs_spark.executor import receiver_service
from eventhubs_spark.interprocess import service_framing
from eventhubs_spark.process import runtime
from eventhubs_spark.process.runtime import Runtime
from tests.unit.support.service import request, scripted


def test_a_range_comes_back_as_record_batches_with_its_counts(running, monkeypatch):
    where, _svc, worker = running
    read_here, starts = scripted()
    monkeypatch.setattr(receiver_service, "read_here", read_here)
    stats: dict = {}
    batches = list(worker.read(request(100, 135), True, stats))
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
    worker = running[2]
    read_here, _ = scripted(fail_at=110, error=error)
    monkeypatch.setattr(receiver_service, "read_here", read_here)
    got = []
    with pytest.raises(type(error)) as info:
        for batch in worker.read(request(100, 135), True, {}):
            got += batch.column("sequenceNumber").to_pylist()
    assert str(info.value) == str(error) and getattr(info.value, "example", None) == getattr(error, "example", None)
    assert got == list(range(100, 110))


def test_an_unexpected_error_names_its_type_and_never_the_secret(running, monkeypatch):
    worker = running[2]
    read_here, _ = scripted(fail_at=100, error=KeyError("x-opt-sequence-number"))
    monkeypatch.setattr(receiver_service, "read_here", read_here)
    from eventhubs_spark.errors import EventHubsError

    with pytest.raises(EventHubsError, match="KeyError") as info:
        list(worker.read(request(100, 135), True, {}))
    assert "TOPSECRET" not in str(info.value)


def test_when_the_service_dies_mid_range_the_task_reads_on_here_from_the_next_event(running, monkeypatch):
    _where, _svc, worker = running
    read_here, _starts = scripted(pause_at=120)
    monkeypatch.setattr(receiver_service, "read_here", read_here)
    got: list[int] = []
    reader = worker.read(request(100, 150), True, {})
    for batch in reader:
        got += batch.column("sequenceNumber").to_pylist()
        if got[-1] == 119:
            break
    # the service's connection to this worker breaks (as when the service process is killed)
    worker.service()._sock.shutdown(2)  # type: ignore[union-attr]
    read_here_again, starts_again = scripted()
    monkeypatch.setattr(runtime, "read_here", read_here_again)  # the worker's own reads from here
    for batch in reader:
        got += batch.column("sequenceNumber").to_pylist()
    assert got == list(range(100, 150)), "nothing lost, nothing twice"
    assert starts_again == [120], "read on in this worker from the first event not yet handed to Spark"


def test_a_connections_ranges_share_one_keep_alive_thread_and_a_slow_range_still_says_it_is_alive(running, monkeypatch):
    """A thread started for every range made each wait for the new thread to take the GIL (1.4 ms of a 10-event
    range's 2): one thread a connection now, kept across its ranges, and it still says ALIVE within a slow range."""
    _where, _svc, worker = running
    read_here, _starts = scripted()
    monkeypatch.setattr(receiver_service, "read_here", read_here)
    before = {t for t in threading.enumerate() if t.name == "eventhubs-alive"}  # other tests' connections'
    keepers = lambda: [t for t in threading.enumerate() if t.name == "eventhubs-alive" and t not in before]  # noqa: E731
    for i in range(6):
        assert len(list(worker.read(request(10 * i, 10 * i + 10), True, {}))) == 1
    assert len(keepers()) == 1, "one keep-alive thread for the worker's connection, not one a range"
    alive: list[float] = []
    real_send = receiver_service.send

    def counting(conn, kind, *parts):
        if kind == service_framing.ALIVE:
            alive.append(time.monotonic())
        return real_send(conn, kind, *parts)

    monkeypatch.setattr(receiver_service, "send", counting)
    slow, _ = scripted(pause_at=110)
    monkeypatch.setattr(receiver_service, "read_here", slow)
    got: list[int] = []
    reader = worker.read(request(100, 130), True, {})
    for batch in reader:
        got += batch.column("sequenceNumber").to_pylist()
        if got[-1] == 109:
            break
    deadline = time.monotonic() + 10
    while len(alive) < 2 and time.monotonic() < deadline:  # the range waits (Event Hubs quiet): ALIVE each second
        time.sleep(0.05)
    reader.close()
    assert len(alive) >= 2, "the kept thread says the range is alive while it waits"
    assert len(keepers()) == 1


def test_a_connections_sender_goes_with_the_connection(running, monkeypatch):
    """The service keeps one sender a connection, by the connection (weakly): a connection whose serving ended leaves
    nothing behind, however many connections came and went."""
    import gc
    import socket

    _where, svc, _worker = running
    read_here, _starts = scripted()
    monkeypatch.setattr(receiver_service, "read_here", read_here)
    for i in range(3):
        ours, theirs = socket.socketpair()
        assert svc._read(ours, request(10 * i, 10 * i + 10)) is True
        assert len(svc._senders) == 1
        kind, _ = service_framing.recv(theirs)  # the range came whole (its end with its chunk)
        assert kind == service_framing.RAW
        ours.close()
        theirs.close()
        del ours
        gc.collect()
        assert len(svc._senders) == 0, "the closed connection's sender is gone"


def test_the_service_ends_with_its_executor_or_its_directory(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    pool = Runtime(reap_every=0).pool
    svc = receiver_service.ReceiverService(str(tmp_path / "a.sock"), str(tmp_path), gone.pid, idle_exit=600, pool=pool)
    farewells: list[str] = []
    svc.listener.farewell = lambda why, timeout=2.0: farewells.append(why) or 0  # type: ignore[method-assign]
    assert "has ended" in svc.run()
    assert len(farewells) == 1 and "has ended" in farewells[0], "its queries' drivers are told it goes"
    local = tmp_path / "blockmgr-y"
    local.mkdir()
    svc = receiver_service.ReceiverService(str(tmp_path / "b.sock"), str(local), None, idle_exit=600, pool=pool)
    threading.Timer(0.5, local.rmdir).start()
    assert "is gone" in svc.run()
    assert not (tmp_path / "b.sock").exists(), "the socket is removed on exit"
    assert (
        "idle" in receiver_service.ReceiverService(str(tmp_path / "c.sock"), None, None, idle_exit=0.5, pool=pool).run()
    )


def test_raw_events_from_the_service_are_decoded_in_the_worker(running, monkeypatch):
    worker = running[2]
    """The service holds messages undecoded (its receivers' RawEvents); the task decodes them."""
    read_here, _ = scripted()
    monkeypatch.setattr(receiver_service, "read_here", read_here)
    stats: dict = {}
    rows = [r for b in worker.read(request(10, 40), True, stats) for r in b.to_pylist()]
    assert [r["sequenceNumber"] for r in rows] == list(range(10, 40))
    assert [r["body"] for r in rows] == [b"b%d" % s for s in range(10, 40)] and rows[0]["partition"] == "3"
    assert stats["via"] == "service" and stats["fallbacks"] == 0


def _raw_exchange(path: str, kind: bytes, payload: bytes) -> bytes:
    """Send one message to the service as a worker would; returns what came back before it closed."""
    import socket as socket_module

    sock = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(path)
    got = b""
    try:
        sock.sendall(service_framing.MESSAGE.pack(kind, len(payload)) + payload)
        while chunk := sock.recv(65536):
            got += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass  # closed by the service
    finally:
        sock.close()
    return got


@pytest.mark.parametrize(
    ("kind", "payload"),
    [
        (b"R", b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94\x8c\x06system\x94\x93\x94."),  # a pickle
        (b"R", b'{"partition": "3"}'),
        (b"X", b"{}"),
    ],
    ids=["pickle", "incomplete", "unknown-kind"],
)
def test_the_service_refuses_and_logs_a_request_it_does_not_allow_and_runs_nothing(
    running, monkeypatch, caplog, kind, payload
):
    where, svc, worker = running
    read_here, starts = scripted()
    monkeypatch.setattr(receiver_service, "read_here", read_here)
    with caplog.at_level("ERROR", logger="eventhubs_spark"):
        assert _raw_exchange(where.socket_path, kind, payload) == b"", "closed without an answer"
    assert starts == [] and svc.refused == 1
    assert any("refused" in r.getMessage() for r in caplog.records)
    # a well-formed request on a new connection is served as ever
    assert sum(b.num_rows for b in worker.read(request(0, 15), True, {})) == 15


def test_the_service_refuses_a_peer_of_another_user():
    """Run as root here, a child process becomes another user and connects (the socket made reachable for
    the test: the real one lives in a directory only its user may enter)."""
    import shutil
    import tempfile

    if os.getuid() != 0:
        pytest.skip("needs root to act as another user")
    reachable = tempfile.mkdtemp(dir="/tmp")  # every directory above it may be entered by anyone
    os.chmod(reachable, 0o777)
    path = os.path.join(reachable, "svc.sock")
    svc = receiver_service.ReceiverService(path, None, None, idle_exit=600, pool=Runtime(reap_every=0).pool)
    thread = threading.Thread(target=svc.run, daemon=True)
    thread.start()
    # Listening, not only bound: the service sets the socket's mode after binding it, and a chmod made between the
    # two was undone, so that the other user could not connect at all (the test failed now and then on a busy
    # machine, saying the request got an answer). A connection of this user is served only once it listens.
    import socket as socket_module

    deadline = time.monotonic() + 10
    while True:
        probe = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
        try:
            probe.connect(path)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        finally:
            probe.close()
    os.chmod(path, 0o777)
    child = os.fork()
    if child == 0:  # another user's process
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            asked = receiver_service.service_protocol.encode_request(request(0, 5))
            code = 0 if _raw_exchange(path, b"R", asked) == b"" else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    shutil.rmtree(reachable, ignore_errors=True)
    code = os.waitstatus_to_exitcode(status)
    assert code != 3, "another user's request got an answer"
    assert code == 0, "the other user's process could not send its request (it failed before the service's answer)"
    assert svc.refused == 1
