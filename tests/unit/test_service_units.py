"""The executor's receiver service with its reads scripted: where it lives, what crosses the socket,
how errors come back, how a task reads on when the service dies, and when the service ends."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from eventhubs_spark.amqp.messages import RawEvents
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.errors import DataLossError, OptionError
from eventhubs_spark.executor import receiver_service, service_client, service_files
from eventhubs_spark.interprocess import service_framing
from eventhubs_spark.interprocess.task_ranges import RangeRequest, RangeResult, ReceiverConfig
from eventhubs_spark.process import runtime
from eventhubs_spark.process.runtime import Runtime

SETTINGS = parse_connection_string(
    "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=a;SharedAccessKey=TOPSECRET;EntityPath=hub;UseDevelopmentEmulator=true"
)


def request(start: int, end: int) -> RangeRequest:
    return RangeRequest(ReceiverConfig(receiver_timeout=5.0), "3", start, end, True, settings=SETTINGS)


def message(seq: int) -> bytes:
    """An event's AMQP bytes as the service delivers them: its annotations, and a body."""
    from eventhubs_emulator import amqp
    from eventhubs_emulator.amqp import Symbol, Timestamp

    annotations = {Symbol("x-opt-sequence-number"): seq, Symbol("x-opt-offset"): str(seq),
                   Symbol("x-opt-enqueued-time"): Timestamp(1_700_000_000_000)}  # fmt: skip
    return amqp.encode_section(amqp.MESSAGE_ANNOTATIONS, annotations) + amqp.encode_section(amqp.DATA, b"b%d" % seq)


def scripted(fail_at: int | None = None, error: Exception | None = None, pause_at: int | None = None):
    """A read_here that hands out [start, end) in chunks of 10 (undecoded, as receivers hold them),
    raising ``error`` at ``fail_at``."""
    starts: list[int] = []

    def read_here(req: RangeRequest, result: RangeResult, pool: object = None) -> Iterator[RawEvents]:
        starts.append(req.start)
        for first in range(req.start, req.end, 10):
            if fail_at is not None and first >= fail_at:
                raise error or RuntimeError("boom")
            if pause_at is not None and first >= pause_at:
                time.sleep(60)
            raw = RawEvents()
            for seq in range(first, min(first + 10, req.end)):
                raw.append(seq, message(seq))
            result.read += len(raw)
            yield raw

    return read_here, starts


@pytest.fixture
def running(tmp_path, monkeypatch):
    """A service on a socket in tmp_path, run on a thread, and the client's place pointing at it."""
    local = tmp_path / "blockmgr-x"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(local))
    where = service_files.place()
    assert where is not None
    svc = receiver_service.ReceiverService(
        where.socket_path, str(local), None, idle_exit=600, pool=Runtime(reap_every=0).pool
    )
    thread = threading.Thread(target=svc.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while service_client._try_connect(where.socket_path) is None:
        assert time.monotonic() < deadline, "the service did not listen"
        time.sleep(0.02)
    worker = Runtime(reap_every=0)  # a worker of that executor: it finds the service by SPARK_LOCAL_DIRS
    yield where, svc, worker
    os.rmdir(local) if local.exists() and not any(local.iterdir()) else None
    thread.join(5)


def test_the_socket_path_is_short_private_and_one_per_executor_directory(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 100) / ("e" * 100) / "blockmgr-0f3c"
    deep.mkdir(parents=True)
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{deep},{tmp_path}")
    where = service_files.place()
    assert where is not None and len(where.socket_path.encode()) < 100
    assert where.local_dir == str(deep) and where.lock_path.startswith(str(deep))
    assert stat.S_IMODE(os.stat(os.path.dirname(where.socket_path)).st_mode) == 0o700
    other = tmp_path / "blockmgr-other"
    other.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(other))
    assert service_files.place().socket_path != where.socket_path  # type: ignore[union-attr]
    now = service_files.place().socket_path  # type: ignore[union-attr]
    # an upgrade in a running executor
    monkeypatch.setattr(service_files, "WIRE_VERSION", service_framing.WIRE_VERSION + 1)
    assert service_files.place().socket_path != now, "workers of another wire format never reach this service"  # type: ignore[union-attr]
    monkeypatch.delenv("SPARK_LOCAL_DIRS")
    assert service_files.place() is None, "outside an executor there is no service"


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


