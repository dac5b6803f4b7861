"""Unit tests of :mod:`eventhubs_spark.planning.partition_homes` (messages handed to the driver directly; over
its channel from real services in ``tests/integration/connector/test_homes.py``)."""

from __future__ import annotations

from eventhubs_spark.planning.partition_homes import EXPIRY, QueryDriver


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _service(executor: str, port: int) -> dict:
    return {"kind": "service", "executor": executor, "hosts": ["127.0.0.1"], "port": port, "jvm": f"host:{port}"}


def test_homes_follow_the_services_heard_from_and_a_service_that_goes_or_falls_silent_is_dropped():
    clock, reads = Clock(), []
    driver = QueryDriver("hub", clock=clock, bind="127.0.0.1", on_read=lambda *a: reads.append(a))
    try:
        assert driver.homes(["0", "1"]) == {}, "no service known: no homes"
        assert driver.handle(_service("a", 1001)) == {"ok": True}
        assert driver.handle(_service("b", 1002)) == {"ok": True}
        homes = driver.homes([str(p) for p in range(8)])
        assert set(homes) == {str(p) for p in range(8)} and {h.executor for h in homes.values()} == {"a", "b"}
        assert driver.homes([str(p) for p in range(8)]) == homes, "the same services give the same homes"
        driver.handle({"kind": "gone", "executor": "a", "why": "its executor ended"})
        assert {h.executor for h in driver.homes(["0", "1", "2"]).values()} == {"b"}
        clock.now += EXPIRY + 1  # b said nothing since: no longer live
        assert driver.homes(["0"]) == {}
        assert driver.handle({"kind": "service", "executor": "c"}) is None, "a malformed announcement is refused"
        assert driver.handle({"kind": "no such kind"}) is None
        ranges = [["3", 40, 1_700_000_000_000_000], ["bad"], ["4", 9], ["5", 3, "x"]]
        assert driver.handle({"kind": "read", "ranges": ranges}) == {"ok": True}
        assert reads == [("3", 40, 1_700_000_000_000_000, None), ("4", 9, None, None)], (
            "a range with nothing left to read says its end alone; a malformed entry says nothing"
        )
    finally:
        driver.close()


def _ask_home(driver: QueryDriver, partition: str) -> dict:
    """The driver's answer to a first batch's home question, asked on a thread: its waits go by the injected
    clock, which the test holds still, so an answer that waits for something that never comes never returns."""
    import threading

    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(driver.handle({"kind": "home", "partition": partition})))
    thread.daemon = True
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "the home question waits for a service that will not come"
    return out


def test_a_first_batch_does_not_wait_for_the_service_of_an_executor_that_ended():
    """Issue 64: on local-cluster with an executor killed every 12 s, every task of a first batch waited the full
    settling time (10 s) for the service of a JVM that had said a task ran in it and whose service then said it
    was gone: the JVM stayed awaited for ever. Gone: no longer awaited."""
    from eventhubs_spark.planning.partition_homes import SETTLE

    clock = Clock()
    driver = QueryDriver("hub", clock=clock, bind="127.0.0.1")
    try:
        driver.handle({"kind": "coming", "jvm": "host:1001"})
        driver.handle({"kind": "coming", "jvm": "host:1002"})
        driver.handle(_service("a", 1001))
        driver.handle(_service("b", 1002))
        clock.now += SETTLE + 1  # settled: both came
        assert _ask_home(driver, "0")["home"]["executor"] in ("a", "b")
        driver.handle({"kind": "gone", "executor": "a", "why": "its executor ended"})
        assert _ask_home(driver, "0")["home"]["executor"] == "b"
    finally:
        driver.close()


def test_a_first_batch_awaits_an_executor_whose_service_never_came_for_the_settling_time_only():
    """A JVM said a task runs in it, and was killed before its service came: its service is awaited for
    MAX_SETTLE seconds from that word, not by every later question."""
    from eventhubs_spark.planning.partition_homes import MAX_SETTLE, SETTLE

    clock = Clock()
    driver = QueryDriver("hub", clock=clock, bind="127.0.0.1")
    try:
        driver.handle(_service("b", 1002))
        driver.handle({"kind": "coming", "jvm": "host:killed"})
        clock.now += max(SETTLE, MAX_SETTLE) + 1
        assert _ask_home(driver, "3")["home"]["executor"] == "b"
    finally:
        driver.close()


