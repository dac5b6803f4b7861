"""Unit tests of :mod:`eventhubs_spark.amqp.frame_reader`."""

from __future__ import annotations

import socket
import threading
from typing import Any

import numpy as np
import pytest
from azure.eventhub._pyamqp._decode import decode_payload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventhubs_emulator import amqp
from eventhubs_emulator.amqp import Symbol, UInt
from eventhubs_emulator.broker import Broker, IncomingMessage
from eventhubs_spark.amqp import frame_reader, messages
from eventhubs_spark.amqp.frame_reader import FrameTap, LinkSink
from eventhubs_spark.amqp.messages import RawEvents
from eventhubs_spark.positions import geo_segments


def _stored(geo: bool, n: int) -> list[bytes]:
    broker = Broker()
    hub = broker.add_hub("h", 1, geo_replicated=geo)
    part = hub.partitions[0]
    body = b"\x00\x53\x75\xa0\x03abc"
    part.append([IncomingMessage(b"", [], body, None) for _ in range(n)], None)
    if geo:
        part.promote(lose=2)
        part.append([IncomingMessage(b"", [], body, None) for _ in range(3)], None)
    return [e.header + e.body for e in part.events]


@pytest.mark.parametrize("geo", [False, True])
@pytest.mark.parametrize("n", [3, 40])  # one by one, and numpy's whole-run read
def test_the_frame_reader_reads_each_message_position_in_the_service_form(geo, n):
    encoded = _stored(geo, n)
    data = b"".join(encoded)
    ends = np.cumsum([len(m) for m in encoded])
    starts = ends - [len(m) for m in encoded]
    found = frame_reader._sequences(data, starts, ends)
    if geo:
        expected = [geo_segments.pack(1, i) for i in range(n - 2)] + [geo_segments.pack(2, n - 2 + i) for i in range(3)]
    else:
        expected = list(range(n))
    assert found == expected
    assert [frame_reader._position(data, int(s), int(e)) for s, e in zip(starts, ends, strict=True)] == expected
    assert [messages.sequence_number(m, 0, len(m)) for m in encoded] == expected


class FakeLink:
    def __init__(self) -> None:
        self.current_link_credit = 10**9
        self.delivery_count = 0
        self.grants: list[int] = []

    def flow(self, link_credit: int) -> None:
        self.grants.append(link_credit)
        self.current_link_credit = link_credit


class FakeSession:
    def __init__(self, links: dict[int, FakeLink]) -> None:
        self._input_handles = links
        self.next_incoming_id = 0
        self.remote_outgoing_window = 10**9
        self.incoming_window = self.target_incoming_window = 7  # small: the window is reopened often
        self.flows = 0

    def _outgoing_flow(self) -> None:
        self.flows += 1


class FakeTransport:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        import io

        self._read_buffer = io.BytesIO()

    def receive_frame(self, **kwargs: Any) -> Any:  # replaced by the tap
        raise AssertionError("the SDK's own reader must not run")


class FakeConnection:
    def __init__(self, sock: socket.socket, session: FakeSession) -> None:
        self._transport = FakeTransport(sock)
        self._incoming_endpoints = {0: session}


def message(seq: int, body: bytes) -> bytes:
    annotations = {Symbol("x-opt-sequence-number"): seq, Symbol("x-opt-offset"): str(seq * 10)}
    return amqp.encode_section(amqp.MESSAGE_ANNOTATIONS, annotations) + amqp.encode_section(amqp.DATA, body)


