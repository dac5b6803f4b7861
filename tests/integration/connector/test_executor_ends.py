"""Where partitions end, as a receiver service's links know it, asked by a driver (issue 64): against the emulator,
with a real service, real links and the query's sealed connection. Planning from the answers:
``tests/unit/planning/test_executor_ends.py``; in a running Spark stream:
``tests/integration/spark/test_reader_spark.py``.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from azure.eventhub import EventHubConsumerClient

from eventhubs_spark.auth.secret import Secret
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.interprocess.partition_ends import EndsClient
from eventhubs_spark.interprocess.sealed_socket import RefusedError
from eventhubs_spark.interprocess.task_ranges import Home, QueryKey, RangeRequest, ReceiverConfig
from eventhubs_spark.planning.partition_homes import ENDS_RETRY_AFTER, QueryDriver
from eventhubs_spark.process.runtime import Runtime
from tests.conftest import free_port
from tests.integration.sdk_helpers import send


def _properties(conn: str, partition: str) -> dict:
    with EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default") as client:
        return client.get_partition_properties(partition)


def _read(worker: Runtime, request: RangeRequest) -> list[int]:
    return [s for b in worker.read(request, True, {}) for s in b.column("sequenceNumber").to_pylist()]


def _home_range(driver: QueryDriver, settings, partition: str, start: int, end: int) -> RangeRequest:
    """A stream's range of ``partition``, read at its home (the service)."""
    return RangeRequest(ReceiverConfig(receiver_timeout=20), partition, start, end, True, query=driver.query,
                        driver=driver.address(), homes=True, settings=settings)  # fmt: skip


def _until_vouched(client: EndsClient, partition: str, end: int, what: str) -> dict:
    """The service's answers, asked until its links vouch for ``partition`` up to ``end`` (10 s at most)."""
    deadline = time.monotonic() + 10
    while (found := client.ask(2.0)).get(partition) is None or found[partition].end < end:
        assert time.monotonic() < deadline, f"{what}: {found}"
        time.sleep(0.05)
    return found


def test_a_service_vouches_for_the_ends_its_open_links_know_and_a_driver_learns_only_what_changed(
    eventhub, home_service
):
    svc, worker = home_service
    send(eventhub.connection_string, [f"e{i}" for i in range(40)], partition_id="2")
    send(eventhub.connection_string, [f"f{i}" for i in range(5)], partition_id="1")
    settings = parse_connection_string(eventhub.connection_string)
    driver = QueryDriver(eventhub.name, bind="127.0.0.1")
    try:
        # its link read on past the range: all 40 are there
        assert _read(worker, _home_range(driver, settings, "2", 0, 20)) == list(range(20))
        assert [h.executor for h in driver.live()] == [svc.executor], "the service announced itself"
        home = driver.live()[0]
        client = EndsClient(home, driver.query)
        found = _until_vouched(client, "2", 40, "the link never vouched for partition 2's end")
        props = _properties(eventhub.connection_string, "2")
        vouch = found["2"]
        assert vouch.end == props["last_enqueued_sequence_number"] + 1 == 40
        assert vouch.offset == props["last_enqueued_offset"]
        assert vouch.enqueued_ms == round(props["last_enqueued_time_utc"].timestamp() * 1000)
        assert "1" not in found, "a partition no link reads is not vouched for (it is asked of Event Hubs)"
        answered = svc.listener.ends_answered

        # new events reach the open link: the next answer moves the end (and says nothing of the rest)
        send(eventhub.connection_string, [f"g{i}" for i in range(5)], partition_id="2")
        _until_vouched(client, "2", 45, "the link did not vouch for the new events")
        assert svc.listener.ends_answered > answered
        # ...and the driver asks every live service at once, as a trigger does
        ends = driver.executor_ends()
        assert ends is not None and ends["2"].end == 45 and set(ends) == {"2"}
        # two services (here the same one under a second name): both asked at once, their answers merged
        driver.handle({"kind": "service", "executor": "a-second-name", "hosts": list(home.hosts), "port": home.port,
                       "jvm": "elsewhere:2"})  # fmt: skip
        assert len(driver.live()) == 2
        for _ in range(3):  # the askers' threads are kept across triggers
            ends = driver.executor_ends()
            assert ends is not None and ends["2"].end == 45 and set(ends) == {"2"}
        assert sum(t.name.startswith("eventhubs-ends-ask") for t in threading.enumerate()) == 1

        # a receiver in a task's use vouches as an idle one does: a long task does not hide its partition's new
        # events from the driver (asked of Event Hubs otherwise)
        receiver = svc.pool.acquire(settings, ReceiverConfig(receiver_timeout=20), "2", 20)
        try:
            assert client.ask(2.0)["2"].end == 45, "a receiver in use: its link's newest event still exists"
            send(eventhub.connection_string, [f"h{i}" for i in range(2)], partition_id="2")
            _until_vouched(client, "2", 47, "new events on a link in a task's use were not told")
        finally:
            svc.pool.release(receiver, True)
        assert client.ask(2.0)["2"].end == 47, "back in the pool: the same"

        # a stranger (the query's id, not its key) is refused
        with pytest.raises(RefusedError):
            EndsClient(home, QueryKey(driver.query.query, Secret("not-the-key"))).ask(2.0)
        client.close()
    finally:
        driver.close()


