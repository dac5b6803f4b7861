"""Unit tests of :mod:`eventhubs_emulator.connection`."""

from __future__ import annotations

import pytest

from eventhubs_emulator.server import LinkError, parse_selector


def test_bad_selector():
    with pytest.raises(LinkError):
        parse_selector("nonsense")


def test_a_run_of_deliveries_is_encoded_as_one_delivery_at_a_time_would_be():
    """encode_run (the pump's fast path) writes the same bytes and counts as encode_delivery called per event, and
    declines a run with an event too big for one frame, changing nothing."""
    from eventhubs_emulator.connection import Connection, OutLink, Session

    def link_on(conn: Connection) -> OutLink:
        session = Session(conn, channel=3, next_incoming_id=0, remote_incoming_window=10_000)
        session.next_outgoing_id = 4_294_967_290 - 10**9  # far from zero, as on a long-lived session
        link = OutLink(session, "r", remote_handle=1, handle=7, kind="events")
        link.credit, link.next_tag = 500, 0xFFFFFFFE  # the tag wraps inside the run
        return link

    def state(link: OutLink) -> tuple[int, ...]:
        s = link.session
        return (s.next_outgoing_id, s.remote_incoming_window, link.next_tag, link.credit, link.delivery_count)

    payloads = [bytes([i % 256]) * (i * 7 % 300) for i in range(40)]

    class Service:  # what a connection reads of its service when built
        host = "emulator"

    one, run = Connection(Service()), Connection(Service())  # type: ignore[arg-type]
    one.remote_max_frame = run.remote_max_frame = 1024
    a, b = link_on(one), link_on(run)
    expected = b"".join(one.encode_delivery(a, p) for p in payloads)
    assert run.encode_run(b, payloads) == expected
    assert state(a) == state(b)
    before = state(b)
    assert run.encode_run(b, [b"x", b"y" * 2000]) is None  # 2000 bytes need two frames of 1024
    assert state(b) == before
