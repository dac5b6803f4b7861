"""Homes on one machine, against the emulator: another executor's task reads from a home only with the
query's key, and a task whose home cannot be reached reads the range itself, exactly."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from eventhubs_spark.auth.secret import Secret
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.executor.service_client import HomeClient
from eventhubs_spark.interprocess.sealed_socket import RefusedError
from eventhubs_spark.interprocess.task_ranges import Home, QueryKey, RangeRequest, ReceiverConfig, new_query_key
from eventhubs_spark.process.runtime import Runtime
from tests.conftest import free_port
from tests.integration.sdk_helpers import send


def test_a_home_serves_another_executors_task_only_with_the_querys_key(eventhub, home_service, caplog):
    service, worker = home_service
    send(eventhub.connection_string, [f"h{i}" for i in range(40)], partition_id="2")
    settings = parse_connection_string(eventhub.connection_string)
    query = new_query_key()
    mine = RangeRequest(ReceiverConfig(receiver_timeout=20), "2", 0, 20, True, query=query, homes=True,
                        settings=settings)  # fmt: skip
    client = worker.service()
    assert client is not None
    answer = client.hello(mine)  # this executor's task brings the query to its service
    home = Home(answer["executor"], ("127.0.0.1",), int(answer["port"]))
    assert home.port == service.listener.port and home.executor == service.executor
    # another executor's task, with a wrong key: refused, and the home says so in its log
    stranger = QueryKey(query.query, Secret("not-the-key"))
    with caplog.at_level(logging.WARNING, logger="eventhubs_spark"):
        with pytest.raises(RefusedError):
            list(HomeClient(home, stranger).read(mine, {}))
        deadline = time.monotonic() + 5
        while service.listener.refused < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert service.listener.refused == 1
    assert any("refused a connection" in r.getMessage() for r in caplog.records)
    # ... and with the query's key: the range, read by the home with the settings its own task gave it
    # credentials never cross: the home's own are used
    wrong_key = parse_connection_string(eventhub.connection_string.replace("SharedAccessKey=", "SharedAccessKey=x"))
    elsewhere = RangeRequest(ReceiverConfig(receiver_timeout=20), "2", 0, 40, True, query=query,
                             homes=True, settings=wrong_key)  # fmt: skip
    stats: dict = {}
    rows = [s for b in HomeClient(home, query).read(elsewhere, stats) for s in b.column("sequenceNumber").to_pylist()]
    assert rows == list(range(40)) and stats["read"] == 40 and service.listener.served == 1
    assert query.key.reveal() not in " ".join(r.getMessage() for r in caplog.records)


def test_a_task_whose_home_cannot_be_reached_reads_the_range_itself(eventhub, home_service, caplog):
    _, worker = home_service
    send(eventhub.connection_string, [f"u{i}" for i in range(30)], partition_id="1")
    settings = parse_connection_string(eventhub.connection_string)
    gone = Home("an-executor-that-is-gone", ("127.0.0.1",), free_port())
    request = RangeRequest(ReceiverConfig(receiver_timeout=20), "1", 0, 30, True, query=new_query_key(), home=gone,
                           homes=True, settings=settings)  # fmt: skip
    stats: dict = {}
    with caplog.at_level(logging.WARNING, logger="eventhubs_spark"):
        rows = [s for b in worker.read(request, True, stats) for s in b.column("sequenceNumber").to_pylist()]
        again = [s for b in worker.read(request, True, {}) for s in b.column("sequenceNumber").to_pylist()]
    assert rows == list(range(30)) and again == list(range(30)) and stats["via"] == "worker"
    said = [r.getMessage() for r in caplog.records if "cannot serve it" in r.getMessage()]
    assert len(said) == 1 and "an-executor-that-is-gone" in said[0], said


def test_a_home_that_goes_away_mid_range_leaves_the_task_reading_on_from_the_next_event(
    eventhub, home_service, monkeypatch
):
    """The home sends the first chunk of a range, then its connection ends (as when its executor dies): the
    task reads the rest itself, from the next sequence number: every event once."""
    from eventhubs_spark.executor import receiver_service as service_module

    service, worker = home_service
    send(eventhub.connection_string, [f"m{i}" for i in range(40)], partition_id="3")
    settings = parse_connection_string(eventhub.connection_string)
    query = new_query_key()
    config = ReceiverConfig(receiver_timeout=20, prefetch=5)  # small chunks: the first is not the whole range
    mine = RangeRequest(config, "3", 0, 40, True, query=query, homes=True, settings=settings)
    answer = worker.service().hello(mine)  # type: ignore[union-attr]
    real = service_module.read_here

    def dies_after_one_chunk(request, result, pool):
        chunks = real(request, result, pool)
        yield next(chunks)
        chunks.close()
        raise service_module._WorkerGone("the home's executor died")

    monkeypatch.setattr(service_module, "read_here", dies_after_one_chunk)
    elsewhere = RangeRequest(config, "3", 0, 40, True, query=query, homes=True, settings=settings,
                             home=Home("another-executor", ("127.0.0.1",), int(answer["port"])))  # fmt: skip
    stats: dict = {}
    rows = [s for b in worker.read(elsewhere, True, stats) for s in b.column("sequenceNumber").to_pylist()]
    assert rows == list(range(40)), rows
    assert stats["via"] == "worker" and service.listener.served == 1


def test_a_home_whose_port_is_closed_under_it_listens_again_and_tells_the_driver(eventhub, home_service, caplog):
    """The service's listening socket fails (as ``ss -K`` or a sandbox does to it): it says so, listens on a
    new port at once and tells the query's driver, so its partitions come back to it."""
    import socket

    from eventhubs_spark.planning.partition_homes import QueryDriver

    service, worker = home_service
    driver = QueryDriver(eventhub.name, bind="127.0.0.1")
    try:
        settings = parse_connection_string(eventhub.connection_string)
        mine = RangeRequest(ReceiverConfig(receiver_timeout=20), "0", 0, 0, True, query=driver.query,
                            driver=driver.address(), homes=True, settings=settings)  # fmt: skip
        client = worker.service()
        assert client is not None
        with caplog.at_level(logging.INFO, logger="eventhubs_spark"):
            first = int(client.hello(mine)["port"])
            assert [h.port for h in driver.live()] == [first]
            service.listener._server.shutdown(socket.SHUT_RDWR)  # accept() now fails in the service
            deadline = time.monotonic() + 10
            while [h.port for h in driver.live()] == [first]:
                assert time.monotonic() < deadline, "the driver did not hear of the new port"
                time.sleep(0.02)
        second = service.listener.port
        assert second != first and [h.port for h in driver.live()] == [second]
        socket.create_connection(("127.0.0.1", second), timeout=2).close()
        said = " ".join(r.getMessage() for r in caplog.records)
        assert f"its port {first} closed under it" in said and f"it listens again on port {second}" in said
        assert f"serves query {driver.query.query}" in said and driver.query.key.reveal() not in said
    finally:
        driver.close()


