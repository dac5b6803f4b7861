"""Unit tests of :mod:`eventhubs_spark.codec.layout`."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from azure.eventhub._pyamqp._decode import decode_payload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventhubs_emulator import amqp
from eventhubs_emulator.amqp import Int, Symbol, Timestamp, UByte, UInt, ULong, UShort
from eventhubs_spark.codec.columns import Columns
from eventhubs_spark.codec.layout import decode_batch
from eventhubs_spark.codec.message import decode_message
from eventhubs_spark.codec.schema import ARROW_SCHEMA
from tests.fresh import without_pandas
from tests.unit.support.decode import Wide, messages, section, symbols, texts

family_values = st.sampled_from(["text", "symbol", "binary", "long", "uint", "ulong", "int", "ubyte", "ushort",
                                 "bool", "none", "timestamp"])  # fmt: skip


_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "text": texts,
    "symbol": symbols,
    "binary": st.binary(max_size=40),
    "long": st.integers(-(2**63), 2**63 - 1),
    "uint": st.integers(0, 2**32 - 1).map(UInt),
    "ulong": st.integers(0, 2**64 - 1).map(ULong),
    "int": st.integers(-(2**31), 2**31 - 1).map(Int),
    "ubyte": st.integers(0, 255).map(UByte),
    "ushort": st.integers(0, 65535).map(UShort),
    "bool": st.booleans(),
    "none": st.none(),
    "timestamp": st.integers(-(2**62), 2**62).map(Timestamp),
}


@st.composite
def family(draw: st.DrawFn) -> list[bytes]:
    """Messages of one producer: the same annotations, property names and value types, fresh values."""
    annotations = draw(st.permutations(["seq", "offset", "time", "key", "publisher", "extra", "epoch"]))
    annotations = [a for a in annotations if a == "seq" or draw(st.booleans())]
    extra_type = draw(family_values)
    # the replication segment every event carries (issue 50): -1 off geo-replicated hubs, a segment on them, the same
    # on every event of a run, or (a promotion mid-batch) changing; as the service encodes it, an int or a byte
    epoch_mode = draw(st.sampled_from(["-1", "segment", "changing"]))
    epoch_segment = draw(st.integers(1, 2**31 - 1))
    props = draw(st.dictionaries(texts, family_values, max_size=4))
    header = draw(st.booleans())
    wide = draw(st.booleans())
    body_sizes = draw(st.sampled_from([[0], [1, 200], [255, 256], [300, 70_000], [None]]))
    out = []
    for _ in range(draw(st.integers(1, 12))):
        values: dict[Any, Any] = {}
        for a in annotations:
            if a == "seq":
                values[Symbol("x-opt-sequence-number")] = draw(st.integers(0, 2**63 - 1))
            elif a == "offset":
                values[Symbol("x-opt-offset")] = str(draw(st.integers(0, 2**40)))
            elif a == "time":
                values[Symbol("x-opt-enqueued-time")] = Timestamp(draw(st.integers(0, 2**45)))
            elif a == "key":
                values[Symbol("x-opt-partition-key")] = draw(texts)
            elif a == "publisher":
                values[Symbol("x-opt-publisher")] = draw(texts)
            elif a == "epoch":
                segment = {"-1": -1, "segment": epoch_segment}.get(epoch_mode, draw(st.integers(-1, 5)))
                values[Symbol("x-opt-sequence-number-epoch")] = Int(segment)
            else:
                values[Symbol("x-opt-extra")] = draw(_VALUES[extra_type])
        parts = []
        if header:
            parts.append(section(amqp.HEADER, [True, None, None, None, None]))
        parts.append(section(amqp.MESSAGE_ANNOTATIONS, Wide(values) if wide else values))
        if props:
            app = {k: draw(_VALUES[t]) for k, t in props.items()}
            parts.append(section(amqp.APPLICATION_PROPERTIES, Wide(app) if wide else app))
        size = draw(st.sampled_from(body_sizes))
        if size is not None:
            parts.append(section(amqp.DATA, draw(st.binary(min_size=size, max_size=size))))
        out.append(b"".join(parts))
    return out


@st.composite
def batches(draw: st.DrawFn) -> list[bytes]:
    """Messages of one to three producers, interleaved, with now and then one of any form."""
    messages_ = [m for f in draw(st.lists(family(), min_size=1, max_size=3)) for m in f]
    messages_ += draw(st.lists(messages(compound_properties=True), max_size=3))
    return draw(st.permutations(messages_))


def reference_rows(payloads: list[bytes]) -> list[dict[str, Any]]:
    reference = Columns()
    for payload in payloads:
        reference.append_sdk_message(decode_payload(memoryview(payload)))
    return reference.to_batch("3").to_pylist()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batches(), st.integers(0, 3))
def test_a_batch_decoded_column_by_column_reads_as_the_sdk_reads_each_message(payloads: list[bytes],
                                                                                 skip: int) -> None:  # fmt: skip
    array = pa.array([b"ignored"] * skip + payloads, pa.binary()).slice(skip)  # an array that starts inside
    batch, fallbacks = decode_batch(array, "3", min_rows=0)
    assert batch.schema == ARROW_SCHEMA
    assert batch.to_pylist() == reference_rows(payloads)
    one_by_one = Columns()
    for payload in payloads:
        decode_message(one_by_one, payload)
    assert fallbacks == one_by_one.fallbacks  # the SDK's decoder made exactly the messages it makes one by one


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batches(), st.sets(st.integers(0, len(ARROW_SCHEMA) - 1)))
def test_a_batch_decoded_for_some_columns_has_those_as_the_whole_decoding_has_them(
    payloads: list[bytes], needed: set[int]
) -> None:
    """Decoding for a query that hands on some columns (a small batch, message by message): those columns are what
    the whole decoding makes, in the source's schema; the others may be null, never wrong."""
    from eventhubs_spark.codec.layout import decode_spans

    array = pa.array(payloads, pa.binary())
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=len(payloads) + 1).astype(np.int64)
    whole, _ = decode_spans(array.buffers()[2] or b"", offsets[:-1], offsets[1:], "3")
    some, _ = decode_spans(array.buffers()[2] or b"", offsets[:-1], offsets[1:], "3", needed=frozenset(needed))
    assert some.schema == ARROW_SCHEMA
    for i in range(len(ARROW_SCHEMA)):
        if i in needed:
            assert some.column(i).to_pylist() == whole.column(i).to_pylist()
        else:
            assert some.column(i).null_count == len(payloads) or some.column(i).equals(whole.column(i))


