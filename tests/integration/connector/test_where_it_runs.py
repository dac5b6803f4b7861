"""Issue 46: every cluster feature finds out once whether it may, remembers, and steps aside at no cost per task;
the listeners stay bounded under a stranger's flood (loopback only, bounded in count and time).

A port whose accept queue is full stands in for a firewall that drops packets: Linux drops the SYNs of a
listener whose backlog is full, so a connect there waits out its time-out exactly as behind such a firewall."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
import types
from collections.abc import Iterator

import pytest

from eventhubs_spark.interprocess import driver_channel, sockets
from eventhubs_spark.interprocess.driver_channel import DriverChannel, Reach
from eventhubs_spark.interprocess.sealed_socket import client_handshake
from eventhubs_spark.interprocess.task_ranges import DriverAddress, new_query_key
from tests.integration.sdk_helpers import wait_until


class BlackHole:
    """A loopback port that takes no connection: its one-slot accept queue is filled, so further SYNs are dropped."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0), backlog=0)
        self.port = self.server.getsockname()[1]
        self.fillers: list[socket.socket] = []
        for _ in range(3):  # the queue holds backlog + 1; what does not fit is left connecting
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", self.port))
            self.fillers.append(filler)
        time.sleep(0.2)

    def close(self) -> None:
        for filler in self.fillers:
            filler.close()
        self.server.close()


@pytest.fixture
def reach(monkeypatch) -> Iterator[Reach]:
    fresh = Reach(recheck=0.5)
    monkeypatch.setattr(driver_channel, "REACH", fresh)
    yield fresh


def test_a_driver_that_drops_packets_costs_a_process_one_bounded_probe_then_nothing_until_it_heals(reach):
    hole = BlackHole()
    query = new_query_key()
    driver = DriverAddress(("127.0.0.1", "localhost"), hole.port)
    try:
        started = time.monotonic()
        assert driver_channel.ask(driver, query, {"kind": "read"}, timeout=15.0) is None
        first = time.monotonic() - started
        # a drop waits out the probe's time-out once, not once per address (nor the 15 s the caller allowed)
        assert sockets.PROBE_TIMEOUT * 0.9 <= first < sockets.PROBE_TIMEOUT + 1.0, f"the first probe took {first:.1f} s"
        assert not reach.reachable(driver) and reach.probes == 1
        started = time.monotonic()
        for _ in range(50):  # every later task: nothing to wait for
            assert driver_channel.ask(driver, query, {"kind": "read"}, timeout=15.0) is None
            assert driver_channel.ask_kept(driver, query, {"kind": "read"}, timeout=2.0) is None
            driver_channel.tell(driver, query, {"kind": "coming"})
        assert time.monotonic() - started < 0.5 and reach.probes == 1
    finally:
        hole.close()
    # the firewall goes: the query's driver listens on that very port, and the background check finds it
    answers: list[dict] = []
    heard = DriverChannel(query, lambda m: answers.append(m) or {"ok": True}, bind="127.0.0.1", ports=str(hole.port))
    try:
        wait_until(lambda: reach.reachable(driver), timeout=10, message="the driver reachable again")
        assert driver_channel.ask(driver, query, {"kind": "read", "ranges": []}) == {"ok": True}
        assert answers == [{"kind": "read", "ranges": []}]
    finally:
        heard.close()


def test_a_probe_that_met_a_busy_host_is_corrected_in_seconds_not_a_recheck_later(monkeypatch):
    """A driver that answers, found unreachable all the same (a process starved of CPU past the probe's time-out, as
    happened once under CI's load): the first background re-check comes within sockets.CONFIRM_AFTER, not after
    the minute between re-checks, so lag times and homes come back at once."""
    fresh = Reach(recheck=60.0)
    monkeypatch.setattr(driver_channel, "REACH", fresh)
    query = new_query_key()
    heard = DriverChannel(query, lambda m: {"ok": True}, bind="127.0.0.1")
    driver = heard.address()
    try:
        fresh.failed(driver, "no answer within 2 s")
        assert driver_channel.ask(driver, query, {"kind": "read"}) is None  # remembered: nobody waits meanwhile
        started = time.monotonic()
        wait_until(lambda: fresh.reachable(driver), timeout=sockets.CONFIRM_AFTER + 5, message="reachable again")
        assert time.monotonic() - started < sockets.CONFIRM_AFTER + 5
        assert driver_channel.ask(driver, query, {"kind": "read"}) == {"ok": True}
    finally:
        heard.close()


