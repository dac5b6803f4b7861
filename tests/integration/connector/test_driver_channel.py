"""A stream's driver side: what a task must tell the driver reaches the driver's log, from the query's
processes only (both sides prove the query's key), never showing the key; services announce themselves
and homes are placed over them."""

from __future__ import annotations

import logging
import os
import time

from pyspark import cloudpickle

from eventhubs_spark.auth.secret import Secret
from eventhubs_spark.interprocess import driver_channel
from eventhubs_spark.interprocess.task_ranges import QueryKey
from eventhubs_spark.planning.partition_homes import QueryDriver
from eventhubs_spark.source import EventHubsStreamReader, read_partition
from tests.integration.sdk_helpers import send


def wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def _said(caplog) -> str:
    return " ".join(r.getMessage() for r in caplog.records)


def test_the_driver_answers_the_querys_processes_and_refuses_others(caplog):
    driver = QueryDriver("telemetry", bind="127.0.0.1")
    try:
        where = driver.address()
        assert "127.0.0.1" in where.hosts and driver.query.key.reveal() not in repr(driver.query)
        announce = {"kind": "service", "executor": "e1", "hosts": ["127.0.0.1"], "port": 1}
        assert driver_channel.ask(where, driver.query, announce) == {"ok": True}
        assert [h.executor for h in driver.live()] == ["e1"]
        impostor = QueryKey(driver.query.query, Secret("not-the-key"))
        with caplog.at_level(logging.WARNING, logger="eventhubs_spark"):
            assert driver_channel.ask(where, impostor, {**announce, "executor": "e2"}) is None
            assert wait_for(lambda: driver.channel.refused == 1)
            # the driver counts the refusal, then says it: wait for the line, not only the count
            assert wait_for(lambda: "refused a connection to the query's driver" in _said(caplog))
        assert [h.executor for h in driver.live()] == ["e1"], "nothing of a refused connection is used"
        said = _said(caplog)
        assert driver.query.key.reveal() not in said and "not-the-key" not in said
    finally:
        driver.close()
    assert driver_channel.ask(where, driver.query, announce) is None, "a closed driver: the caller goes on"


def test_homes_are_placed_over_the_live_services_and_a_first_batch_waits_for_them_to_settle():
    driver = QueryDriver("telemetry", bind="127.0.0.1")
    try:
        where, query = driver.address(), driver.query
        assert driver.homes([str(p) for p in range(6)]) == {}, "no service known: no homes"
        for e in ("e1", "e2", "e3"):
            driver_channel.ask(where, query, {"kind": "service", "executor": e, "hosts": ["127.0.0.1"], "port": 9})
        placed = driver.homes([str(p) for p in range(6)])
        assert sorted(h.executor for h in placed.values()) == ["e1", "e1", "e2", "e2", "e3", "e3"]
        started = time.monotonic()
        answer = driver_channel.ask(where, query, {"kind": "home", "partition": "4"}, timeout=20)
        assert time.monotonic() - started >= 1.0, "the answer waited for the services to settle"
        assert answer == {"home": {"executor": placed["4"].executor, "hosts": ["127.0.0.1"], "port": 9}}
    finally:
        driver.close()


def test_in_local_mode_a_first_batch_does_not_wait_for_other_services_that_cannot_come():
    """Spark's one executor in local mode lives in the driver's JVM, as its service says: no other can come,
    so the first batch's question is answered at once; a service in another JVM (a cluster) brings the
    settling wait back."""
    driver = QueryDriver("telemetry", bind="127.0.0.1")
    driver.jvm = "this-host:4242"  # the stream runner's JVM (found from /proc when Spark runs it)
    try:
        where, query = driver.address(), driver.query
        announce = {"kind": "service", "executor": "e1", "hosts": ["127.0.0.1"], "port": 9, "jvm": "this-host:4242"}
        driver_channel.ask(where, query, announce)
        started = time.monotonic()
        answer = driver_channel.ask(where, query, {"kind": "home", "partition": "0"}, timeout=20)
        assert time.monotonic() - started < 1.0, "nothing to wait for in local mode"
        assert answer == {"home": {"executor": "e1", "hosts": ["127.0.0.1"], "port": 9}}
        driver_channel.ask(where, query, {**announce, "executor": "e2", "jvm": "other-host:77"})
        started = time.monotonic()
        driver_channel.ask(where, query, {"kind": "home", "partition": "1"}, timeout=20)
        assert time.monotonic() - started >= 1.0, "an executor of a cluster: the answer waits for the others"
    finally:
        driver.close()