def test_each_chunk_goes_as_it_is_read_and_the_last_with_the_ranges_end_in_one_write(running, monkeypatch):
    worker = running[2]
    read_here, _ = scripted()
    monkeypatch.setattr(receiver_service, "read_here", read_here)
    writes: list[list[bytes]] = []
    send = service_framing.send_messages

    def recording(sock: object, *messages: tuple[bytes, tuple[bytes, ...]]) -> None:
        writes.append([kind for kind, _ in messages])
        send(sock, *messages)  # type: ignore[arg-type]

    monkeypatch.setattr(receiver_service, "send_messages", recording)
    batches = list(worker.read(request(100, 135), True, {}))
    assert sum(b.num_rows for b in batches) == 35
    service_writes = [w for w in writes if w != [service_framing.READ]]  # the worker's request goes the same way
    assert service_writes == [[service_framing.RAW]] * 3 + [[service_framing.RAW, service_framing.DONE]]


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


def test_chunks_that_have_arrived_are_decoded_as_one_record_batch(running, monkeypatch):
    """A worker that comes back to the socket finds several chunks there: it decodes them as one record batch (a
    chunk's decoding has a fixed cost, and so has each batch Spark takes), never past MERGE_EVENTS or MERGE_BYTES."""
    worker = running[2]
    read_here, _ = scripted()
    monkeypatch.setattr(receiver_service, "read_here", read_here)
    monkeypatch.setattr(service_client, "MERGE_EVENTS", 25)
    reader = worker.read(request(100, 160), True, {})
    first = next(reader)  # the first chunk is decoded as soon as it is here (the others may follow it)
    time.sleep(0.5)  # the rest of the range arrives meanwhile
    batches = [first, *reader]
    seqs = [s for b in batches for s in b.column("sequenceNumber").to_pylist()]
    assert seqs == list(range(100, 160)), "each event once, in order"
    assert max(b.num_rows for b in batches[1:]) == 30, "arrived chunks went together, up to the limit's chunk"
    assert len(batches) < 6
    monkeypatch.setattr(service_client, "MERGE_BYTES", 1)  # large events: no more than one chunk's bytes at a time
    reader = worker.read(request(100, 160), True, {})
    first = next(reader)
    time.sleep(0.5)
    batches = [first, *reader]
    assert [b.num_rows for b in batches] == [10] * 6


def test_a_service_lost_while_chunks_are_gathered_loses_none_of_them(running, monkeypatch):
    """The connection breaks after a chunk was received and before it was handed to Spark (while the worker
    gathered the next): the task reads on by itself from that chunk's first event, not from after it."""
    _where, _svc, worker = running
    read_here, _ = scripted()
    monkeypatch.setattr(receiver_service, "read_here", read_here)
    monkeypatch.setattr(service_client, "ready", lambda sock: True)
    real_recv = service_client.recv
    raws = []

    def breaking(sock: object, *args: object) -> tuple[bytes, bytearray]:
        kind, payload = real_recv(sock, *args)  # type: ignore[arg-type]
        if kind == service_framing.RAW:
            raws.append(kind)
            if len(raws) == 2:
                raise ConnectionResetError("the service went away")
        return kind, payload

    monkeypatch.setattr(service_client, "recv", breaking)
    read_here_again, starts_again = scripted()
    monkeypatch.setattr(runtime, "read_here", read_here_again)
    got = [s for b in worker.read(request(100, 150), True, {}) for s in b.column("sequenceNumber").to_pylist()]
    assert got == list(range(100, 150)), "nothing lost, nothing twice"
    assert starts_again == [100], "read on from the first event not yet handed to Spark"


def test_without_a_service_the_worker_reads_for_itself(monkeypatch):
    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)
    worker = Runtime(reap_every=0)
    read_here, starts = scripted()
    monkeypatch.setattr(runtime, "read_here", read_here)
    stats: dict = {}
    assert sum(b.num_rows for b in worker.read(request(0, 25), True, stats)) == 25
    assert stats["via"] == "worker" and starts == [0]


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


# -- the protocol: data only ----------------------------------------------------------------------------------


def full_request() -> RangeRequest:
    """A request with every kind of field set: secrets, an Entra identity, a proxy, ownership."""
    import dataclasses

    from eventhubs_spark.auth.credentials import EntraSettings
    from eventhubs_spark.auth.network import HttpProxy, NetworkSettings
    from eventhubs_spark.auth.secret import Secret

    settings = dataclasses.replace(
        SETTINGS,
        entra=EntraSettings("servicePrincipal", "t", "c", Secret("client-S3CRET"), None, None, None, None, None, True),
        network=NetworkSettings(
            "amqpWebSockets", HttpProxy("proxy", 3128, "u", Secret("proxy-S3CRET")), "sb://gw:443", "/ca.pem"
        ),
    )
    config = ReceiverConfig("$Default", 300, 12.5, False, 7, 100, 1 << 20)
    return RangeRequest(config, "3", 10, 20, False, 30.0, "owner-1", frozenset({"3", "4"}), True, settings=settings)


