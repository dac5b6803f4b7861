"""Unit tests of :mod:`eventhubs_spark.capture.files`."""

from __future__ import annotations

import io
import json
import random

import pytest

from eventhubs_emulator import capture as writer
from eventhubs_spark.capture.files import NeedMore, first_sequence, read_file
from eventhubs_spark.errors import CaptureFileError
from tests.unit.support.capture_files import _Event, _file
from tests.unit.support.capture_read import MS0

fastavro = pytest.importorskip("fastavro")


def test_events_read_back_as_written_with_either_codec_and_as_fastavro_reads_them():
    ms = 1_764_000_000_123
    events = [_Event(7, ms, b"\x00bin", key="k", props={"s": "x", "n": 5, "f": 1.5, "b": b"\x01", "t": True}),
              _Event(8, ms + 1000, b"two"), _Event(9, ms + 2000, b"")]  # fmt: skip
    for codec in ("null", "deflate"):
        data = _file(events, codec)
        got = read_file(data, "f.avro")
        assert got.sequence_numbers == [7, 8, 9] and got.offsets == ["700", "800", "900"]
        assert got.enqueued_ms == [ms, ms + 1000, ms + 2000] and got.enqueued_to_the_second == [False] * 3
        assert got.bodies == [b"\x00bin", b"two", b""]
        assert got.properties[0] == {"s": "x", "n": 5, "f": 1.5, "b": b"\x01", "t": "True"}
        assert got.system_properties[0] == {"x-opt-enqueued-time": ms, "x-opt-partition-key": "k"}
        theirs = list(fastavro.reader(io.BytesIO(data)))
        assert [r["SequenceNumber"] for r in theirs] == got.sequence_numbers
        assert [r["Properties"] for r in theirs] == got.properties and [r["Body"] for r in theirs] == got.bodies


def test_bad_files_each_get_their_own_message():
    good = _file([_Event(1, 1_764_000_000_000, b"x" * 50), _Event(2, 1_764_000_000_001, b"y")])
    with pytest.raises(CaptureFileError, match=r"f\.avro is empty \(0 bytes\)"):
        read_file(b"", "f.avro")
    with pytest.raises(CaptureFileError, match=r"f\.avro: not an Avro object container file"):
        read_file(b"PK\x03\x04", "f.avro")
    with pytest.raises(CaptureFileError, match=r"f\.avro: cut short"):
        read_file(good[:-30], "f.avro")
    corrupt = good[:-1] + bytes([good[-1] ^ 0xFF])
    with pytest.raises(CaptureFileError, match="sync marker differs from the header's: the file is corrupt"):
        read_file(corrupt, "f.avro")
    other = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]})
    data = good.replace(writer.WRITER_SCHEMA.encode(), other.encode()).replace(
        writer._long(len(writer.WRITER_SCHEMA)), writer._long(len(other)), 1)  # fmt: skip
    with pytest.raises(CaptureFileError, match="its writer schema is not Event Hubs Capture's"):
        read_file(data, "f.avro")
    deflated = _file([_Event(1, 1, b"z" * 100)], "deflate")
    header_end = deflated.index(deflated[-16:]) + 16
    block = writer._long(1) + writer._long(4) + b"\xff\xff\xff\xff" + deflated[-16:]
    with pytest.raises(CaptureFileError, match="block 0 does not inflate"):
        read_file(deflated[:header_end] + block, "f.avro")


def test_a_files_first_sequence_number_comes_from_its_first_bytes():
    for codec in ("null", "deflate"):
        data = _file([_Event(s, MS0, b"x" * 80) for s in range(500, 530)], codec)
        assert first_sequence(data, "f", whole=True) == 500
        with pytest.raises(NeedMore):
            first_sequence(data[:200], "f", whole=False)  # inside the header
        assert first_sequence(data[:700], "f", whole=False) == 500  # header and the block's start are enough
    assert first_sequence(_file([]), "empty", whole=True) is None  # zero-count blocks only


@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_a_large_files_block_map_is_read_a_window_at_a_time_with_every_check_of_a_whole_read(codec, monkeypatch):
    """The map of a large file, read by windows of any size, is the same; its blocks hold every event of the file;
    a window smaller than a block skips the block's body; a corrupt marker or a file cut short is named with its
    byte in the file, whatever window it fell in."""
    from eventhubs_spark.capture.columnar import decode
    from eventhubs_spark.capture.files import streamed_block_map
    from eventhubs_spark.errors import CaptureFileError

    monkeypatch.setattr(writer, "BLOCK_EVENTS", 40)
    # bodies that deflate does not shrink
    events = [_Event(s, MS0 + s, random.Random(s).randbytes(300 + s % 7), key=f"k{s % 3}", props={"n": s})
              for s in range(1000, 1400)]  # fmt: skip
    data = _file(events, codec)
    fetched: list[tuple[int, int]] = []

    def read(offset: int, length: int) -> bytes:
        fetched.append((offset, length))
        return data[offset : offset + length]

    maps = []
    for window in (1, 97, 4096, 50_000, len(data)):
        fetched.clear()
        maps.append(streamed_block_map(read, len(data), "f.avro", window))
        assert all(length <= max(window, 64 << 10) for _, length in fetched), (window, fetched)
        if window == 1:  # what it needs: each block's count and size, first bytes and marker, never its rest
            assert sum(length for _, length in fetched) < len(data) / 4, "a block's body is skipped past"
    assert all(m == maps[0] for m in maps), "the same map, whatever the window"
    blocks_map = maps[0]
    assert len(blocks_map.offsets) == 10 and list(blocks_map.firsts) == list(range(1000, 1400, 40))
    assert blocks_map.offsets[0] == blocks_map.head and blocks_map.ends[-1] == len(data)
    spans = zip(blocks_map.offsets, blocks_map.ends, strict=True)
    parts = data[: blocks_map.head] + b"".join(data[a:b] for a, b in spans)
    seqs, batch = decode(parts, "f.avro", "0")
    _, whole = decode(data, "f.avro", "0")
    assert list(seqs) == list(range(1000, 1400)) and batch.equals(whole)
    at = blocks_map.ends[3] - 16  # block 3's sync marker
    corrupt = data[:at] + bytes(16) + data[at + 16 :]
    for window in (64, 1 << 20):
        with pytest.raises(CaptureFileError, match=f"sync marker differs .* corrupt \\(at byte {at}\\)"):
            streamed_block_map(lambda o, n: corrupt[o : o + n], len(corrupt), "f.avro", window)
        cut = data[: blocks_map.ends[5] - 100]
        with pytest.raises(CaptureFileError, match="cut short: block 5 of"):
            streamed_block_map(lambda o, n, cut=cut: cut[o : o + n], len(cut), "f.avro", window)
        bare = data[: blocks_map.ends[5] - 16]  # block 5 whole, its sync marker cut off

        def ranged(offset: int, length: int, bare: bytes = bare) -> bytes:
            assert length > 0 and offset + length <= len(bare), "a range inside the file, as a blob store wants"
            return bare[offset : offset + length]

        with pytest.raises(CaptureFileError, match="cut short: 16 bytes wanted, 0 left"):
            streamed_block_map(ranged, len(bare), "f.avro", window)