def test_a_home_at_a_slow_range_says_it_is_alive_and_a_silent_one_is_left_for_the_task_to_read(
    eventhub, home_service, monkeypatch, caplog
):
    """A range whose events are not there yet keeps the home quiet for longer than a worker waits on a silent
    home: its keep-alives hold the task at the home until the events come. A home that says nothing at all (a
    stopped process: no range, no keep-alive) is given up after that wait, not the receiver time-out and a
    minute more, and the task reads the range itself: every event once."""
    from eventhubs_spark.executor import receiver_service as service_module
    from eventhubs_spark.executor import service_client as client_module

    monkeypatch.setattr(client_module, "SILENT_LIMIT", 2.5)
    _, worker = home_service
    settings = parse_connection_string(eventhub.connection_string)
    query = new_query_key()
    config = ReceiverConfig(receiver_timeout=30)
    mine = RangeRequest(config, "1", 0, 0, True, query=query, homes=True, settings=settings)
    port = int(worker.service().hello(mine)["port"])  # type: ignore[union-attr]
    home = Home("another-executor", ("127.0.0.1",), port)
    slow = RangeRequest(config, "1", 0, 20, True, query=query, homes=True, home=home, settings=settings)
    later = threading.Timer(6.0, send, args=(eventhub.connection_string, [f"s{i}" for i in range(20)]),
                            kwargs={"partition_id": "1"})  # fmt: skip
    later.start()
    stats: dict = {}
    started = time.monotonic()
    rows = [s for b in worker.read(slow, True, stats) for s in b.column("sequenceNumber").to_pylist()]
    assert rows == list(range(20)) and stats["via"] == f"home:{home.executor}", stats
    assert time.monotonic() - started >= 5.0, "the events came after 6 s: the home waited for them"

    # a home that stops answering: its range never starts and it sends no keep-alive
    release = threading.Event()

    def stopped(request, result, pool):
        release.wait(60)
        yield from ()

    monkeypatch.setattr(service_module, "read_here", stopped)
    monkeypatch.setattr(service_module._RangeSender, "_keep_alive", lambda self: None)
    again = RangeRequest(config, "1", 0, 20, True, query=query, homes=True, home=home, settings=settings)
    stats = {}
    started = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, logger="eventhubs_spark"):
            rows = [s for b in worker.read(again, True, stats) for s in b.column("sequenceNumber").to_pylist()]
    finally:
        release.set()
    waited = time.monotonic() - started
    assert rows == list(range(20)) and stats["via"] == "worker", stats
    assert waited < 20, f"the task waited {waited:.1f} s on a silent home"
    said = [r.getMessage() for r in caplog.records if "cannot serve it" in r.getMessage()]
    assert len(said) == 1 and "said nothing for 2.5 s" in said[0], said