def test_a_worker_that_reads_for_itself_is_told_once_in_the_drivers_log(eventhub, tmp_path, monkeypatch, caplog):
    """A stream's planned ranges carry its key and driver; a task whose executor's receiver service cannot be
    used (here: the socket directory has the wrong mode) reads every event itself, and the driver's log says
    so once, naming the executor and why."""
    import tempfile

    from eventhubs_spark.process import runtime

    send(eventhub.connection_string, [f"e{i}" for i in range(30)], partition_id="1")
    reader = EventHubsStreamReader(
        {"eventhubs.connectionString": eventhub.connection_string, "eventhubs.startingPosition": '{"offset": "-1"}'}
    )
    start = reader.initialOffset()
    end = reader.latestOffset(start, None) if reader.latestOffset.__code__.co_argcount > 1 else reader.latestOffset()
    planned = reader.partitions(start, end)
    driver = reader.query_driver()
    assert driver is not None
    requests = [r for p in planned for r in p.requests]
    assert requests and all(r.query == driver.query and r.driver == driver.address() for r in requests)
    assert all(r.home is None for r in requests), "no service known yet"
    copy = cloudpickle.loads(cloudpickle.dumps(reader))
    assert not hasattr(copy, "_driver"), "the listening socket stays in the runner"

    private = tmp_path / f"ehs-{os.getuid()}"
    private.mkdir(mode=0o755)
    os.chmod(private, 0o755)  # a socket directory others can read: the service is not used
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    local = tmp_path / "blockmgr-d"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(local))
    previous = runtime.use(runtime.Runtime(reap_every=0))  # a new worker: it has not said it yet
    try:
        with caplog.at_level(logging.WARNING, logger="eventhubs_spark"):
            rows = [s for p in planned for b in read_partition(p) for s in b.column("sequenceNumber").to_pylist()]
            assert wait_for(lambda: any("reads for itself" in r.getMessage() for r in caplog.records))
            rows += [s for p in planned for b in read_partition(p) for s in b.column("sequenceNumber").to_pylist()]
            time.sleep(0.5)
    finally:
        runtime.use(previous)
        driver.close()
    assert sorted(rows) == sorted(list(range(30)) * 2), "every event read, by the worker itself"
    told = [r.getMessage() for r in caplog.records if "reads for itself" in r.getMessage()]
    assert len(told) == 1, told
    assert "mode 0700" in told[0] and f"hub {eventhub.name}" in told[0]
    assert driver.query.key.reveal() not in " ".join(r.getMessage() for r in caplog.records)


