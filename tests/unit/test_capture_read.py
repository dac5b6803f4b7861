"""Reading a partition's history from Capture files (issue 48): the driver's index (which files hold a range,
where history begins, where an enqueued time falls), and the executor's read (each event once, in order, gaps
called after waiting for a late file), over a local folder of files the emulator's writer made."""

from __future__ import annotations

import datetime as dt
import logging
import os
import random
import threading
import time
from collections import OrderedDict
from pathlib import Path

import pyarrow as pa
import pytest

from eventhubs_emulator import capture as writer
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.capture.files import NeedMore, first_sequence
from eventhubs_spark.capture.index import CaptureIndex
from eventhubs_spark.capture.reader import read_capture
from eventhubs_spark.capture.store import CaptureRead, CaptureSource, LocalStore, account_url
from eventhubs_spark.errors import DataLossError, OptionError
from eventhubs_spark.options import read_options

from ..fresh import without_pandas
from .test_capture_files import _Event, _file

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=a;SharedAccessKey=TOPSECRET;EntityPath=hub"
SETTINGS = parse_connection_string(CONN)
T0 = dt.datetime(2026, 1, 2, 3, 0, 0, tzinfo=dt.timezone.utc)
MS0 = int(T0.timestamp() * 1000)


def twice(root: Path, name: str) -> str:
    """The file ``name`` written again under the next second's name, as a retried write would."""
    start = dt.datetime.strptime(name[-24:-5], "%Y/%m/%d/%H/%M/%S").replace(tzinfo=dt.timezone.utc)
    again = name[:-24] + (start + dt.timedelta(seconds=1)).strftime("%Y/%m/%d/%H/%M/%S") + ".avro"
    (root / again).parent.mkdir(parents=True, exist_ok=True)
    (root / again).write_bytes((root / name).read_bytes())
    return again


def write(root: Path, partition: str, minute: int, seqs: list[int], second: int = 0, codec: str = "null") -> str:
    """A Capture file of ``seqs`` (enqueued a second apart from the window's start) for the window at ``minute``."""
    start = T0 + dt.timedelta(minutes=minute, seconds=second)
    name = writer.file_name(writer.DEFAULT_NAME_FORMAT, "ns", "hub", partition, start)
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    ms = int(start.timestamp() * 1000)
    data = _file([_Event(s, ms + 1000 * i + 1, f"e{s}".encode(), key=f"k{s % 3}", props={"n": s})
                  for i, s in enumerate(seqs)], codec)  # fmt: skip
    # whole or not at all, as Capture's blobs appear (a reader polling for a late file never sees half of it)
    partial = root.parent / f".{root.name}-{partition}-{minute}-{second}.partial"
    partial.write_bytes(data)
    os.replace(partial, path)
    return name


class CountingStore(LocalStore):
    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.reads: list[tuple[str, int | None]] = []
        self.ranges: list[tuple[str, int, int | None]] = []

    def read(self, name: str, length: int | None = None, offset: int = 0) -> bytes:
        self.reads.append((name, length))
        self.ranges.append((name, offset, length))
        return super().read(name, length, offset)


def source(root: Path, wait: float = 0.0) -> CaptureSource:
    return CaptureSource(str(root), namespace="ns", hub="hub", late_file_wait=wait)


def read(root: Path, files, start: int, end: int, stats: dict | None = None, fail: bool = True, wait: float = 0.0):
    """The batches of partition 0's ``[start, end)`` read from ``files`` (name, first sequence number)."""
    return read_capture(CaptureRead(source(root, wait), tuple(files)), SETTINGS, "0", start, end, fail,
                        {} if stats is None else stats)  # fmt: skip


def seqs_of(batches) -> list[int]:
    return [s for b in batches for s in b.column("sequenceNumber").to_pylist()]


def test_a_files_first_sequence_number_comes_from_its_first_bytes():
    for codec in ("null", "deflate"):
        data = _file([_Event(s, MS0, b"x" * 80) for s in range(500, 530)], codec)
        assert first_sequence(data, "f", whole=True) == 500
        with pytest.raises(NeedMore):
            first_sequence(data[:200], "f", whole=False)  # inside the header
        assert first_sequence(data[:700], "f", whole=False) == 500  # header and the block's start are enough
    assert first_sequence(_file([]), "empty", whole=True) is None  # zero-count blocks only