def test_messages_of_one_producer_are_decoded_by_their_layout_without_a_message_by_message_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from eventhubs_spark.codec import layout

    def not_expected(*args: Any) -> Any:
        raise AssertionError("decoded message by message")

    monkeypatch.setattr(layout, "_one_by_one", not_expected)
    payloads = []
    for i in range(200):
        annotations = {
            Symbol("x-opt-sequence-number"): 10**6 + i,
            Symbol("x-opt-offset"): str(i * 1000),
            Symbol("x-opt-enqueued-time"): Timestamp(1_700_000_000_000 + i),
        }
        if i % 3 == 0:
            annotations[Symbol("x-opt-partition-key")] = f"device-{i}"
        payload = section(amqp.MESSAGE_ANNOTATIONS, annotations)
        if i % 2:  # every other event with properties; "n" as a small and as a large long
            props = {"device": f"dev-{i % 7}", "n": i * 1000, "ok": True, "id": UInt(i)}
            payload += section(amqp.APPLICATION_PROPERTIES, props)
        payloads.append(payload + section(amqp.DATA, bytes([i % 256]) * (i % 300)))
    batch, fallbacks = decode_batch(pa.array(payloads, pa.binary()), "3")
    assert fallbacks == 0
    assert batch.to_pylist() == reference_rows(payloads)


def test_a_value_that_is_not_utf8_text_sends_the_batch_message_by_message_with_the_same_rows() -> None:
    payloads = [
        section(amqp.MESSAGE_ANNOTATIONS, {Symbol("x-opt-sequence-number"): i})
        + section(amqp.APPLICATION_PROPERTIES, {"raw": b"\xff\xfe" if i == 60 else b"ok"})
        + section(amqp.DATA, b"x")
        for i in range(100)
    ]
    batch, _ = decode_batch(pa.array(payloads, pa.binary()), "3")
    rows = batch.to_pylist()
    assert rows == reference_rows(payloads)
    assert dict(rows[60]["properties"]) == {"raw": "fffe"}


def _has_layout(steps: list[tuple[Any, ...]], message: bytes) -> bool:
    """The layout's definition, one message at a time in plain Python: every constant where the steps say,
    every length prefix followed, every map's size as declared, and the message ends where the steps end."""
    p, opened = 0, {}
    for kind, *args in steps:
        if kind == 0:  # constant bytes
            if message[p : p + len(args[0])] != args[0]:
                return False
            p += len(args[0])
        elif kind == 1:  # a fixed-width value
            p += args[1]
        elif kind == 4:  # where a map must end
            begun, size = opened[args[0]]
            if p - begun != size:
                return False
        else:  # a length prefix (2: and that many bytes; 3: a map's size)
            width = args[1]
            if p + width > len(message):
                return False
            length = int.from_bytes(message[p : p + width], "big")
            p += width
            if kind == 2:
                p += length
            else:
                opened[args[0]] = (p, length)
    return p == len(message)