def test_a_service_dropped_as_unreachable_comes_back_only_when_the_driver_reaches_it(caplog):
    """A task could not reach its home and neither can the driver: it is dropped. Its announcements of a port
    nothing answers on are then not believed (the partitions would flap back to it every heartbeat); an
    announcement of a port the driver reaches makes it a home again."""
    import socket

    driver = QueryDriver("telemetry", bind="127.0.0.1")
    dead = socket.create_server(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()
    alive = socket.create_server(("127.0.0.1", 0))
    try:
        where, query = driver.address(), driver.query
        announce = {"kind": "service", "executor": "e1", "hosts": ["127.0.0.1"], "port": dead_port}
        driver_channel.ask(where, query, announce)
        driver_channel.ask(where, query, {**announce, "executor": "e2", "port": alive.getsockname()[1]})
        assert [h.executor for h in driver.live()] == ["e1", "e2"]
        with caplog.at_level(logging.WARNING, logger="eventhubs_spark"):
            driver_channel.ask(
                where, query, {"kind": "home_unreachable", "executor": "e1", "host": "h", "why": "refused"}
            )
        assert [h.executor for h in driver.live()] == ["e2"]
        assert any("it is no longer a home" in r.getMessage() for r in caplog.records)
        driver_channel.ask(where, query, announce)  # its heartbeat, same dead port
        assert [h.executor for h in driver.live()] == ["e2"], "a port nobody answers on is not a home"
        driver_channel.ask(where, query, {**announce, "port": alive.getsockname()[1]})  # listening again
        assert [h.executor for h in driver.live()] == ["e1", "e2"]
    finally:
        alive.close()
        driver.close()


def test_what_tasks_read_reaches_the_driver_over_one_kept_connection_made_again_when_it_breaks():
    reads: list[tuple[str, int, int, str | None]] = []
    driver = QueryDriver("telemetry", bind="127.0.0.1", on_read=lambda *read: reads.append(read))
    try:
        where = driver.address()
        for end in (10, 20, 30):
            assert driver_channel.ask_kept(
                where, driver.query, {"kind": "read", "ranges": [["3", end, 1000 + end]]}
            ) == {"ok": True}
        assert reads == [("3", 10, 1010, None), ("3", 20, 1020, None), ("3", 30, 1030, None)]
        assert driver.channel.accepted == 1
        for kept in driver_channel._KEPT.values():  # as when the driver closed it idle
            kept.close()
        ranges = [["3", 40, 1040, "8192"], ["x"], ["4", 7, 1, 12]]  # an offset that is not a string says none
        assert driver_channel.ask_kept(where, driver.query, {"kind": "read", "ranges": ranges}) == {"ok": True}
        assert reads[-2:] == [("3", 40, 1040, "8192"), ("4", 7, 1, None)]
        assert driver.channel.accepted == 2  # made again once; a malformed entry is passed over
        wrong = QueryKey(driver.query.query, Secret("not-the-key"))
        assert driver_channel.ask_kept(where, wrong, {"kind": "read", "ranges": [["3", 50, 1]]}) is None
        assert reads[-1] == ("4", 7, 1, None)
    finally:
        driver.close()


def test_a_read_told_reaches_the_driver_with_no_answer_on_the_kept_connection_made_again_when_the_driver_closed_it(
    monkeypatch,
):
    """tell_kept: the driver takes the message and sends nothing back, so the kept connection stays in step for the
    asks that share it; one the driver closed idle (a send into it would still succeed, and be lost) is found out
    before the send and made again."""
    monkeypatch.setattr(driver_channel, "KEPT_IDLE", 0.3)
    reads: list[tuple[str, int, int | None, str | None]] = []
    driver = QueryDriver("telemetry", bind="127.0.0.1", on_read=lambda *read: reads.append(read))

    def arrived(count: int) -> None:
        deadline = time.monotonic() + 5
        while len(reads) < count:
            assert time.monotonic() < deadline, f"the driver has {len(reads)} of {count} reads told"
            time.sleep(0.01)

    try:
        where = driver.address()
        assert driver_channel.tell_kept(where, driver.query, {"kind": "read", "ranges": [["1", 5, 100]]})
        assert driver_channel.tell_kept(where, driver.query, {"kind": "read", "ranges": [["1", 6, 101], ["2", 4]]})
        arrived(3)
        assert reads == [("1", 5, 100, None), ("1", 6, 101, None), ("2", 4, None, None)]
        assert driver_channel.ask_kept(where, driver.query, {"kind": "read", "ranges": [["1", 7, 102]]}) == {"ok": True}
        assert driver.channel.accepted == 1  # one connection, still in step: the ask got its own answer
        time.sleep(0.8)  # the driver closes it, idle
        assert driver_channel.tell_kept(where, driver.query, {"kind": "read", "ranges": [["1", 9, 103]]})
        arrived(5)
        assert reads[-1] == ("1", 9, 103, None) and driver.channel.accepted == 2
        wrong = QueryKey(driver.query.query, Secret("not-the-key"))
        assert not driver_channel.tell_kept(where, wrong, {"kind": "read", "ranges": [["3", 50, 1]]})
        assert driver_channel.tell_kept(None, driver.query, {"kind": "read", "ranges": []}) is False
    finally:
        driver.close()


def test_a_first_batch_waits_for_the_service_of_an_executor_a_task_said_it_runs_in():
    """A cold executor's service starts seconds after the warm ones; its task says it is coming first, and the
    homes wait for that service (placed without it, partitions would move once it came, and each that moved
    would be read again from Event Hubs by its new home)."""
    driver = QueryDriver("telemetry", bind="127.0.0.1")
    try:
        where, query = driver.address(), driver.query
        for e in ("e1", "e2"):
            driver_channel.ask(where, query, {"kind": "service", "executor": e, "hosts": ["127.0.0.1"], "port": 9,
                                       "jvm": f"host:{e}"})  # fmt: skip
        assert driver_channel.ask(where, query, {"kind": "coming", "jvm": "host:e3"}) == {"ok": True}

        def late_service() -> None:
            time.sleep(3.0)  # past the 1.5 s the others' quiet would have waited
            driver_channel.ask(where, query, {"kind": "service", "executor": "e3", "hosts": ["127.0.0.1"], "port": 9,
                                       "jvm": "host:e3"})  # fmt: skip

        import threading

        threading.Thread(target=late_service, daemon=True).start()
        started = time.monotonic()
        driver_channel.ask(where, query, {"kind": "home", "partition": "0"}, timeout=20)
        assert time.monotonic() - started >= 2.5, "the answer waited for the coming executor's service"
        assert sorted(h.executor for h in driver.live()) == ["e1", "e2", "e3"]
    finally:
        driver.close()