def test_a_connection_made_while_the_prober_waited_for_a_cpu_counts(monkeypatch):
    """first_connect looks once more past its deadline: a thread that got no CPU until after it finds the
    connection the kernel made meanwhile, rather than calling an open port unreachable."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    real = time.monotonic
    calls = {"n": 0}

    def late() -> float:  # every reading after the first is an hour on: the deadline has passed at the first look
        calls["n"] += 1
        return real() + (3600.0 if calls["n"] > 1 else 0.0)

    # this module's clock only
    monkeypatch.setattr(driver_channel, "time", types.SimpleNamespace(monotonic=late, sleep=time.sleep))
    try:
        connected = sockets.first_connect(("127.0.0.1",), port, 2.0)
        assert connected is not None and connected[0] == "127.0.0.1"
        connected[1].close()
    finally:
        server.close()


def test_an_executors_other_workers_do_not_pay_a_probe_one_of_them_paid(tmp_path, monkeypatch):
    """Without a receiver service to ask, an executor's Python workers (processes of their own) share what one
    of them found out through a note in the executor's local directory: the next worker's first task waits for
    nothing. The note goes once the driver answers again."""
    first, second = Reach(recheck=0.5, shared_dir=str(tmp_path)), Reach(recheck=0.5, shared_dir=str(tmp_path))
    hole = BlackHole()
    query = new_query_key()
    driver = DriverAddress(("127.0.0.1",), hole.port)
    try:
        monkeypatch.setattr(driver_channel, "REACH", first)
        assert driver_channel.ask(driver, query, {"kind": "read"}, timeout=15.0) is None
        assert first.probes == 1 and list(tmp_path.iterdir()), "the worker that paid left a note"
        monkeypatch.setattr(driver_channel, "REACH", second)  # another worker of the same executor
        started = time.monotonic()
        assert driver_channel.ask(driver, query, {"kind": "read"}, timeout=15.0) is None
        assert time.monotonic() - started < 0.5 and second.probes == 0, "it paid nothing"
    finally:
        hole.close()
    heard = DriverChannel(query, lambda m: {"ok": True}, bind="127.0.0.1", ports=str(hole.port))
    try:
        wait_until(lambda: first.reachable(driver) and second.reachable(driver), timeout=20, message="healed")
        wait_until(lambda: not list(tmp_path.iterdir()), timeout=10, message="the note gone")
        assert driver_channel.ask(driver, query, {"kind": "read"}) == {"ok": True}
    finally:
        heard.close()


def test_a_strangers_flood_neither_ends_nor_blocks_the_drivers_channel(reach, caplog):
    """1,000 connections that never prove themselves, and some that send garbage or a huge length: the channel
    keeps at most MAX_PENDING of them waiting (the oldest cut off), and the query's own connections get through
    all along; the log says the refusals once a minute, not once each."""
    caplog.set_level(logging.WARNING, logger="eventhubs_spark")
    query = new_query_key()
    answered = []
    server = DriverChannel(query, lambda m: answered.append(m) or {"ok": True}, bind="127.0.0.1")
    address = DriverAddress(("127.0.0.1",), server.port)
    stop = threading.Event()
    opened = 0
    most_pending = 0

    def flood() -> None:
        nonlocal opened, most_pending
        held: list[socket.socket] = []
        deadline = time.monotonic() + 30
        while opened < 1000 and not stop.is_set() and time.monotonic() < deadline:
            try:
                sock = socket.create_connection(("127.0.0.1", server.port), timeout=2)
            except OSError:
                continue
            opened += 1
            if opened % 10 == 0:
                sock.sendall(b"EHS1" + b"\0" * 16 + b"\1" * 32)  # a handshake for a query it does not know
            held.append(sock)
            most_pending = max(most_pending, server.gate.pending)
            if len(held) > 200:  # a stranger's file descriptors are finite too
                for old in held[:100]:
                    old.close()
                del held[:100]
        for sock in held:
            sock.close()

    stranger = threading.Thread(target=flood)
    stranger.start()
    try:
        sent = 0
        while stranger.is_alive():
            assert driver_channel.ask(address, query, {"kind": "read", "n": sent}, timeout=5.0) == {"ok": True}
            sent += 1
            time.sleep(0.02)
        stranger.join()
        assert opened == 1000 and sent >= 5
        assert most_pending <= sockets.MAX_PENDING
        assert server.gate.turned_away > 0  # the flood was cut off, not served
        assert [m["n"] for m in answered] == list(range(sent))  # every message of the query's own got through
        assert reach.probes == 0
        said = [r for r in caplog.records if "refused a connection to the query's driver" in r.getMessage()]
        assert 1 <= len(said) <= 3 and len(said) < server.refused, (server.refused, len(said))
        # a proven peer that announces a frame larger than the driver takes is cut off before anything is read
        with socket.create_connection(("127.0.0.1", server.port)) as raw:
            sealed = client_handshake(raw, query)
            raw.sendall(struct.pack(">I", 1 << 30))
            raw.settimeout(5)
            assert raw.recv(1) == b""  # closed, not waiting for a gigabyte
        del sealed
        assert driver_channel.ask(address, query, {"kind": "read", "n": "after"}) == {"ok": True}
    finally:
        stop.set()
        stranger.join()
        server.close()


def test_a_receiver_service_that_cannot_start_is_tried_once_then_in_the_background(eventhub, tmp_path, monkeypatch):
    """A sandbox that forbids the service's process: the first task pays one attempt and reads in its worker; the
    next tasks make none (they read at once, exactly); a background attempt brings the service in once it may."""
    import subprocess
    import tempfile

    from eventhubs_spark.auth.settings import parse_connection_string
    from eventhubs_spark.executor import service_client as client_module
    from eventhubs_spark.interprocess.task_ranges import RangeRequest, ReceiverConfig
    from eventhubs_spark.process.runtime import Runtime
    from tests.integration.sdk_helpers import send

    local = tmp_path / "blockmgr-sandbox"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(local))
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    forbidden = [True]
    starts: list[float] = []
    real = subprocess.Popen

    def popen(*args, **kwargs):
        starts.append(time.monotonic())
        if forbidden[0]:
            raise PermissionError("starting a process is not allowed here")
        return real(*args, **kwargs)

    monkeypatch.setattr(client_module.subprocess, "Popen", popen)
    send(eventhub.connection_string, [f"s{i}" for i in range(15)], partition_id="3")
    settings = parse_connection_string(eventhub.connection_string)
    request = RangeRequest(ReceiverConfig(receiver_timeout=20), "3", 0, 15, True, settings=settings)
    worker = Runtime(reap_every=0)
    worker.recheck = 0.5
    pid = None
    try:
        stats: dict = {}
        assert [s for b in worker.read(request, True, stats) for s in b.column("sequenceNumber").to_pylist()] == list(
            range(15)
        )
        assert stats["via"] == "worker"
        wait_until(lambda: len(starts) >= 2, timeout=5, message="the background attempt")  # at once, then 0.5 s
        before = len(starts)
        for _ in range(5):
            stats = {}
            rows = [s for b in worker.read(request, True, stats) for s in b.column("sequenceNumber").to_pylist()]
            assert rows == list(range(15)) and stats["via"] == "worker"
        assert len(starts) - before <= 2, "tasks made attempts of their own"  # only the background's, 0.5 s apart
        forbidden[0] = False  # the sandbox lets it start now
        wait_until(lambda: worker.service() is not None, timeout=10, message="the service up again")
        stats = {}
        assert [s for b in worker.read(request, True, stats) for s in b.column("sequenceNumber").to_pylist()] == list(
            range(15)
        )
        assert stats["via"] == "service"
        pid = int(stats["pid"])
    finally:
        if pid is not None:
            import os
            import signal

            os.kill(pid, signal.SIGTERM)


def test_a_receiver_service_killed_between_tasks_costs_the_next_task_nothing_and_comes_back(
    eventhub, tmp_path, monkeypatch
):
    """The service's process killed (SIGKILL) between two tasks: the next task reads its range exactly (in its
    worker, or through a service started again), and tasks read through a new service within seconds."""
    import contextlib
    import os
    import signal
    import tempfile

    from eventhubs_spark.auth.settings import parse_connection_string
    from eventhubs_spark.interprocess.task_ranges import RangeRequest, ReceiverConfig
    from eventhubs_spark.process.runtime import Runtime
    from tests.integration.sdk_helpers import send

    local = tmp_path / "blockmgr-killed"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(local))
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    send(eventhub.connection_string, [f"k{i}" for i in range(12)], partition_id="2")
    request = RangeRequest(ReceiverConfig(receiver_timeout=20), "2", 0, 12, True,
                           settings=parse_connection_string(eventhub.connection_string))  # fmt: skip
    worker = Runtime(reap_every=0)
    worker.recheck = 0.5
    pids: list[int] = []

    def read() -> dict:
        stats: dict = {}
        rows = [s for b in worker.read(request, True, stats) for s in b.column("sequenceNumber").to_pylist()]
        assert rows == list(range(12)), "every event of the range once"
        if stats["via"] == "service":
            pids.append(int(stats["pid"]))
        return stats

    try:
        assert read()["via"] == "service"
        first = pids[0]
        os.kill(first, signal.SIGKILL)
        time.sleep(0.2)  # its sockets are closed by the kernel as it dies
        began = time.monotonic()
        read()  # the task after the kill: exact, wherever it read
        assert time.monotonic() - began < 10, "the task after the kill paid a long wait"

        def through_a_new_service() -> bool:
            return read()["via"] == "service" and pids[-1] != first

        wait_until(through_a_new_service, timeout=15, message="tasks through a new service")
    finally:
        for pid in set(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def test_the_driver_says_once_when_no_executor_reaches_its_channel(eventhub, caplog):
    """Batches planned and not one task or service reached the channel: said once, naming the port and the options
    that open it or turn it off for good."""
    import logging

    from eventhubs_spark.source import UNHEARD_AFTER, EventHubsStreamReader

    reader = EventHubsStreamReader({"eventhubs.connectionString": eventhub.connection_string,
                                    "eventhubs.startingPosition": '{"offset": "-1"}',
                                    "eventhubs.driverChannel.ports": "0"})  # fmt: skip
    start = reader.initialOffset()
    with caplog.at_level(logging.WARNING, logger="eventhubs_spark"):
        for _ in range(UNHEARD_AFTER + 3):
            reader.partitions(start, start)  # the tasks never run: nobody tells the driver anything
    driver = reader.query_driver()
    assert driver is not None
    try:
        said = [r.getMessage() for r in caplog.records if "no executor reached the driver's channel" in r.getMessage()]
        assert len(said) == 1 and f"port {driver.channel.port}" in said[0]
        assert "eventhubs.driverChannel=false" in said[0]
    finally:
        driver.close()
    import os
    import subprocess

    def listening() -> set[str]:  # the TCP ports this (the driver's) process listens on, as ss sees them
        out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
        return {line.split()[3] for line in out.splitlines() if f"pid={os.getpid()}," in line}

    before = listening()
    quiet = EventHubsStreamReader({"eventhubs.connectionString": eventhub.connection_string,
                                   "eventhubs.driverChannel": "false"})  # fmt: skip
    assert quiet.query_driver() is None
    planned = quiet.partitions(start, start)
    assert all(r.driver is None and r.query is None and not r.homes for p in planned for r in p.requests)
    assert listening() <= before, "eventhubs.driverChannel=false opened a port in the driver's process"


def test_a_driver_port_nobody_listens_on_is_not_taken_for_a_firewall_and_a_restart_there_is_heard_at_once(
    tmp_path, monkeypatch
):
    """A query restarted on a fixed eventhubs.driverChannel.ports: its predecessor's services and tasks met the
    port closed (refused at once, not dropped). That is no firewall: nothing is remembered, no note is left for the
    executor's other workers, and the new driver on that port is asked at once, not a recheck's minute later."""
    reach = Reach(recheck=60.0, shared_dir=str(tmp_path))
    monkeypatch.setattr(driver_channel, "REACH", reach)
    query = new_query_key()
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    driver = DriverAddress(("127.0.0.1", "localhost"), port)
    started = time.monotonic()
    assert driver_channel.ask(driver, query, {"kind": "read"}, timeout=15.0) is None  # the old query's driver is gone
    assert time.monotonic() - started < 1.0, "a refusal is answered at once"
    assert reach.reachable(driver) and reach.probes == 0 and not list(tmp_path.iterdir()), "nothing remembered"
    heard = DriverChannel(query, lambda m: {"ok": True}, bind="127.0.0.1", ports=str(port))  # the restarted query
    try:
        assert driver_channel.ask(driver, query, {"kind": "read"}) == {"ok": True}
    finally:
        heard.close()