def test_the_index_finds_the_files_of_a_range_with_few_reads(tmp_path):
    names = [write(tmp_path, "0", m, list(range(10 * m, 10 * m + 10))) for m in range(40)]  # 400 events, 40 files
    write(tmp_path, "1", 0, [0, 1])  # another partition's file is never read for partition 0
    store = CountingStore(str(tmp_path))
    index = CaptureIndex(source(tmp_path), SETTINGS, store=store)
    assert index.covering("0", 123, 157) == ((names[12], 120), (names[13], 130), (names[14], 140), (names[15], 150))
    probed = {n for n, _ in store.reads}
    assert len(probed) <= 16, "a binary search and the files of the range, not every file"
    assert all(length is not None for _, length in store.reads), "only the heads of files are read to plan"
    assert index.covering("0", 0, 5) == ((names[0], 0),)
    assert index.covering("0", 395, 500) == ((names[39], 390),)
    assert index.earliest("0") == 0 and index.earliest("1") == 0 and index.earliest("2") is None


def test_empty_files_duplicates_and_gaps_between_files_are_planned_over(tmp_path):
    a = write(tmp_path, "0", 0, [5, 6, 7])
    write(tmp_path, "0", 5, [])  # an empty window
    b = write(tmp_path, "0", 10, [8, 9])
    b2 = twice(tmp_path, b)
    write(tmp_path, "0", 15, [])
    c = write(tmp_path, "0", 20, [20, 21])  # 10..19 never captured
    index = CaptureIndex(source(tmp_path), SETTINGS, store=LocalStore(str(tmp_path)))
    assert index.earliest("0") == 5
    assert index.covering("0", 6, 30) == ((a, 5), (b, 8), (b2, 8), (c, 20))
    assert index.covering("0", 9, 21) == ((b2, 8), (c, 20))
    assert index.covering("0", 0, 3) == ((a, 5),)  # before every file: the first, whose start shows the gap


def test_an_enqueued_time_falls_in_the_last_file_named_at_or_before_it(tmp_path):
    for m in range(5):
        write(tmp_path, "0", m, list(range(10 * m, 10 * m + 10)))
    index = CaptureIndex(source(tmp_path), SETTINGS, store=LocalStore(str(tmp_path)))
    # minute 2's events are enqueued at 02:01, 03:01 ... (ms after each whole second): after 00:02:04.5 comes 25
    after = int((T0 + dt.timedelta(minutes=2, seconds=4, milliseconds=500)).timestamp() * 1_000_000)
    assert index.find_time("0", after) == 25
    assert index.find_time("0", int((T0 + dt.timedelta(minutes=2, seconds=30)).timestamp() * 1_000_000)) == 30
    assert index.find_time("0", int((T0 - dt.timedelta(days=1)).timestamp() * 1_000_000)) == 0
    assert index.find_time("0", int((T0 + dt.timedelta(hours=1)).timestamp() * 1_000_000)) is None


def test_a_range_reads_each_event_once_in_order_over_duplicates_and_overlaps(tmp_path):
    a = write(tmp_path, "0", 0, [0, 1, 2, 3])
    a2 = twice(tmp_path, a)
    b = write(tmp_path, "0", 1, [2, 3, 4, 5, 6], codec="deflate")  # overlaps a
    stats: dict = {}
    got = list(read(tmp_path, [(a, 0), (a2, 0), (b, 2)], 1, 6, stats))
    assert seqs_of(got) == [1, 2, 3, 4, 5]
    assert stats["via"] == "capture" and stats["read"] == 5 and stats["lost"] == 0
    row = got[0].slice(0, 1).to_pylist()[0]
    assert row["body"] == b"e1" and row["partition"] == "0" and row["offset"] == "100"
    assert row["partitionKey"] == "k1" and row["properties"] == [("n", "1")] and row["systemProperties"] == []
    assert row["enqueuedTime"] == dt.datetime.fromtimestamp((MS0 + 1001) / 1000, dt.timezone.utc)
    assert row["publisher"] is None


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


def test_with_failOnDataLoss_false_a_gap_is_logged_with_its_count_and_passed_over(tmp_path, caplog):
    a = write(tmp_path, "0", 0, [0, 1, 2])
    c = write(tmp_path, "0", 2, [6, 7])
    stats: dict = {}
    with caplog.at_level(logging.WARNING, logger="eventhubs_spark"):
        assert seqs_of(read(tmp_path, [(a, 0), (c, 6)], 0, 8, stats, fail=False)) == [0, 1, 2, 6, 7]
    assert stats["lost"] == 3
    assert any("3 events [3, 6) are in no Capture file" in r.getMessage() for r in caplog.records)