def test_a_message_crosses_whole_in_one_write_when_small_and_in_pieces_when_the_socket_is_full():
    import socket

    import pyarrow as pa

    a, b = socket.socketpair()
    writes: list[int] = []

    class Counting:
        def sendmsg(self, buffers: list[memoryview]) -> int:
            writes.append(len(buffers))
            return a.sendmsg(buffers)

    try:
        service_framing.send(Counting(), b"R", b"head", memoryview(b"-mid-"), b"", pa.py_buffer(b"tail"))  # type: ignore[arg-type]
        assert writes == [4]  # header and three parts (the empty one left out): one write, one wake-up
        assert service_framing.recv(b) == (b"R", bytearray(b"head-mid-tail"))
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # a chunk larger than the socket holds
        a.settimeout(10)  # as the service's and the tasks' sockets: a write takes what fits and returns
        big = [os.urandom(300_000), pa.py_buffer(os.urandom(700_001)), os.urandom(3)]
        got: list[tuple[bytes, bytearray]] = []
        reader = threading.Thread(target=lambda: got.append(service_framing.recv(b)))
        reader.start()
        service_framing.send(Counting(), b"W", *big)  # type: ignore[arg-type]
        reader.join(10)
        assert got == [(b"W", bytearray(big[0] + big[1].to_pybytes() + big[2]))]
        assert len(writes) > 2  # partial writes resumed where each stopped
    finally:
        a.close()
        b.close()


def test_a_request_crosses_as_json_and_comes_back_equal():
    from eventhubs_spark.interprocess import service_protocol

    full = full_request()
    wire = service_protocol.encode_request(full)
    assert json.loads(wire)["settings"]["network"]["proxy"]["hostname"] == "proxy"  # plain JSON
    assert service_protocol.decode_request(wire) == full
    assert service_protocol.decode_request(service_protocol.encode_request(request(1, 2))) == request(1, 2)


def test_a_request_has_the_fields_it_had_before_a_remote_read_shared_them_and_a_remote_read_no_settings():
    """RangeRequest takes RemoteRead's range fields once (it extends it), and the JSON that crosses the service's
    socket keeps exactly the fields it had (the wire format is unchanged: a worker and a service of the code before
    understand each other); what a task asks of a home carries the range alone."""
    from eventhubs_spark.interprocess import service_protocol
    from eventhubs_spark.interprocess.task_ranges import RemoteRead

    before = {"settings", "config", "partition", "start", "end", "fail_on_data_loss", "idle_timeout", "owner",
              "owned", "retry", "query", "driver", "home", "homes", "ports", "bind", "range_id"}  # fmt: skip
    full = full_request()
    assert set(json.loads(service_protocol.encode_request(full))) == before
    remote = RemoteRead.of(full)
    assert type(remote) is RemoteRead and "settings" not in json.loads(service_protocol.encode_request(remote))
    assert remote.request(full.settings) == full


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d.update(extra=1), "unknown field(s) 'extra' for RangeRequest"),
        (lambda d: d["settings"].update(__reduce__="os.system"), "unknown field(s) '__reduce__'"),
        (lambda d: d.pop("partition"), "missing field(s) partition"),
        (lambda d: d.update(start="10"), "request.start: expected a whole number"),
        (lambda d: d.update(start=True), "request.start: expected a whole number"),
        (lambda d: d.update(retry=1), "request.retry: expected true or false"),
        (lambda d: d["settings"].update(connection_string="plain text"), "connection_string: expected a secret"),
        (lambda d: d["settings"].update(namespace=None), "settings.namespace: expected text"),
        (lambda d: d.update(owner=None, idle_timeout=None), None),  # optional fields may be null
        (lambda d: d.update(owned="3"), "request.owned: expected a list"),
        (lambda d: d.update(config=[1, 2]), "request.config: expected an object of ReceiverConfig"),
    ],
)
def test_a_request_that_is_not_exactly_a_range_request_is_refused(change, words):
    from eventhubs_spark.interprocess import service_protocol

    data = json.loads(service_protocol.encode_request(full_request()))
    change(data)
    if words is None:
        assert service_protocol.decode_request(json.dumps(data).encode()).owner is None
        return
    with pytest.raises(service_protocol.ProtocolError) as info:
        service_protocol.decode_request(json.dumps(data).encode())
    assert words in str(info.value)
    assert "S3CRET" not in str(info.value) and "TOPSECRET" not in str(info.value)


