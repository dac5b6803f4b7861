"""Unit tests of :mod:`eventhubs_spark.interprocess.partition_ends` (over a real service's sealed connection, with
real links: ``tests/integration/connector/test_executor_ends.py``)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventhubs_spark.interprocess.partition_ends import Told, Vouch, apply_answer, vouched


def rows(ends):
    """partition -> (end, offset, enqueued_ms) as a service's pool keeps them: with their rows encoded."""
    return {p: vouched(p, *v) for p, v in ends.items()}


def test_each_answer_says_what_changed_since_the_last_on_that_connection():
    told, known = Told(), {}
    first = told.answer(rows({"0": (10, "900", 5), "1": (4, "40", None)}))
    apply_answer(known, first)
    assert known == {"0": Vouch(10, "900", 5), "1": Vouch(4, "40", None)}
    nothing = told.answer(rows({"0": (10, "900", 5), "1": (4, "40", None)}))
    assert json.loads(nothing) == {"ends": [], "gone": []}, "nothing changed: nothing said"
    apply_answer(known, nothing)
    moved = told.answer(rows({"0": (12, "1000", 6)}))
    assert json.loads(moved) == {"ends": [["0", 12, "1000", 6]], "gone": ["1"]}
    apply_answer(known, moved)
    assert known == {"0": Vouch(12, "1000", 6)}
    retimed = told.answer(rows({"0": (12, "1000", 7)}))  # the same end, another field of its vouch: said
    assert json.loads(retimed) == {"ends": [["0", 12, "1000", 7]], "gone": []}
    apply_answer(known, retimed)
    assert known == {"0": Vouch(12, "1000", 7)}
    again = Told().answer(rows({"0": (12, "1000", 6)}))  # a new connection: everything anew
    assert json.loads(again)["ends"] == [["0", 12, "1000", 6]]


def test_an_answer_that_is_not_one_raises_and_entries_of_another_form_vouch_for_nothing():
    known = {"5": Vouch(3, "1", None)}
    with pytest.raises(ValueError):
        apply_answer(known, b'{"ends": []}')
    with pytest.raises(ValueError):
        apply_answer(known, b"[1]")
    apply_answer(known, json.dumps({"ends": [["1", 0, "o", 1], ["2", "9", "o", 1], ["3", 4], "x",
                                             ["4", 4, 7, None], ["5", 5, "o", "t"]], "gone": []}).encode())  # fmt: skip
    assert known == {"5": Vouch(5, "o", None)}, known


@given(st.lists(st.dictionaries(st.sampled_from("0123456789"), st.integers(1, 50), max_size=10), max_size=12))
def test_a_driver_that_applies_every_answer_knows_what_the_service_vouches_for_now(rounds: list[dict[str, int]]):
    told, known = Told(), {}
    for ends in rounds:
        apply_answer(known, told.answer(rows({p: (end, str(end * 10), end) for p, end in ends.items()})))
        assert known == {p: Vouch(end, str(end * 10), end) for p, end in ends.items()}


@given(st.text(max_size=6), st.integers(1, 2**63), st.text(max_size=8), st.none() | st.integers(0, 2**50))
def test_a_vouch_row_encoded_when_kept_reads_back_as_that_vouch(partition: str, end: int, offset: str, when):
    """Rows are formatted directly where partition and offset are digits (as on Event Hubs), escaped otherwise:
    either way a driver reads back the vouch the service kept (a quote or a backslash in an id included)."""
    kept = vouched(partition, end, offset, when)
    assert json.loads(kept.row) == [partition, end, offset, when]
    known: dict[str, Vouch] = {}
    apply_answer(known, Told().answer({partition: kept}))
    assert known == {partition: Vouch(end, offset, when)}


def test_a_client_closed_while_it_connects_keeps_no_connection(monkeypatch):
    """The driver drops a service's client (gone, unreachable) while a thread of its own is still connecting to it
    ahead of the triggers: close() returns at once, and the connection made after it is closed, not kept unseen."""
    import threading

    from eventhubs_spark.auth.secret import Secret
    from eventhubs_spark.interprocess import partition_ends
    from eventhubs_spark.interprocess.task_ranges import Home, QueryKey

    connecting, go, made = threading.Event(), threading.Event(), []

    class Conn:
        closed = False
        max_frame = 0

        def close(self):
            self.closed = True

    def connect_home(home, query, timeout, handshake):
        connecting.set()
        assert go.wait(5)
        made.append(Conn())
        return made[-1]

    monkeypatch.setattr(partition_ends, "connect_home", connect_home)
    client = partition_ends.EndsClient(Home("e1", ("127.0.0.1",), 1), QueryKey("q", Secret("k")))
    failed: list[BaseException] = []

    def ahead():
        try:
            client.connect(1.0)
        except OSError as exc:
            failed.append(exc)

    thread = threading.Thread(target=ahead, daemon=True)
    thread.start()
    assert connecting.wait(5)
    client.close()  # does not wait for the connect in flight
    go.set()
    thread.join(5)
    assert not thread.is_alive() and len(failed) == 1 and "closed" in str(failed[0])
    assert len(made) == 1 and made[0].closed, "the connection made after close() was left open"
    with pytest.raises(OSError):
        client.ask(1.0)  # closed for good: a question connects, finds it closed, and closes that one too
    assert len(made) == 2 and made[1].closed