def test_a_home_that_drops_packets_costs_a_worker_one_bounded_attempt_then_nothing(eventhub, home_service):
    """Issue 46: the home's port drops packets (a full accept queue stands in for the firewall): the first task
    pays one connect time-out, the next ones read at once in the worker, exactly, keeping no link."""
    from tests.integration.connector.test_where_it_runs import BlackHole

    _, worker = home_service
    send(eventhub.connection_string, [f"d{i}" for i in range(20)], partition_id="2")
    settings = parse_connection_string(eventhub.connection_string)
    hole = BlackHole()
    try:
        behind = Home("an-executor-behind-a-firewall", ("127.0.0.1",), hole.port)
        request = RangeRequest(ReceiverConfig(receiver_timeout=20), "2", 0, 20, True, query=new_query_key(),
                               home=behind, homes=True, settings=settings)  # fmt: skip
        started = time.monotonic()
        first = [s for b in worker.read(request, True, {}) for s in b.column("sequenceNumber").to_pylist()]
        paid = time.monotonic() - started
        times, stats = [], {}
        for _ in range(3):
            started = time.monotonic()
            stats = {}
            again = [s for b in worker.read(request, True, stats) for s in b.column("sequenceNumber").to_pylist()]
            times.append(time.monotonic() - started)
            assert again == list(range(20))
    finally:
        hole.close()
    assert first == list(range(20))
    from eventhubs_spark.interprocess.sockets import PROBE_TIMEOUT

    assert paid >= PROBE_TIMEOUT * 0.9, "the home's port should have dropped the connect"
    assert stats["home_down"] == "an-executor-behind-a-firewall" and stats["via"] == "worker"
    assert max(times) < PROBE_TIMEOUT / 2, f"a later task tried the home again: {times}"


def test_a_chunk_of_another_range_is_refused_and_the_task_reads_on_exactly():
    """Issue 46: every chunk names the range it answers (its id) and where it ends; one that is not of the range
    asked for (stale, or past its end) ends the connection with where the task reads on."""
    import socket

    from eventhubs_spark.executor import service_client as client_module
    from eventhubs_spark.executor.service_client import ServiceGone
    from eventhubs_spark.interprocess.service_framing import RAW, READ, SPANS, recv, send

    settings = parse_connection_string("Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=a;SharedAccessKey=b;EntityPath=h")
    request = RangeRequest(ReceiverConfig(), "0", 10, 50, True, range_id=7, settings=settings)
    for range_id, after in ((8, 20), (7, 60), (7, 10)):  # another range's; past the end; not past the start
        ours, theirs = socket.socketpair()
        closed = []

        def serve(sock: socket.socket = theirs, rid: int = range_id, up_to: int = after) -> None:
            recv(sock)
            send(sock, RAW, SPANS.pack(rid, up_to, 0))

        threading.Thread(target=serve, daemon=True).start()
        with pytest.raises(ServiceGone) as gone:
            list(client_module._range(ours, READ, b"{}", request, {}, lambda c=closed: c.append(True)))
        assert gone.value.next_seq == 10 and closed == [True]
        assert "a chunk of another range" in str(gone.value)
        ours.close()
        theirs.close()


