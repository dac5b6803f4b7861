"""Unit tests of :mod:`eventhubs_spark.capture.reader`."""

from __future__ import annotations

import datetime as dt
import threading
from collections import OrderedDict
from pathlib import Path

import pyarrow as pa
import pytest

from eventhubs_emulator import capture as writer
from eventhubs_spark.errors import DataLossError
from tests.fresh import without_pandas
from tests.unit.support.capture_files import _Event, _file
from tests.unit.support.capture_read import MS0, CountingStore, read, seqs_of, write


def test_a_gap_fails_naming_the_partition_the_range_and_the_files_around_it(tmp_path):
    a = write(tmp_path, "0", 0, [0, 1, 2])
    c = write(tmp_path, "0", 2, [6, 7])
    with pytest.raises(DataLossError) as info:
        seqs_of(read(tmp_path, [(a, 0), (c, 6)], 0, 8))
    text = str(info.value)
    assert "partition 0: sequence numbers [3, 6) (3 events) are in no Capture file" in text
    assert f"after {a}, before {c}" in text and "eventhubs.capture.lateFileWait" in text
    assert "failOnDataLoss=false" in text and "TOPSECRET" not in text
    with pytest.raises(DataLossError, match=r"\[3, 5\).*with no file after it"):
        seqs_of(read(tmp_path, [(a, 0)], 0, 5))


def test_a_large_files_slices_each_fetch_and_decode_only_their_blocks_with_the_rows_of_a_whole_read(
    tmp_path, monkeypatch
):
    """A stream's batches read a large file a slice at a time (Capture writes up to 500 MB a window): the first
    task maps where its blocks lie, reading it a window at a time (never whole), and keeps the map; every task
    fetches the header and its range's blocks alone, and each decodes only those blocks. The rows are those of
    a whole-file read."""
    monkeypatch.setattr(writer, "BLOCK_EVENTS", 50)
    for codec in ("null", "deflate"):
        _slices_of_a_large_file(tmp_path / codec, codec)


def _slices_of_a_large_file(root: Path, codec: str) -> None:
    from eventhubs_spark.capture import reader as capture_reader

    name = write(root, "0", 0, list(range(1000, 3000)), codec=codec)  # 40 blocks of 50 events
    size = (root / name).stat().st_size
    whole = pa.Table.from_batches(read(root, [(name, 1000)], 1000, 3000)).to_pylist()  # a small file: whole
    store = CountingStore(str(root))
    decoded: list[int] = []

    def counting(data, where, partition, real_decode=capture_reader.decode):
        seqs, batch = real_decode(data, where, partition)
        decoded.append(len(seqs))
        return seqs, batch

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(capture_reader, "_CACHE_MAX_BYTES", 1000)  # from here on, every file is large
        patch.setattr(capture_reader, "_CACHE", OrderedDict())  # (the small file's decoding is kept there)
        patch.setattr(capture_reader, "_MAPS", OrderedDict())
        patch.setattr(capture_reader, "_MAP_WINDOW", 4096)
        patch.setattr(capture_reader, "open_store", lambda *_: store)
        patch.setattr(capture_reader, "decode", counting)
        mapped: list[tuple[int, int]] = []

        def mapping(fetch, size, where, window, real=capture_reader.streamed_block_map):
            def counted(offset: int, length: int) -> bytes:
                mapped.append((offset, length))
                return fetch(offset, length)

            return real(counted, size, where, window)

        patch.setattr(capture_reader, "streamed_block_map", mapping)
        rows = []
        for lo in range(1000, 3000, 130):  # a stream's batches: 130 events each, over at most 4 blocks
            rows += pa.Table.from_batches(read(root, [(name, 1000)], lo, min(lo + 130, 3000))).to_pylist()
    assert rows == whole
    lengths = [length for _, _, length in store.ranges]
    assert None not in lengths and size > 8 * 4096, "never read whole"
    assert mapped[0] == (0, 4096) and max(n for _, n in mapped) == 4096, "mapped a window at a time"
    assert sum(n for _, n in mapped) <= size and mapped[-1][0] + mapped[-1][1] == size, "once, to the file's end"
    assert len(lengths) - len(mapped) == 2 * len(range(1000, 3000, 130)), "then the header and the range's blocks"
    assert all(length < size / 8 for length in lengths), "a window, the header, or 4 blocks of 40"
    assert max(decoded) <= 200, f"each task decoded at most the 4 blocks of its range: {decoded}"