def test_a_file_written_late_is_waited_for_and_read_in_its_place(tmp_path):
    a = write(tmp_path, "0", 0, [0, 1, 2])
    c = write(tmp_path, "0", 2, [6, 7])
    threading.Timer(1.0, write, (tmp_path, "0", 1, [3, 4, 5])).start()  # the back-filled window
    began = time.monotonic()
    assert seqs_of(read(tmp_path, [(a, 0), (c, 6)], 0, 8, wait=10.0)) == list(range(8))
    assert time.monotonic() - began < 8, "read as soon as the late file came"


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


@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_a_large_files_block_map_is_read_a_window_at_a_time_with_every_check_of_a_whole_read(codec, monkeypatch):
    """The map of a large file, read by windows of any size, is the same; its blocks hold every event of the file;
    a window smaller than a block skips the block's body; a corrupt marker or a file cut short is named with its
    byte in the file, whatever window it fell in."""
    from eventhubs_spark.capture.columnar import decode
    from eventhubs_spark.capture.files import CaptureFileError, streamed_block_map

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


def test_capture_options_are_checked_with_examples():
    base = {"eventhubs.connectionString": CONN}
    options = read_options({**base, "eventhubs.capture.location": "abfss://cap@acct.dfs.core.windows.net/x"}, "stream")
    assert options.capture is not None and options.capture.namespace == "ns" and options.capture.hub == "hub"
    assert options.capture.late_file_wait == 60.0
    with pytest.raises(OptionError, match=r"eventhubs.capture.location 's3://b/x': a local path.*abfss://"):
        read_options({**base, "eventhubs.capture.location": "s3://b/x"}, "batch")
    with pytest.raises(OptionError, match=r"eventhubs.capture.sasToken goes with eventhubs.capture.location"):
        read_options({**base, "eventhubs.capture.sasToken": "sig=1"}, "batch")
    with pytest.raises(OptionError, match=r"nameFormat.*no \{Second\}"):
        read_options(
            {
                **base,
                "eventhubs.capture.location": "/x",
                "eventhubs.capture.nameFormat": writer.DEFAULT_NAME_FORMAT.replace("/{Second}", ""),
            },
            "batch",
        )
    with pytest.raises(OptionError, match="did you mean"):
        read_options({**base, "eventhubs.capture.lateFileWiat": "1s"}, "batch")
    from eventhubs_spark.capture.store import local_root

    assert [local_root(x) for x in ("/c", "file:///c", "dbfs:/mnt/c", "abfss://cap@acct.dfs.core.windows.net/x")] == [
        "/c", "/c", "/dbfs/mnt/c", None]  # fmt: skip
    assert account_url("abfss://cap@acct.dfs.core.windows.net/x") == "https://acct.blob.core.windows.net"
    assert account_url("http://127.0.0.1:10000/devstoreaccount1/cap/x") == "http://127.0.0.1:10000/devstoreaccount1"
    assert "TOPSECRET" not in repr(read_options({**base, "eventhubs.capture.location": "/x",
                                                 "eventhubs.capture.sasToken": "TOPSECRET"}, "batch"))  # fmt: skip


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


_FRESH_PLANNER = """
import sys
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.capture.index import CaptureIndex
from eventhubs_spark.capture.store import CaptureSource
root, conn, after_us = sys.argv[1:]
source = CaptureSource(root, namespace="ns", hub="hub")
found = CaptureIndex(source, parse_connection_string(conn)).find_time("0", int(after_us))
print(found)
"""


def test_planning_by_enqueued_time_never_imports_pandas_in_a_fresh_planner(tmp_path):
    """A start at an enqueued time found in Capture, as the driver's fresh Python worker plans it: no pandas."""
    for m in range(3):
        write(tmp_path, "0", m, list(range(10 * m, 10 * m + 10)))
    after = int((T0 + dt.timedelta(minutes=1, seconds=4, milliseconds=500)).timestamp() * 1_000_000)
    assert without_pandas(_FRESH_PLANNER, str(tmp_path), CONN, str(after)).strip() == "15"


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


def test_the_columnar_decoder_reads_old_files_and_refuses_bad_ones():
    from eventhubs_spark.capture.columnar import decode
    from eventhubs_spark.capture.files import CaptureFileError

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
