"""Unit tests of :mod:`eventhubs_spark.capture.index`."""

from __future__ import annotations

import datetime as dt

from eventhubs_spark.capture.index import CaptureIndex
from eventhubs_spark.capture.store import LocalStore
from tests.unit.support.capture_read import SETTINGS, T0, CountingStore, source, twice, write


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
