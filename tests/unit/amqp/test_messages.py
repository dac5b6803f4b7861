"""Unit tests of :mod:`eventhubs_spark.amqp.messages`."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventhubs_spark.amqp.frame_reader import NEWEST_HEAD
from eventhubs_spark.amqp.messages import RawEvents, Unsupported, offset_and_time, sequence_number
from eventhubs_spark.codec.layout import decode_spans
from tests.unit.support.decode import both_ways, messages


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("one"), st.binary(max_size=40)),
            st.tuples(st.just("run"), st.lists(st.binary(max_size=40), min_size=1, max_size=8), st.binary(max_size=5)),
            st.tuples(st.just("take"), st.integers(0, 12)),
        ),
        max_size=30,
    )
)
def test_raw_events_keep_every_message_in_order_however_runs_and_takes_interleave(steps: list[tuple]) -> None:
    """Messages kept in place (runs of a buffer with gaps between them) or one by one, taken off the front
    in any counts: what comes out, in pieces and as one buffer of spans, is the list of messages in order."""
    import numpy as np

    from eventhubs_spark.amqp.messages import RawEvents

    events, model, taken_model = RawEvents(), [], []
    taken = RawEvents()
    seq = 0
    for step in steps:
        if step[0] == "one":
            events.append(seq, step[1])
            model.append((seq, step[1]))
            seq += 1
        elif step[0] == "run":
            messages, gap = step[1], step[2]
            buffer, starts, ends = b"", [], []
            for m in messages:
                buffer += gap
                starts.append(len(buffer))
                buffer += m
                ends.append(len(buffer))
            buffer += gap
            events.add_run(
                buffer, np.array(starts, np.int64), np.array(ends, np.int64), list(range(seq, seq + len(messages)))
            )
            model += [(seq + i, m) for i, m in enumerate(messages)]
            seq += len(messages)
        else:
            head = events.take(step[1])
            taken.extend(head)
            taken_model += model[: step[1]]
            model = model[step[1] :]
        assert events.seqs == [s for s, _ in model] and events.payloads() == [m for _, m in model]
        assert events.nbytes == sum(len(m) for _, m in model) + 64 * len(model)
    assert taken.seqs == [s for s, _ in taken_model] and taken.payloads() == [m for _, m in taken_model]
    buffer, starts, ends = taken.spans()
    assert len(buffer) >= sum(len(m) for _, m in taken_model)
    assert [bytes(buffer[s:e]) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)] == [
        m for _, m in taken_model
    ]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(messages(compound_properties=True))
def test_every_message_decodes_as_the_sdk_decodes_it(payload: bytes) -> None:
    reference, fast, _ = both_ways(payload)
    assert fast == reference
    # the receiver service's way: only the sequence number read where it reads ahead, the rest decoded
    # from a batch of raw messages in the worker
    with contextlib.suppress(Unsupported):
        assert sequence_number(payload, 0, len(payload)) == reference[0]["sequenceNumber"]
    raw = RawEvents()
    seq, size = reference[0]["sequenceNumber"], len(payload)
    raw.add_run(b"\x00" + payload * 2, np.array([1, 1 + size]), np.array([1 + size, 1 + 2 * size]), [seq, seq])
    raw.take(1)  # what is left starts inside its buffer
    batch, _ = decode_spans(*raw.spans(), "3", min_rows=0)
    assert batch.to_pylist() == reference


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(messages(compound_properties=False))
def test_a_message_s_offset_and_time_read_from_its_annotations_are_what_the_decoder_reads(payload: bytes) -> None:
    """What a receiver service tells a driver of a link's newest event (interprocess.partition_ends): its offset
    and enqueued time, read without decoding the rest, are the source's columns for it; a message without an
    offset vouches for nothing (None), whatever the sections before its annotations and their widths."""
    reference, _, _ = both_ways(payload)
    found = offset_and_time(payload)
    # what a link keeps of its newest message (the head: a large body left behind) tells the same
    assert offset_and_time(payload[:NEWEST_HEAD]) == found
    if reference[0]["offset"] is None:
        assert found is None
        return
    assert found is not None, "a message with an offset in the service's form (a string)"
    offset, millis = found
    assert offset == reference[0]["offset"]
    when = reference[0]["enqueuedTime"]
    assert millis == (None if when is None else round(when.timestamp() * 1000))


_SERVICE_KEYS = ("x-opt-sequence-number", "x-opt-offset", "x-opt-enqueued-time", "x-opt-sequence-number-epoch")


@st.composite
def _service_messages(draw: st.DrawFn) -> tuple[bytes, tuple[str, int | None] | None]:
    """A message as the service (or the emulator) stamps it: the replication segment first (a byte, an int, or
    none), a producer's own annotations (some of whose values carry the bytes of the service's keys), then the
    sequence number, offset and enqueued time one after another and the partition key; or the same entries in any
    order, or a wide (32-bit) encoding. With what offset_and_time must answer."""
    import struct

    from eventhubs_emulator import amqp
    from eventhubs_emulator.amqp import Symbol, Timestamp
    from eventhubs_spark.amqp import messages as m
    from tests.unit.support.decode import encode, scalars, symbols

    magic = st.sampled_from([m.A_SEQUENCE_NUMBER, m.A_OFFSET, m.A_ENQUEUED_TIME, m.A_SEGMENT_BYTE])
    tricky = st.lists(st.one_of(magic, st.binary(max_size=9)), max_size=4).map(b"".join)
    own = draw(st.dictionaries(symbols.filter(lambda s: s not in _SERVICE_KEYS), st.one_of(scalars, tricky),
                               max_size=3))  # fmt: skip
    entries: list[tuple[Any, Any]] = []
    segment = draw(st.sampled_from(["none", "byte", "int"]))
    if segment != "none":
        value = draw(st.integers(-1, 127)) if segment == "byte" else draw(st.integers(128, 2**31 - 1))
        raw = b"\x54" + struct.pack(">b", value) if segment == "byte" else b"\x71" + struct.pack(">i", value)
        entries.append((Symbol("x-opt-sequence-number-epoch"), raw))
    entries += [(k, encode(v)) for k, v in own.items()]
    offset = str(draw(st.integers(0, 2**40)))
    millis = draw(st.integers(0, 2**45))
    has_offset, has_time = draw(st.booleans()) or draw(st.booleans()), draw(st.booleans()) or draw(st.booleans())
    entries.append((Symbol("x-opt-sequence-number"), b"\x81" + struct.pack(">q", draw(st.integers(0, 2**40)))))
    if has_offset:
        entries.append((Symbol("x-opt-offset"), encode(offset)))
    if has_time:
        entries.append((Symbol("x-opt-enqueued-time"), encode(Timestamp(millis))))
    if draw(st.booleans()):
        entries.append((Symbol("x-opt-partition-key"), encode("k")))
    if draw(st.booleans()):
        entries = draw(st.permutations(entries))
    if draw(st.booleans()):  # the keys as sym32, the map as map32: walked, never read in place
        body = b"".join(b"\xb3" + struct.pack(">I", len(k)) + k.encode() + v for k, v in entries)
        annotations = b"\xd1" + struct.pack(">I", len(body) + 4) + struct.pack(">I", 2 * len(entries)) + body
    else:
        annotations = amqp.map_from_raw([encode(k) + v for k, v in entries])
    payload = b"\x00\x53\x72" + annotations + b"\x00\x53\x75\xa0\x10" + draw(st.sampled_from([m.A_OFFSET, b"x"])) * 2
    return payload, ((offset, millis if has_time else None) if has_offset else None)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_service_messages())
def test_offset_and_time_read_in_place_from_the_service_s_order_is_what_any_order_gives(
    drawn: tuple[bytes, tuple[str, int | None] | None],
) -> None:
    """The shortcut for the service's layout (the sequence number, offset and enqueued time one after another,
    checked where the walk finds the sequence number's key; the segment's byte skipped) gives what a walk of the
    same entries in any order gives, and nothing a producer's annotation values or the body's bytes imitate."""
    payload, expected = drawn
    assert offset_and_time(payload) == expected
    assert offset_and_time(payload[:NEWEST_HEAD]) == expected


def test_offset_and_time_reads_no_entry_its_map_does_not_count() -> None:
    """The shortcut reads the offset and time in place only where the map counts them: a map whose count ends at
    the sequence number answers as its walk does (no offset: None), whatever bytes follow."""
    import struct

    from eventhubs_spark.amqp import messages as m

    entries = (m.A_SEQUENCE_NUMBER + struct.pack(">q", 7) + m.A_OFFSET + b"\x02" + b"42" + m.A_ENQUEUED_TIME
               + struct.pack(">q", 1_700_000_000_000))  # fmt: skip
    counted = {2: None, 6: ("42", 1_700_000_000_000)}
    for count, expected in counted.items():
        payload = b"\x00\x53\x72\xc1" + bytes((len(entries) + 1, count)) + entries + b"\x00\x53\x75\xa0\x00"
        assert offset_and_time(payload) == expected, count