def test_a_task_is_not_held_for_services_already_there_but_dropped_as_unreachable(monkeypatch):
    """Behind a firewall on the homes' ports (the driver's open), every service is dropped as unreachable; a task
    then asks the driver for its partition's home, as a first batch's does. It waited the whole settling time for a
    service to come (10 s in every task of every batch, a stream of 0.6 s batches at 20-30 s): the dropped ones
    have come, so the answer is at once, and no home."""
    from eventhubs_spark.planning import partition_homes
    from eventhubs_spark.planning.partition_homes import SETTLE

    monkeypatch.setattr(partition_homes, "_reaches", lambda home: False)  # the driver cannot reach them either
    clock = Clock()
    driver = QueryDriver("hub", clock=clock, bind="127.0.0.1")
    try:
        for executor, port in (("a", 1001), ("b", 1002)):
            driver.handle({"kind": "coming", "jvm": f"host:{port}"})
            driver.handle(_service(executor, port))
        clock.now += SETTLE + 1
        assert _ask_home(driver, "0")["home"]["executor"] in ("a", "b")
        for executor in ("a", "b"):
            driver.handle({"kind": "home_unreachable", "executor": executor, "host": "h", "why": "dropped"})
        assert driver.unreachable() == {"a", "b"} and driver.homes(["0"]) == {}
        assert _ask_home(driver, "0") == {}, "no home, at once"
    finally:
        driver.close()


def test_a_service_not_reached_ahead_of_the_first_question_is_not_waited_on_by_it(monkeypatch, caplog):
    """A running stream's driver connects to each service ahead of its triggers' questions of where partitions end
    (want_ends). One it cannot reach then is marked as a failed question would be: the next trigger asks Event Hubs
    for its partitions at once instead of waiting ENDS_TIMEOUT on it, and the driver's log says so, once; after
    ENDS_RETRY_AFTER it is asked again. A service that connects fine is not marked."""
    import logging
    import time

    from eventhubs_spark.interprocess import partition_ends
    from eventhubs_spark.planning.partition_homes import ENDS_RETRY_AFTER

    connects: list[str] = []
    down = {"down"}

    class Conn:
        max_frame = 0

        def close(self):
            pass

    def connect_home(home, query, timeout, handshake):
        connects.append(home.executor)
        if home.executor in down:
            raise ConnectionRefusedError("refused")
        return Conn()

    monkeypatch.setattr(partition_ends, "connect_home", connect_home)
    asked: list[str] = []
    monkeypatch.setattr(partition_ends.EndsClient, "ask", lambda self, timeout: asked.append(self.home.executor) or {})
    clock = Clock()
    driver = QueryDriver("hub", clock=clock, bind="127.0.0.1")
    try:
        with caplog.at_level(logging.INFO, logger="eventhubs_spark"):
            driver.handle(_service("up", 1001))
            driver.want_ends()
            driver.handle(_service("down", 1002))
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not any("ahead" in r.getMessage() for r in caplog.records):
                time.sleep(0.01)
        said = [r.getMessage() for r in caplog.records if "could not be reached ahead" in r.getMessage()]
        assert len(said) == 1 and "down" in said[0] and "ConnectionRefusedError" in said[0], said
        assert sorted(connects) == ["down", "up"]
        driver.executor_ends()
        assert asked == ["up"], "the trigger asked only the service it could reach"
        clock.now += ENDS_RETRY_AFTER
        asked.clear()
        down.clear()  # it can be reached now: announced again (new after its expiry), it is connected to ahead
        driver.handle(_service("up", 1001))
        driver.handle(_service("down", 1002))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and connects.count("down") < 2:  # "up" keeps its connection
            time.sleep(0.01)
        driver.executor_ends()
        assert sorted(asked) == ["down", "up"], "asked again after ENDS_RETRY_AFTER"
    finally:
        driver.close()