def test_a_running_streams_driver_connects_to_each_service_as_it_comes_before_its_first_question(
    eventhub, home_service
):
    """After want_ends (a running stream's first batch), a service that announces itself is connected to and proven on
    a thread of its own: the trigger after the first batch asks over that connection instead of also connecting and
    shaking hands on its path. Nothing is asked ahead: the first question is the trigger's."""
    svc, worker = home_service
    send(eventhub.connection_string, [f"e{i}" for i in range(10)], partition_id="3")
    settings = parse_connection_string(eventhub.connection_string)
    driver = QueryDriver(eventhub.name, bind="127.0.0.1")
    try:
        driver.want_ends()  # no service yet: nothing to connect to
        assert driver._ends_clients == {}
        answered = svc.listener.ends_answered
        assert _read(worker, _home_range(driver, settings, "3", 0, 10)) == list(range(10))  # the service announces
        deadline = time.monotonic() + 10
        while (client := driver._ends_clients.get(svc.executor)) is None or client._conn is None:
            assert time.monotonic() < deadline, "the driver did not connect to the service that announced itself"
            time.sleep(0.02)
        conn = client._conn
        assert svc.listener.ends_answered == answered, "connected ahead, nothing asked"
        deadline = time.monotonic() + 10
        while (ends := driver.executor_ends()) is None or "3" not in ends:
            assert time.monotonic() < deadline, f"the service never vouched for partition 3: {ends}"
            time.sleep(0.05)
        assert ends["3"].end == 10
        assert driver._ends_clients[svc.executor] is client and client._conn is conn, "asked over that connection"
    finally:
        driver.close()