def test_without_homes_no_executor_listens_and_with_them_its_service_does(eventhub, tmp_path, monkeypatch):
    """Issue 46: eventhubs.partitionHomes=false opens no TCP port in the executor's processes (checked with ss on
    the receiver service's real process); a query with homes makes the same service listen."""
    import os
    import signal
    import subprocess
    import tempfile

    from eventhubs_spark.interprocess.driver_channel import DriverChannel

    local = tmp_path / "blockmgr-ports"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(local))
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    send(eventhub.connection_string, [f"p{i}" for i in range(10)], partition_id="0")
    settings = parse_connection_string(eventhub.connection_string)
    query = new_query_key()
    driver = DriverChannel(query, lambda m: {"ok": True}, bind="127.0.0.1")
    worker = Runtime(reap_every=0)

    def listening(pid: int) -> list[str]:
        out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
        return [line for line in out.splitlines() if f"pid={pid}," in line]

    pid = None
    try:
        stats: dict = {}
        without = RangeRequest(ReceiverConfig(receiver_timeout=20), "0", 0, 10, True, query=query,
                               driver=driver.address(), homes=False, settings=settings)  # fmt: skip
        rows = [s for b in worker.read(without, True, stats) for s in b.column("sequenceNumber").to_pylist()]
        assert rows == list(range(10)) and stats["via"] == "service"
        pid = int(stats["pid"])
        assert pid != os.getpid() and listening(pid) == [], "no port without homes"
        with_homes = RangeRequest(ReceiverConfig(receiver_timeout=20), "0", 0, 10, True, query=new_query_key(),
                                  homes=True, bind="127.0.0.1", settings=settings)  # fmt: skip
        assert [s for b in worker.read(with_homes, True, {}) for s in b.column("sequenceNumber").to_pylist()] == rows
        ports = listening(pid)
        assert len(ports) == 1 and "127.0.0.1:" in ports[0], ports  # eventhubs.executorBindAddress
    finally:
        driver.close()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)


def test_a_service_that_goes_tells_the_driver_which_drops_it_as_a_home_at_once(eventhub, home_service, caplog):
    """A service whose executor ended (SIGKILLed: the service sees its JVM gone within a second) says so to its
    queries' drivers: the next plan places no partition there, instead of for 30 s after its last announcement
    (each retried task on a replacement executor paying a connection to a gone home meanwhile)."""
    from eventhubs_spark.planning.partition_homes import QueryDriver

    service, worker = home_service
    driver = QueryDriver(eventhub.name, bind="127.0.0.1")
    try:
        settings = parse_connection_string(eventhub.connection_string)
        request = RangeRequest(ReceiverConfig(receiver_timeout=20), "0", 0, 0, True, query=driver.query,
                               driver=driver.address(), homes=True, settings=settings)  # fmt: skip
        client = worker.service()
        assert client is not None
        client.hello(request)  # the service registers the query and announces itself to its driver
        assert [h.executor for h in driver.live()] == [service.executor]
        assert set(driver.homes(["0", "1"]).values()) == {driver.live()[0]}
        with caplog.at_level(logging.INFO, logger="eventhubs_spark"):
            assert service.listener.farewell("the executor (pid 4242) has ended") == 1
        assert driver.live() == [] and driver.homes(["0", "1"]) == {}, "no longer a home, at once"
        assert any("has stopped (the executor (pid 4242) has ended)" in r.getMessage() for r in caplog.records)
    finally:
        driver.close()