@pytest.mark.parametrize("payload", [b"\x80\x04\x95 pickled", b"\xff\xfe", b"[]", b"null", b"x" * (2 << 20)])
def test_what_is_not_a_json_request_is_refused(payload):
    from eventhubs_spark.interprocess import service_protocol

    with pytest.raises(service_protocol.ProtocolError):
        service_protocol.decode_request(payload)


def test_errors_cross_as_json_with_their_type_example_and_retriability():
    from eventhubs_spark.errors import NetworkError
    from eventhubs_spark.interprocess import service_protocol

    for error in (
        NetworkError("refused", retriable=True),
        OptionError("eventhubs.x: bad", ".option('eventhubs.x', '1')"),
        DataLossError("gone"),
    ):
        back = service_protocol.decode_error(service_protocol.encode_error(error))
        assert type(back) is type(error) and str(back) == str(error)
        assert getattr(back, "example", None) == getattr(error, "example", None)
        assert back.retriable == error.retriable
    assert "KeyError: 'k'" in str(service_protocol.decode_error(service_protocol.encode_error(KeyError("k"))))
    with pytest.raises(service_protocol.ProtocolError):
        service_protocol.decode_error(b"\x80\x04pickle")


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
    deadline = time.monotonic() + 10
    while not os.path.exists(path):
        assert time.monotonic() < deadline
        time.sleep(0.02)
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
    assert os.waitstatus_to_exitcode(status) == 0, "another user's request got an answer"
    assert svc.refused == 1


def test_a_socket_directory_with_a_wrong_mode_is_not_used_and_the_worker_reads_for_itself(
    tmp_path, monkeypatch, caplog
):
    import tempfile

    private = tmp_path / f"ehs-{os.getuid()}"
    private.mkdir(mode=0o755)
    os.chmod(private, 0o755)
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    local = tmp_path / "blockmgr-z"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(local))
    worker = Runtime(reap_every=0)
    with pytest.raises(PermissionError, match="mode 0700"):
        service_files.place()
    read_here, starts = scripted()
    monkeypatch.setattr(runtime, "read_here", read_here)
    stats: dict = {}
    with caplog.at_level("WARNING", logger="eventhubs_spark"):
        assert sum(b.num_rows for b in worker.read(request(0, 25), True, stats)) == 25
    assert stats["via"] == "worker" and starts == [0]
    assert any("mode 0700" in r.getMessage() for r in caplog.records)


def test_a_symlinked_socket_directory_is_refused_not_followed(tmp_path, monkeypatch):
    """Whoever plants ``<tmp>/ehs-<uid>`` as a link would choose where the sockets go: even a link to a
    directory of this user's with mode 0700 is refused (os.stat would have followed it)."""
    import tempfile

    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    os.chmod(target, 0o700)
    (tmp_path / f"ehs-{os.getuid()}").symlink_to(target, target_is_directory=True)
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    local = tmp_path / "blockmgr-l"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(local))
    with pytest.raises(PermissionError, match="not a symbolic link"):
        service_files.place()
    assert list(target.iterdir()) == []


def test_refusals_are_all_counted_and_said_at_most_once_a_minute_per_kind(caplog):
    import logging

    from eventhubs_spark.interprocess.driver_channel import Refusals

    now = [0.0]
    refusals = Refusals(every=60.0, clock=lambda: now[0])
    log = logging.getLogger("eventhubs_spark.test_refusals")
    stranger = "a connection for query 0123456789abcdef left without proving it holds its key"
    with caplog.at_level(logging.WARNING, logger=log.name):
        for i in range(500):  # a flood within one minute: the first of each kind said, the rest counted
            refusals.add(log, stranger.replace("0123456789abcdef", f"{i:016x}"), "refused a connection from %s", "x")
            now[0] += 0.05
        refusals.add(log, "not this protocol", "refused a connection from %s: not this protocol", "x")
        for i in range(100):  # more kinds than are kept: they share one
            refusals.add(log, f"kind {chr(65 + i % 26)}{chr(97 + i // 26)}", "refused (%s)", "other")
        now[0] = 61.0
        refusals.add(log, stranger, "refused a connection from %s", "x")
    said = [r.getMessage() for r in caplog.records]
    assert refusals.refused == 602
    assert said[0] == "refused a connection from x" and said[1] == "refused a connection from x: not this protocol"
    assert said[-1] == "refused a connection from x (499 more of these refused in the last 60 s, not said one by one)"
    assert len(said) == 2 + 14 + 1 + 1, said  # two kinds, 14 more kept (16 in all), one shared by the rest, the summary