def test_a_driver_whose_service_does_not_answer_plans_without_it_and_asks_it_again_later(eventhub, caplog, monkeypatch):
    """A live service that cannot be reached (its executor just died, a firewall): the trigger gets None (every
    partition is asked of Event Hubs) within the time-out, says so once, and leaves the service alone for
    ENDS_RETRY_AFTER seconds (no trigger pays the time-out again meanwhile)."""

    class Clock:
        now = 1000.0

        def __call__(self) -> float:
            return self.now

    clock = Clock()
    driver = QueryDriver(eventhub.name, bind="127.0.0.1", clock=clock)
    try:
        port = free_port()  # nobody listens: refused at once
        driver.handle({"kind": "service", "executor": "gone-one", "hosts": ["127.0.0.1"], "port": port,
                       "jvm": "elsewhere:1"})  # fmt: skip
        with caplog.at_level(logging.INFO, logger="eventhubs_spark"):
            assert driver.executor_ends() is None
        said = [r.getMessage() for r in caplog.records if "did not say where its partitions end" in r.getMessage()]
        assert len(said) == 1 and "gone-one" in said[0] and driver.query.key.reveal() not in said[0]
        asked: list[Home] = []
        real = EndsClient.ask

        def counted(self: EndsClient, timeout: float) -> dict:
            asked.append(self.home)
            return real(self, timeout)

        monkeypatch.setattr(EndsClient, "ask", counted)
        clock.now += ENDS_RETRY_AFTER / 2
        driver.handle({"kind": "service", "executor": "gone-one", "hosts": ["127.0.0.1"], "port": port,
                       "jvm": "elsewhere:1"})  # fmt: skip
        assert driver.executor_ends() is None and asked == [], "asked again within ENDS_RETRY_AFTER"
        clock.now += ENDS_RETRY_AFTER
        driver.handle({"kind": "service", "executor": "gone-one", "hosts": ["127.0.0.1"], "port": port,
                       "jvm": "elsewhere:1"})  # fmt: skip
        assert driver.executor_ends() is None and len(asked) == 1, "asked again after ENDS_RETRY_AFTER"
    finally:
        driver.close()


def test_an_idle_drivers_question_is_answered_without_looking_until_something_changes(
    eventhub, home_service, monkeypatch
):
    """An idle stream asks every 10 ms or so. The service's pool keeps what each link vouches for as the links tell it
    (the reading thread, as events come); while its version stands the answer is "nothing new" without looking; new
    events on a link move it, and the next answer tells them; and a change nobody told the pool of is found by its
    reaper's look at every receiver (once a second in a service)."""
    svc, worker = home_service
    pool = svc.pool
    send(eventhub.connection_string, [f"e{i}" for i in range(10)], partition_id="0")
    settings = parse_connection_string(eventhub.connection_string)
    driver = QueryDriver(eventhub.name, bind="127.0.0.1")
    try:
        assert _read(worker, _home_range(driver, settings, "0", 0, 5)) == list(range(5))
        client = EndsClient(driver.live()[0], driver.query)
        _until_vouched(client, "0", 10, "the link never vouched for partition 0's end")
        looks: list[int] = []
        look = svc.listener.ends
        monkeypatch.setattr(svc.listener, "ends", lambda s: (looks.append(1), look(s))[1])
        client.ask(2.0)  # told everything as of the version now
        looks.clear()
        version = pool.vouch_version
        for _ in range(20):
            assert client.ask(2.0)["0"].end == 10
        assert pool.vouch_version == version, "what a link vouches for changed while it sat idle"
        assert looks == [], f"{len(looks)} looks for 20 questions with nothing changed"

        send(eventhub.connection_string, [f"f{i}" for i in range(5)], partition_id="0")
        # the link's reading thread tells the pool of its new events: the answer tells them
        _until_vouched(client, "0", 15, "new events on the link were never told")
        assert looks, "told without a look?"

        # a link that does not tell its pool (as a change some code forgot to tell would be): its new events are
        # not vouched for until the reaper looks at every receiver
        (link,) = [e.receiver._link for e in pool._entries.values() if e.receiver.partition == "0"]
        link.sink.on_vouch = None
        send(eventhub.connection_string, [f"g{i}" for i in range(3)], partition_id="0")
        deadline = time.monotonic() + 5
        while link.sink.newest is None or link.sink.newest[0] < 17:
            assert time.monotonic() < deadline, "the link never brought the new events"
            time.sleep(0.02)
        assert client.ask(2.0)["0"].end == 15, "untold: not vouched for yet"
        pool.reap()
        assert client.ask(2.0)["0"].end == 18, "the reaper's look found the link's new events"
        client.close()
    finally:
        driver.close()