@pytest.mark.parametrize("seed", range(12))
def test_a_layout_takes_exactly_the_messages_that_have_it_whatever_their_neighbours_hold(seed: int) -> None:
    """The layout's match compares every message's constant runs in one pass over the batch's buffer; damaged
    messages (lengths that run past their end or into the next message, constants changed) must fail alone,
    never take a neighbour with them nor pass, and spans out of order must be judged the same."""
    import random

    from eventhubs_spark.codec import layout

    rng = random.Random(seed)
    messages = []
    for i in range(300):
        annotations = {
            Symbol("x-opt-sequence-number"): 10**6 + i,
            Symbol("x-opt-offset"): str(i * 1000),
            Symbol("x-opt-enqueued-time"): Timestamp(1_700_000_000_000 + i),
        }
        payload = section(amqp.MESSAGE_ANNOTATIONS, annotations)
        if i % 3:
            payload += section(amqp.APPLICATION_PROPERTIES, {"device": f"dev-{rng.randrange(50)}", "n": 10**6 + i})
        message = bytearray(payload + section(amqp.DATA, bytes(rng.randrange(256) for _ in range(rng.randrange(40)))))
        if i > 1 and rng.random() < 0.3:  # damaged anywhere: a constant, a length, a size, a value
            for _ in range(rng.randrange(1, 3)):
                message[rng.randrange(len(message))] = rng.randrange(256)
        messages.append(bytes(message))
    buffer, starts, ends = bytearray(), [], []
    for m in messages:  # with bytes between them, as frames' headers are between a stream's messages
        buffer += bytes(rng.randrange(256) for _ in range(rng.randrange(12)))
        starts.append(len(buffer))
        buffer += m
        ends.append(len(buffer))
    learnt = layout.learn(messages[1], 0, len(messages[1]))  # of the messages with properties
    data = pa.py_buffer(bytes(buffer))
    array = np.frombuffer(data, dtype=np.uint8)
    wanted = [_has_layout(learnt.steps, m) for m in messages]
    assert 100 < sum(wanted) < 200  # other layouts in the batch, and damaged messages among them
    ok, _ = layout._match(learnt, array, data, np.array(starts), np.array(ends))
    assert ok.tolist() == wanted
    order = np.array(rng.sample(range(len(messages)), len(messages)))
    ok, _ = layout._match(learnt, array, data, np.array(starts)[order], np.array(ends)[order])
    assert ok.tolist() == [wanted[i] for i in order]


def test_the_next_batch_of_a_stream_reuses_the_layout_learnt_last_and_learns_when_it_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from eventhubs_spark.codec import layout

    learnt: list[int] = []
    real_learn = layout.learn

    def counting_learn(buf: bytes, p: int, end: int) -> Any:
        learnt.append(1)
        return real_learn(buf, p, end)

    monkeypatch.setattr(layout, "learn", counting_learn)
    monkeypatch.setattr(layout, "_RECENT", [])

    def one_producer(first: int, props: dict[str, Any] | None) -> list[bytes]:
        out = []
        for i in range(first, first + 100):
            payload = section(amqp.MESSAGE_ANNOTATIONS, {Symbol("x-opt-sequence-number"): 10**6 + i,
                                                        Symbol("x-opt-offset"): str(i * 300)})  # fmt: skip
            if props is not None:
                payload += section(amqp.APPLICATION_PROPERTIES, props)
            out.append(payload + section(amqp.DATA, b"e" * (i % 50)))
        return out

    plain, with_props = one_producer(10**6, None), one_producer(10**6 + 100, {"device": "d1", "n": 7})
    for payloads, learns in ((plain, 1), (plain, 0), (with_props, 1), (with_props, 0), (plain, 1)):
        learnt.clear()
        batch, fallbacks = decode_batch(pa.array(payloads, pa.binary()), "3")
        assert fallbacks == 0 and len(learnt) == learns
        assert batch.to_pylist() == reference_rows(payloads)
    mixed = plain[:50] + with_props[50:]  # the recent layout takes the first half, a learnt one the rest
    learnt.clear()
    batch, _ = decode_batch(pa.array(mixed, pa.binary()), "3")
    assert len(learnt) == 1 and batch.to_pylist() == reference_rows(mixed)