def transfer_frames(handle: int, delivery: int, payload: bytes, frame_room: int, settled: bool = True) -> list[bytes]:
    """One delivery as transfer frames of at most ``frame_room`` payload bytes each."""
    pieces = [payload[i : i + frame_room] for i in range(0, len(payload), frame_room)] or [b""]
    frames = []
    for i, piece in enumerate(pieces):
        more = i < len(pieces) - 1
        fields = [UInt(handle), UInt(delivery), bytes(4), UInt(0), settled, more] if i == 0 else [UInt(handle)]
        fields += [None] * (11 - len(fields)) if i == 0 else [None, None, None, None, more]
        frames.append(amqp.encode_frame(0, amqp.encode_performative(amqp.TRANSFER, fields), piece))
    return frames


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.sampled_from([0, 0, 0, 1]), st.binary(max_size=3000)), min_size=1, max_size=25),
    st.integers(50, 4000),
    st.lists(st.integers(1, 5000), min_size=1, max_size=20),
    st.booleans(),
)
def test_any_split_of_the_stream_gives_the_sdk_its_frames_and_the_sink_every_event_once(
    deliveries: list[tuple[int, bytes]], frame_room: int, splits: list[int], flows_between: bool
) -> None:
    link0, link1 = FakeLink(), FakeLink()
    session = FakeSession({0: link0, 1: link1})
    sink = LinkSink(credit=10**9)
    link0.eventhubs_sink = sink  # type: ignore[attr-defined]  # handle 0 is tapped, handle 1 is the SDK's
    stream = b""
    expected = RawEvents()
    sdk_frames = []
    for i, (handle, body) in enumerate(deliveries):
        payload = message(i, body)
        for frame in transfer_frames(handle, i, payload, frame_room):
            stream += frame
            if handle == 1:
                sdk_frames.append(0x14)
        if handle == 0:
            expected.append(i, payload)
        if flows_between and i % 3 == 0:
            flow = [UInt(0), UInt(100), UInt(0), UInt(100), UInt(1), UInt(0), UInt(10), None, False, False, None]
            stream += amqp.encode_frame(0, amqp.encode_performative(amqp.FLOW, flow))
            stream += amqp.encode_frame(0, b"")  # a heartbeat between them
            sdk_frames += [0x13, 1]
    ours, theirs = socket.socketpair()
    try:
        ours.settimeout(0.05)
        tap = FrameTap(FakeConnection(ours, session))
        tap.timeout = 0.005

        def write() -> None:
            pos = 0
            for n in splits * (len(stream) // max(1, sum(splits)) + 1):
                if pos >= len(stream):
                    break
                theirs.sendall(stream[pos : pos + n])
                pos += n

        got = _frames_read(tap, threading.Thread(target=write))
    finally:
        ours.close()
        theirs.close()
    # the SDK sees exactly the frames that are not the tapped link's (empty frames aside: the tap also
    # answers with one after a run of decoded transfers)
    assert [f for f in got if f != 1] == [f for f in sdk_frames if f != 1]
    received = RawEvents()
    for chunk in sink.ready:
        received.extend(chunk)
    assert received.seqs == expected.seqs and received.payloads() == expected.payloads()
    tapped = sum(1 for h, _ in deliveries if h == 0)
    assert link0.delivery_count == tapped and link0.current_link_credit == 10**9 - tapped
    frames_in_all = stream.count(b"\x00\x53\x14")  # every transfer frame moved the session's counters
    assert session.next_incoming_id <= frames_in_all and sink.received == tapped


def test_a_low_credit_is_topped_up_while_the_sink_has_room_and_not_when_it_is_full() -> None:
    link = FakeLink()
    link.current_link_credit = 6
    session = FakeSession({0: link})
    sink = LinkSink(credit=6, max_events=4)
    link.eventhubs_sink = sink  # type: ignore[attr-defined]
    frames = [transfer_frames(0, i, message(i, b"x"), 1000)[0] for i in range(6)]
    ours, theirs = socket.socketpair()
    try:
        ours.settimeout(0.05)
        tap = FrameTap(FakeConnection(ours, session))
        tap.timeout = 0.005
        for arriving in (frames[:3], frames[3:]):  # two reads: the tap takes what a read holds, then tops up
            theirs.sendall(b"".join(arriving))
            while tap.receive_frame() != (None, None):
                pass
    finally:
        ours.close()
        theirs.close()
    # credit 6 -> 3 after three events: topped up to 6 (the sink held 3 < 4); the 4th, 5th and 6th
    # bring it down again while the sink holds 4 or more: no more credit until its reader takes some
    assert link.grants == [6] and sink.received == 6


def test_a_full_sink_that_held_credit_back_wakes_its_reader_once_when_room_is_made() -> None:
    """The reading thread marks a full sink before it waits; the take that makes room wakes it (once), so
    the link's credit is topped up at once rather than after the reader's socket wait."""
    sink = LinkSink(credit=4, max_events=4)
    woken: list[int] = []
    sink.on_room = lambda: woken.append(1)
    sink.incoming.append(0, b"a")
    assert sink.room_for_credit() and not sink.starved  # room: credit may be granted, nobody to wake
    for seq in range(1, 4):
        sink.incoming.append(seq, b"a")
    sink.publish()
    assert not sink.room_for_credit() and sink.starved  # full: credit held back
    with sink.cond:
        first = sink.take(1)  # made room: the reader learns it now
    assert first is not None and woken == [1] and not sink.starved
    with sink.cond:
        assert sink.take(10) is not None
    assert woken == [1], "no wake-up when the reader was not waiting for room"
    with sink.cond:
        assert sink.take(10) is None


def test_waking_the_reader_never_blocks_even_when_nobody_drains_the_wake_ups() -> None:
    """Tasks wake the connection's reader while holding a sink's lock: a wake-up that waited for room in the
    wake-up pipe could wait on the reader, which may be waiting for that lock."""
    ours, theirs = socket.socketpair()
    try:
        tap = FrameTap(FakeConnection(ours, FakeSession({})))
        done = threading.Event()

        def wake_often() -> None:
            for _ in range(200_000):  # far more than the pipe holds
                tap.wake()
            done.set()

        threading.Thread(target=wake_often, daemon=True).start()
        assert done.wait(30), "a wake-up blocked on a full pipe"
        tap.close()
    finally:
        ours.close()
        theirs.close()


def test_the_credit_window_never_stands_for_more_bytes_than_the_read_ahead_bound() -> None:
    """Before any event arrived a link gets the few events its bytes bound holds at the largest size an
    event can have; then its window follows the size its events have: the prefetch for small ones, fewer
    for large ones, so what is in flight stays within the bound."""
    fresh = LinkSink(credit=500, max_events=2000, max_bytes=8 << 20)
    assert fresh.window() == 8  # 8 MB at 1 MB each
    assert LinkSink(credit=500).window() == 500  # no bytes bound: the prefetch
    large = LinkSink(credit=500, max_events=2000, max_bytes=1 << 20)
    assert large.window() == 1  # never none

    link = FakeLink()
    link.current_link_credit = 4
    session = FakeSession({0: link})
    sink = LinkSink(credit=500, max_events=2000, max_bytes=200_000)
    link.eventhubs_sink = sink  # type: ignore[attr-defined]
    frames = [transfer_frames(0, i, message(i, b"x" * 10_000), 20_000)[0] for i in range(12)]
    ours, theirs = socket.socketpair()
    try:
        ours.settimeout(0.05)
        tap = FrameTap(FakeConnection(ours, session))
        tap.timeout = 0.005
        theirs.sendall(b"".join(frames))
        while tap.receive_frame() != (None, None):
            pass
    finally:
        ours.close()
        theirs.close()
    each = sink.received_bytes // sink.received
    assert sink.received == 12 and 10_000 < each < 10_200  # the frames' bytes, headers and annotations included
    assert link.grants and all(g == 200_000 // each for g in link.grants)  # 19 events of ~10 KB, not 500
    assert max(link.grants) * each <= 200_000


def test_the_bytes_of_transfers_left_to_the_sdk_are_kept_in_their_place() -> None:
    """A transfer sent unsettled goes to the SDK (which must settle it); the SDK hands the decoded message
    back (``add_sdk_message``) and the sink keeps the bytes it saw go by, in order with the others."""
    link = FakeLink()
    session = FakeSession({0: link})
    sink = LinkSink(credit=10**9)
    link.eventhubs_sink = sink  # type: ignore[attr-defined]
    payloads = [message(i, bytes([i]) * (i * 97)) for i in range(12)]
    unsettled = {2, 3, 7, 11}
    stream = b"".join(
        frame for i, p in enumerate(payloads) for frame in transfer_frames(0, i, p, 300, settled=i not in unsettled)
    )
    ours, theirs = socket.socketpair()
    try:
        ours.settimeout(0.05)
        tap = FrameTap(FakeConnection(ours, session))
        tap.timeout = 0.005
        theirs.sendall(stream)
        assembling = bytearray()
        while (frame := tap.receive_frame()) != (None, None):
            performative, fields = frame[1]
            if performative == 0x14:  # what the SDK's link does with a transfer: assemble, decode, hand back
                assembling += fields[11]
                if not fields[5]:
                    sink.add_sdk_message(decode_payload(memoryview(bytes(assembling))))
                    assembling.clear()
        tap.publish()
    finally:
        ours.close()
        theirs.close()
    received = RawEvents()
    for chunk in sink.ready:
        received.extend(chunk)
    assert received.seqs == list(range(12))
    assert received.payloads() == payloads


def short_message(seq: int) -> bytes:
    """A message shorter than the usual form's sequence number position (its annotations hold nothing else)."""
    key = b"\xa3\x15x-opt-sequence-number"
    entries = key + b"\x81" + seq.to_bytes(8, "big")
    annotations = b"\x00\x53\x72\xc1" + bytes([len(entries) + 1, 2]) + entries
    return annotations + amqp.encode_section(amqp.DATA, b"")


@pytest.mark.parametrize("gaps", [False, True])
def test_long_runs_of_transfers_are_taken_whole_with_every_sequence_number_and_counter_right(gaps: bool) -> None:
    """Thousands of settled single-frame transfers arrive back to back (a partition's backlog); the tap takes
    them as runs. Messages in other forms inside a run (annotations in another order, a message too short
    for the usual form) keep their sequence numbers; a transfer of another link, an unsettled one and a
    message over two frames end a run and are handled one at a time; every counter moves as one by one.
    Sequence numbers rise as a partition's do: one by one (a run is read at its ends), or with gaps (every
    message is read)."""
    link0, link1 = FakeLink(), FakeLink()
    session = FakeSession({0: link0, 1: link1})
    sink = LinkSink(credit=10**9)
    link0.eventhubs_sink = sink  # type: ignore[attr-defined]
    stream = b""
    expected = RawEvents()
    sdk_transfers = 0
    tapped = 0
    for i in range(3000):
        if i % 500 == 250:  # another link's delivery: the SDK's
            stream += transfer_frames(1, i, message(i, b"theirs"), 10_000)[0]
            sdk_transfers += 1
            continue
        seq = i + i // 97 if gaps else tapped
        if i % 13 == 5:
            payload = short_message(seq)
        elif i % 7 == 3:
            annotations = {Symbol("x-opt-offset"): str(seq * 10), Symbol("x-opt-sequence-number"): seq}
            payload = amqp.encode_section(amqp.MESSAGE_ANNOTATIONS, annotations) + amqp.encode_section(amqp.DATA, b"r")
        else:
            payload = message(seq, bytes([i % 256]) * (i % 50))
        frames = transfer_frames(0, i, payload, 60 if i % 400 == 17 else 10_000)  # now and then over frames
        stream += b"".join(frames)
        expected.append(seq, payload)
        tapped += 1
    ours, theirs = socket.socketpair()
    try:
        ours.settimeout(0.05)
        tap = FrameTap(FakeConnection(ours, session))
        tap.timeout = 0.005
        got = _frames_read(tap, threading.Thread(target=theirs.sendall, args=(stream,)))
    finally:
        ours.close()
        theirs.close()
    assert got.count(0x14) == sdk_transfers
    received = RawEvents()
    for chunk in sink.ready:
        received.extend(chunk)
    assert received.seqs == expected.seqs
    assert received.payloads() == expected.payloads()
    assert link0.delivery_count == tapped and link0.current_link_credit == 10**9 - tapped
    tapped_frames = stream.count(b"\x00\x53\x14") - sdk_transfers
    assert session.next_incoming_id == tapped_frames and sink.received == tapped
    assert session.flows == tapped_frames // 7  # the window of 7 reopened as often as frame by frame


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["run", "run", "run", "other link", "unsettled", "fake inside", "two frames"]),
            st.binary(max_size=400),
        ),
        min_size=1,
        max_size=120,
    ),
    st.integers(1, 200),
    st.integers(0, 300),
)
def test_frames_found_with_numpy_are_the_frames_found_one_by_one(
    kinds: list[tuple[str, bytes]], most: int, cut: int
) -> None:
    """The run from a buffer's first frame, cut with numpy (a long buffer) and one frame at a time (a short one):
    the same frames, whatever follows them. Bodies that carry a whole transfer frame's bytes (what the numpy
    search looks for) may only end a run early (never empty); the next run, from where the true frame ends,
    goes on past them."""
    from eventhubs_spark.amqp.frame_reader import _cut_loop

    stream = b""
    for i, (kind, body) in enumerate(kinds):
        if kind == "fake inside":
            body = body[:50] + transfer_frames(0, i, message(i, b"fake"), 10_000)[0] + body[50:]
        handle = 1 if kind == "other link" else 0
        frames = transfer_frames(handle, i, message(i, body), 40 if kind == "two frames" else 10_000,
                                 settled=kind != "unsettled")  # fmt: skip
        stream += b"".join(frames)
    stream = stream[: max(len(stream) - cut, 13)]  # the socket read ends inside a frame
    first = transfer_frames(0, 0, message(0, b""), 10_000)[0]
    key, tail = first[13:15], first[13 + first[12] - 7 : 13 + first[12]]  # 11 fields, handle 0; settled, 5 nulls
    tap = FrameTap.__new__(FrameTap)
    tap._starts_of = None
    fakes = any(kind == "fake inside" for kind, _ in kinds)
    pos = 0
    while pos < len(stream) - 16:
        if stream[pos + 8 : pos + 12] != b"\x00\x53\x14\xc0" or stream[pos + 13 : pos + 15] != key:
            pos += int.from_bytes(stream[pos : pos + 4], "big")  # not a run's first frame: the next
            continue
        one = _cut_loop(stream, pos, len(stream), key, tail, most)
        vector = tap._cut_vector(stream, pos, len(stream), key, tail, most)
        taken = len(vector[0])
        assert (taken > 0) == (len(one[0]) > 0)
        assert one[0][:taken].tolist() == vector[0].tolist() and one[1][:taken].tolist() == vector[1].tolist()
        if not fakes:
            assert taken == len(one[0])
        pos = int(vector[1][-1]) if taken else pos + int.from_bytes(stream[pos : pos + 4], "big")