@pytest.mark.parametrize("cut", [1500, 1520])  # a hole at a block's end, or inside a block
def test_a_large_file_is_decoded_a_piece_at_a_time_with_its_holes_found_where_they_are(tmp_path, monkeypatch, cut):
    """A batch read of a whole large file decodes a piece of its blocks at a time (two, here), never the whole
    file at once, and a hole between pieces is called for what it is, not up to the range's end."""
    from eventhubs_spark.capture import reader as capture_reader

    monkeypatch.setattr(writer, "BLOCK_EVENTS", 50)
    monkeypatch.setattr(capture_reader, "_CACHE_MAX_BYTES", 1000)
    monkeypatch.setattr(capture_reader, "_MAPS", OrderedDict())
    monkeypatch.setattr(capture_reader, "_PIECE_BYTES", 1)
    held = list(range(1000, cut)) + list(range(1600, 2000))
    name = write(tmp_path, "0", 0, held)
    decoded: list[int] = []

    def counting(data, where, partition, real_decode=capture_reader.decode):
        seqs, batch = real_decode(data, where, partition)
        decoded.append(len(seqs))
        return seqs, batch

    monkeypatch.setattr(capture_reader, "decode", counting)
    stats: dict = {}
    batches = list(read(tmp_path, [(name, 1000)], 1000, 2000, stats, fail=False))
    assert seqs_of(batches) == held and stats["lost"] == 1600 - cut
    assert len(batches) >= 9 and max(decoded) <= 100, f"two blocks of 50 at a time: {decoded}"
    with pytest.raises(DataLossError, match=rf"sequence numbers \[{cut}, 1600\) \({1600 - cut} events\)"):
        list(read(tmp_path, [(name, 1000)], 1000, 2000))


def test_the_next_large_file_is_mapped_ahead_while_the_task_decodes_and_neither_is_read_whole(tmp_path, monkeypatch):
    from eventhubs_spark.capture import reader as capture_reader

    monkeypatch.setattr(writer, "BLOCK_EVENTS", 50)
    monkeypatch.setattr(capture_reader, "_CACHE_MAX_BYTES", 1000)
    monkeypatch.setattr(capture_reader, "_MAPS", OrderedDict())
    monkeypatch.setattr(capture_reader, "_MAP_WINDOW", 4096)
    a = write(tmp_path, "0", 0, list(range(0, 500)))
    b = write(tmp_path, "0", 1, list(range(500, 1000)))
    threads: list[tuple[str, str]] = []

    class Store(CountingStore):
        def read(self, name: str, length: int | None = None, offset: int = 0) -> bytes:
            threads.append((name, threading.current_thread().name))
            return super().read(name, length, offset)

    store = Store(str(tmp_path))
    monkeypatch.setattr(capture_reader, "open_store", lambda *_: store)
    assert seqs_of(read(tmp_path, [(a, 0), (b, 500)], 0, 1000)) == list(range(1000))
    assert None not in [length for _, _, length in store.ranges], "no file read whole"
    assert {(str(tmp_path), a), (str(tmp_path), b)} <= set(capture_reader._MAPS)
    assert any(name == b and thread.startswith("eventhubs-capture-ahead") for name, thread in threads), threads


def test_a_large_file_out_of_order_or_written_again_is_still_read_exactly(tmp_path, monkeypatch):
    """What the block map cannot vouch for is read whole: blocks that do not begin in ascending order, and a file
    that is no longer the one its map was made from."""
    from eventhubs_spark.capture import reader as capture_reader

    monkeypatch.setattr(writer, "BLOCK_EVENTS", 50)
    monkeypatch.setattr(capture_reader, "_CACHE_MAX_BYTES", 1000)
    monkeypatch.setattr(capture_reader, "_MAPS", OrderedDict())
    shuffled = write(tmp_path, "0", 0, list(range(1500, 2000)) + list(range(1000, 1500)))
    assert seqs_of(read(tmp_path, [(shuffled, 1000)], 1200, 1700)) == list(range(1200, 1700))
    assert (str(tmp_path), shuffled) not in capture_reader._MAPS
    name = write(tmp_path, "0", 1, list(range(3000, 3500)))
    assert seqs_of(read(tmp_path, [(name, 3000)], 3000, 3100)) == list(range(3000, 3100))
    assert (str(tmp_path), name) in capture_reader._MAPS
    write(tmp_path, "0", 1, list(range(3000, 3500)), codec="deflate")  # the same name, other bytes
    assert seqs_of(read(tmp_path, [(name, 3000)], 3300, 3400)) == list(range(3300, 3400))