def test_an_enqueued_time_beyond_what_microseconds_hold_fails_as_the_message_by_message_path_fails() -> None:
    payloads = [
        section(amqp.MESSAGE_ANNOTATIONS, {Symbol("x-opt-sequence-number"): 10**6 + i,
                                           Symbol("x-opt-enqueued-time"): Timestamp(2**62 if i == 70 else i)})
        + section(amqp.DATA, b"x")
        for i in range(100)
    ]  # fmt: skip
    with pytest.raises(pa.ArrowInvalid) as columnwise:
        decode_batch(pa.array(payloads, pa.binary()), "3")
    with pytest.raises(pa.ArrowInvalid) as reference:
        reference_rows(payloads)
    assert str(columnwise.value) == str(reference.value)
    ok = payloads[:70]
    assert decode_batch(pa.array(ok, pa.binary()), "3")[0].to_pylist() == reference_rows(ok)


def _event(segment: int, i: int) -> bytes:
    return section(amqp.MESSAGE_ANNOTATIONS, {
        Symbol("x-opt-sequence-number-epoch"): Int(segment), Symbol("x-opt-sequence-number"): i,
        Symbol("x-opt-offset"): str(i * 300), Symbol("x-opt-enqueued-time"): Timestamp(1_700_000_000_000 + i),
    }) + section(amqp.DATA, b"x" * 200)  # fmt: skip


@pytest.mark.parametrize("segment", [-1, 3])
def test_a_replication_segment_every_event_of_a_batch_shares_is_made_once_not_per_row(segment, monkeypatch) -> None:
    """Issue 50: systemProperties of a run of events of one hub (every event carries its replication segment) is one
    map repeated, built in Arrow's own form, not text made per row; and reads as the SDK reads each message."""
    from eventhubs_spark.codec import layout

    payloads = [_event(segment, i) for i in range(5000)]

    def per_row(*args: Any) -> Any:
        raise AssertionError("a constant segment made into text row by row")

    monkeypatch.setattr(layout, "_other_texts", per_row)
    batch, fallbacks = decode_batch(pa.array(payloads, pa.binary()), "3", min_rows=0)  # reference_rows' partition
    assert fallbacks == 0
    system = batch.column(ARROW_SCHEMA.get_field_index("systemProperties"))
    assert system.to_pylist() == [[("x-opt-sequence-number-epoch", str(segment))]] * 5000
    monkeypatch.undo()
    assert batch.to_pylist()[:50] == reference_rows(payloads[:50])
    changing = [*payloads[:10], _event(segment + 1, 10)]  # a promotion mid-batch: the general path, same rows
    assert decode_batch(pa.array(changing, pa.binary()), "3", min_rows=0)[0].to_pylist() == reference_rows(changing)


_NO_PANDAS = """
import sys
import numpy as np
from eventhubs_spark.codec.layout import decode_spans
payloads = [bytes.fromhex(h) for h in sys.argv[1:]]
buffer = b"".join(payloads)
ends = np.cumsum([len(p) for p in payloads])
starts = ends - [len(p) for p in payloads]
many = decode_spans(buffer, starts, ends, "0")[0]  # column by column: two layouts, maps of both kinds
few = decode_spans(buffer, starts[:2], ends[:2], "0", min_rows=3)[0]  # message by message
assert many.num_rows == len(payloads) and few.num_rows == 2, (many.num_rows, few.num_rows)
"""


_SHOW = """
print(many.column(7).to_pylist()[:2], few.column(8).to_pylist()[1])
"""


def test_decoding_never_imports_pandas_which_costs_each_fresh_python_worker_a_third_of_a_second() -> None:
    """``pa.array()`` imports pandas on its first call in a process; Spark starts fresh Python workers whenever
    its workers idled a minute, so the read path makes its arrays from buffers (``codec.arrays``)."""
    plain = [_event(3, i) for i in range(40)]  # each with its replication segment in systemProperties
    with_props = [
        section(amqp.MESSAGE_ANNOTATIONS, {Symbol("x-opt-sequence-number"): 100 + i, Symbol("x-opt-offset"): str(i)})
        + section(amqp.APPLICATION_PROPERTIES, {"n": i, "ok": True, "s": "v"})
        + section(amqp.DATA, b"y" * 10)
        for i in range(40)
    ]
    payloads = [p for pair in zip(with_props, plain, strict=True) for p in pair]
    out = without_pandas(_NO_PANDAS, *(p.hex() for p in payloads), show=_SHOW)
    assert "('n', '0')" in out and "x-opt-sequence-number-epoch" in out, out
