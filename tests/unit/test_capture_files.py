"""Capture files read by the connector (issue 48): names by archiveNameFormat, and events from files made by the
emulator's writer (the service's schema byte for byte), fastavro's reading as the check where it reads them."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest

from eventhubs_emulator import capture as writer
from eventhubs_spark.capture.files import CaptureFileError, dotnet_time_ms, read_file
from eventhubs_spark.capture.names import DEFAULT_FORMAT, NameFormat
from eventhubs_spark.errors import OptionError

fastavro = pytest.importorskip("fastavro")


class _Event:
    """The broker's event, as the writer reads it."""

    def __init__(self, seq: int, ms: int, body: bytes, key: str | None = None, props: dict | None = None) -> None:
        from eventhubs_emulator import amqp

        self.sequence_number, self.segment, self.offset, self.enqueued_ms = seq, -1, seq * 100, ms
        self.partition_key = key
        sections = b"\x00\x53\x72" + amqp.encode_map({})
        if props:
            sections += amqp.encode_section(amqp.APPLICATION_PROPERTIES, props)
        sections += amqp.encode_section(amqp.DATA, body)
        self.body, self.size = sections, len(sections)


def _file(events: list[_Event], codec: str = "null") -> bytes:
    return writer.container_file([writer.event_record(e, str(e.offset)) for e in events], codec)


def test_names_by_the_default_format_and_a_custom_one():
    default = NameFormat(DEFAULT_FORMAT)
    got = default.parse("ns/orders/3/2026/01/02/03/04/05.avro")
    assert got is not None and (got.namespace, got.hub, got.partition) == ("ns", "orders", "3")
    assert got.start == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    assert default.parse("ns/orders/3/2026/01/02/03/04/05.avro.tmp") is None
    assert default.parse("ns/orders/3/2026/02/30/03/04/05.avro") is None  # no such day
    assert default.prefix("ns", "orders", "3") == "ns/orders/3/" and default.lists_by_partition
    custom = NameFormat("{Namespace}/{EventHub}/p{PartitionId}--{Year}-{Month}-{Day}--{Hour}-{Minute}-{Second}")
    got = custom.parse("ns/hub.a/p12--2025-12-31--23-59-58.avro")
    assert got is not None and (got.hub, got.partition, got.start.second) == ("hub.a", "12", 58)
    late = NameFormat("Prod_{EventHub}/{Year}_{Month}/{Day}/{Hour}/{Minute}/{Second}/{Namespace}_{PartitionId}")
    assert not late.lists_by_partition and late.prefix("ns", "h", "0") == "Prod_h/"
    got = late.parse("Prod_h/2026_03/04/05/06/07/ns_2.avro")
    assert got is not None and (got.namespace, got.partition) == ("ns", "2")
    with pytest.raises(OptionError, match=r"no \{Second\}.*all nine tokens.*nameFormat', '\{Namespace\}"):
        NameFormat("{Namespace}/{EventHub}/{PartitionId}/{Year}/{Month}/{Day}/{Hour}/{Minute}")
    with pytest.raises(OptionError, match=r"unknown token \{Partition\}"):
        NameFormat(DEFAULT_FORMAT.replace("{PartitionId}", "{Partition}"))


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
