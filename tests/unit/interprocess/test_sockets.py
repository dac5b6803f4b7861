"""Unit tests of :mod:`eventhubs_spark.interprocess.sockets`."""

from __future__ import annotations


def test_refusals_are_all_counted_and_said_at_most_once_a_minute_per_kind(caplog):
    import logging

    from eventhubs_spark.interprocess.sockets import Refusals

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
