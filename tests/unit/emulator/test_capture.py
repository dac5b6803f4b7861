"""Unit tests of :mod:`eventhubs_emulator.capture`."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time

from eventhubs_emulator import capture as writer
from eventhubs_spark.capture.files import dotnet_time_ms, read_file
from tests.fresh import without_pandas
from tests.unit.support.capture_files import _file
from tests.unit.support.capture_read import CONN, MS0, T0, read, seqs_of, twice, write


def test_an_empty_file_and_old_files_without_the_exact_time():
    assert len(read_file(_file([]), "empty.avro")) == 0  # one block of zero events, as the service writes
    # a 2017 file: SystemProperties empty, the enqueued time only in EnqueuedTimeUtc, to the second
    record = b"".join([writer._long(3), writer._string("300"), writer._string("10/16/2017 6:18:55 PM"),
                       writer._long(0), writer._long(0), writer._long(1) + writer._bytes(b"old")])  # fmt: skip
    got = read_file(writer.container_file([record], "null"), "2017.avro")
    assert got.enqueued_ms == [dotnet_time_ms("10/16/2017 6:18:55 PM")] and got.enqueued_to_the_second == [True]
    assert dt.datetime.fromtimestamp(got.enqueued_ms[0] / 1000, dt.timezone.utc) == dt.datetime(
        2017, 10, 16, 18, 18, 55, tzinfo=dt.timezone.utc)  # fmt: skip
    # the documentation's four-branch Properties reads too
    documented = writer.WRITER_SCHEMA.replace('["long","double","string","bytes","null"]',
                                              '["long","double","string","bytes"]')  # fmt: skip
    data = writer.container_file([record], "null").replace(writer.WRITER_SCHEMA.encode(), documented.encode())
    data = data.replace(writer._long(len(writer.WRITER_SCHEMA)), writer._long(len(documented)), 1)
    assert read_file(data, "doc.avro").bodies == [b"old"]


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