def _reference_rows(data: bytes) -> list[dict]:
    """What read_file (a record at a time, into Python values) says each row is."""
    from eventhubs_spark.capture.files import read_file
    from eventhubs_spark.codec.columns import to_text

    events = read_file(data, "f")
    own = {"x-opt-sequence-number", "x-opt-offset", "x-opt-enqueued-time", "x-opt-partition-key"}
    return [{"body": events.bodies[i] or b"", "partition": "3", "offset": events.offsets[i],
             "sequenceNumber": events.sequence_numbers[i],
             "enqueuedTime": dt.datetime.fromtimestamp(events.enqueued_ms[i] / 1000, dt.timezone.utc),
             "publisher": None, "partitionKey": events.system_properties[i].get("x-opt-partition-key"),
             "properties": [(k, to_text(v)) for k, v in events.properties[i].items()],
             "systemProperties": [(k, to_text(v)) for k, v in events.system_properties[i].items() if k not in own]}
            for i in range(len(events))]  # fmt: skip


def _rows(batch) -> list[dict]:
    rows = batch.to_pylist()
    for r in rows:
        r["enqueuedTime"] = r["enqueuedTime"].astimezone(dt.timezone.utc)
    return rows


def test_records_without_a_key_are_found_with_numpy_and_read_as_the_reference_reads_them(monkeypatch):
    """The usual block (same layout, no partition key) has its records found by numpy (columnar._chain), not by the
    walk from record to record: the same rows; a body that carries a whole record sends its block to the walk."""
    from eventhubs_spark.capture import columnar

    found: list[bool] = []
    chain = columnar._chain

    def spy(*args):
        got = chain(*args)
        found.append(got is not None)
        return got

    monkeypatch.setattr(columnar, "_chain", spy)
    made = [_Event(100 + i, MS0 + i, bytes([65 + i % 26]) * (20 + i * 37 % 300)) for i in range(500)]
    data = writer.container_file([writer.event_record(e, str(10**12 + e.sequence_number)) for e in made], "null")
    seqs, batch = columnar.decode(data, "f", "3")
    assert list(seqs) == list(range(100, 600)) and _rows(batch) == _reference_rows(data)
    assert found == [True]
    inner = writer.event_record(_Event(7, MS0, b"inner"), str(10**12 + 7))
    made[250] = _Event(350, MS0 + 250, b"ab" + inner + b"cd")
    data = writer.container_file([writer.event_record(e, str(10**12 + e.sequence_number)) for e in made], "null")
    found.clear()
    seqs, batch = columnar.decode(data, "f", "3")
    assert list(seqs) == list(range(100, 600)) and _rows(batch) == _reference_rows(data)
    assert found == [False], "the block went to the walk"


_FRESH = """
import sys
from eventhubs_spark.capture.columnar import decode
decoded = []
for path in sys.argv[1:]:
    with open(path, "rb") as file:
        decoded.append(decode(file.read(), path, "3"))
"""


_SHOW = """
for seqs, batch in decoded:
    print(seqs.tolist(), batch.to_pylist()[-1])
"""


def test_decoding_capture_files_never_imports_pandas_in_a_fresh_worker(tmp_path):
    """A file read by numpy (no keys, no properties), one walked record by record (keys, properties of each
    kind), and a 2017 file (times as text): Arrow arrays from buffers, no pandas import (0.3 s a fresh worker)."""
    plain = [_Event(100 + i, MS0 + i, b"x" * (20 + i)) for i in range(300)]
    mixed = [_Event(7, MS0, b"a", key="k", props={"s": "x", "n": 5, "f": 1.5, "b": b"\x01", "t": True}),
             _Event(8, MS0 + 1, b"b")]  # fmt: skip
    old = b"".join([writer._long(3), writer._string("300"), writer._string("10/16/2017 6:18:55 PM"),
                    writer._long(0), writer._long(0), writer._long(1) + writer._bytes(b"old")])  # fmt: skip
    files = {"plain": _file(plain), "mixed": _file(mixed, "deflate"), "old": writer.container_file([old], "null")}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    out = without_pandas(_FRESH, *(str(tmp_path / name) for name in files), show=_SHOW).splitlines()
    assert out[0].startswith(str(list(range(100, 400)))) and "'body': b'" + "x" * 319 in out[0]
    assert "[7, 8]" in out[1] and "'partitionKey': None" in out[1]
    assert out[2].startswith("[3]") and "b'old'" in out[2]
