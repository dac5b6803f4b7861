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
        assert driver.handle({"kind": "read", "ranges": [["3", 40, 1_700_000_000_000_000], ["bad"]]}) == {"ok": True}
        assert reads == [("3", 40, 1_700_000_000_000_000)], "a malformed entry says nothing"
    finally:
        driver.close()