def _frames_read(tap: FrameTap, writer: threading.Thread) -> list[int]:
    """Start ``writer`` and read frames through ``tap`` until the writer has ended and five reads in a row found
    nothing; the types of the frames the SDK got (those the tap did not take), then the tap's events published."""
    writer.start()
    got = []
    idle = 0
    while idle < 5:
        _channel, frame = tap.receive_frame()
        if frame is None:
            idle += 0 if writer.is_alive() else 1
            continue
        idle = 0
        got.append(frame[0])
    writer.join()
    tap.publish()
    return got


def test_links_share_the_process_read_ahead_budget_without_changing_a_few_links_bounds():
    from eventhubs_spark.amqp.frame_reader import LinkSink, ReadAheadBudget

    links = [4]
    budget = ReadAheadBudget(lambda: links[0], total=256 << 20, floor=256 << 10)
    sink = LinkSink(credit=500, max_events=2000, max_bytes=8 << 20, budget=budget)
    assert sink.bytes_bound() == 8 << 20  # 4 links: each keeps its own bound
    links[0] = 32
    assert sink.bytes_bound() == 8 << 20
    links[0] = 1024
    assert sink.bytes_bound() == 256 << 10  # 1,024 links: 256 MiB in all
    links[0] = 100_000
    assert sink.bytes_bound() == 256 << 10  # never below the floor
    sink.received, sink.received_bytes = 100, 100 * 10_000  # 10 KB events: the window follows the bound
    assert sink.window() == (256 << 10) // 10_000
