"""Unit tests of :mod:`eventhubs_spark.capture.columnar`."""

from __future__ import annotations

import datetime as dt

import pytest

from eventhubs_emulator import capture as writer
from tests.unit.capture.test_reader import _reference_rows, _rows
from tests.unit.support.capture_files import _Event, _file
from tests.unit.support.capture_read import MS0


def test_the_columnar_decoder_gives_the_rows_the_reference_reader_gives():
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from eventhubs_spark.capture.columnar import decode

    props = st.dictionaries(st.text(min_size=1, max_size=6), st.one_of(
        st.integers(-(2**40), 2**40), st.floats(allow_nan=False), st.text(max_size=8), st.binary(max_size=8),
        st.booleans(), st.none()), max_size=3)  # fmt: skip
    event = st.tuples(st.binary(max_size=300), st.one_of(st.none(), st.text(min_size=1, max_size=12)), props,
                      st.integers(0, 5000))  # fmt: skip

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(event, min_size=1, max_size=60), st.integers(0, 2**40), st.sampled_from(["null", "deflate"]),
           st.booleans(), st.booleans(), st.booleans())  # fmt: skip
    def check(events, first, codec, uniform, keyed, fake):
        ms = 1_764_000_000_000
        made = []
        for i, (body, key, properties, gap) in enumerate(events):
            if uniform:  # the fast path's shapes: same-length offsets, no properties, a key on all or none
                body, key, properties = body or b"x", f"device-{i % 11}" if keyed else None, {}
                if fake and i % 3 == 1:  # a body that carries a whole record: the numpy search finds it too
                    inner = writer.event_record(_Event(first + i, ms, b"inner"), str(10**12 + first + i))
                    body = body[:7] + inner + body[7:]
            ms += gap
            made.append(_Event(first + i, ms, body, key=key, props=properties))
        records = [writer.event_record(e, str(10**12 + e.sequence_number) if uniform else str(e.offset))
                   for e in made]  # fmt: skip
        data = writer.container_file(records, codec)
        seqs, batch = decode(data, "f", "3")
        assert list(seqs) == [first + i for i in range(len(events))]
        assert _rows(batch) == _reference_rows(data)

    check()


def test_the_columnar_decoder_reads_old_files_and_refuses_bad_ones():
    from eventhubs_spark.capture.columnar import decode
    from eventhubs_spark.errors import CaptureFileError

    record = b"".join([writer._long(3), writer._string("300"), writer._string("10/16/2017 6:18:55 PM"),
                       writer._long(0), writer._long(0), writer._long(1) + writer._bytes(b"old")])  # fmt: skip
    data = writer.container_file([record, record.replace(b"\x06", b"\x08", 1)], "null")  # sequence numbers 3, 4
    seqs, batch = decode(data, "f", "3")
    assert list(seqs) == [3, 4] and _rows(batch) == _reference_rows(data)
    assert _rows(batch)[0]["enqueuedTime"] == dt.datetime(2017, 10, 16, 18, 18, 55, tzinfo=dt.timezone.utc)
    good = _file([_Event(1, MS0, b"x" * 50), _Event(2, MS0 + 1, b"y")])
    with pytest.raises(CaptureFileError, match="cut short"):
        decode(good[:-30], "f", "0")
    long_body = writer.event_record(_Event(9, MS0, b"z" * 10), "9").replace(writer._long(10), writer._long(90), 1)
    with pytest.raises(CaptureFileError, match="f block 0"):
        decode(writer.container_file([long_body], "null"), "f", "0")
