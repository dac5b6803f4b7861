"""Capture files read: Avro object container files as the service writes them, into the events they hold.

Each file is decoded with its own writer schema, which must be Capture's (another is refused by name); a file cut
short, a sync marker that does not match or a record past its block gets a message naming the file and the byte.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import bisect
import datetime as dt
import json
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eventhubs_spark.errors import CaptureFileError

MAGIC = b"Obj\x01"
_DOUBLE = struct.Struct("<d")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_FIELDS = ("SequenceNumber", "Offset", "EnqueuedTimeUtc", "SystemProperties", "Properties", "Body")


class _CutShort(CaptureFileError):
    """The bytes end inside what is being read: a truncated file, or only the head of one (see NeedMore)."""


@dataclass
class CapturedEvents:
    """A file's events, as columns (one entry per event, in the file's order)."""

    sequence_numbers: list[int] = field(default_factory=list)
    offsets: list[str] = field(default_factory=list)
    enqueued_ms: list[int] = field(default_factory=list)
    enqueued_to_the_second: list[bool] = field(default_factory=list)  # from EnqueuedTimeUtc alone
    system_properties: list[dict[str, Any]] = field(default_factory=list)
    properties: list[dict[str, Any]] = field(default_factory=list)
    bodies: list[bytes | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.sequence_numbers)


def dotnet_time_ms(text: str) -> int:
    """``M/d/yyyy h:mm:ss tt`` (UTC, as Capture writes ``EnqueuedTimeUtc``) as epoch milliseconds."""
    when = dt.datetime.strptime(text.strip(), "%m/%d/%Y %I:%M:%S %p").replace(tzinfo=dt.timezone.utc)
    return (when - _EPOCH) // dt.timedelta(milliseconds=1)


class _Reader:
    """A cursor over one file's bytes, failing with the file's name and the byte."""

    def __init__(self, data: bytes | memoryview, where: str, start: int = 0, end: int | None = None,
                 origin: int = 0) -> None:  # fmt: skip
        self.data = data
        self.where = where
        self.pos = start
        self.end = len(data) if end is None else end
        self.origin = origin  # where data begins in the file (a window of it): errors name the file's byte

    def fail(self, why: str, kind: type[CaptureFileError] = CaptureFileError) -> CaptureFileError:
        return kind(f"Capture file {self.where}: {why} (at byte {self.origin + self.pos})")

    def long(self) -> int:
        shift = result = 0
        data, pos, end = self.data, self.pos, self.end
        while True:
            if pos >= end:
                raise self.fail("cut short inside a number", _CutShort)
            b = data[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 63:
                raise self.fail("a number longer than ten bytes")
        self.pos = pos
        return (result >> 1) ^ -(result & 1)

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise self.fail(f"cut short: {n} bytes wanted, {self.end - self.pos} left", _CutShort)
        out = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return out

    def bytes_(self) -> bytes:
        return self.raw(self.long())

    def string(self) -> str:
        raw = self.bytes_()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("a string that is not UTF-8") from None

    def double(self) -> float:
        return float(_DOUBLE.unpack(self.raw(8))[0])

    def map(self, value: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while True:
            count = self.long()
            if count == 0:
                return out
            if count < 0:  # a block with its byte size after the count
                count = -count
                self.long()
            for _ in range(count):
                key = self.string()
                out[key] = value(self)


def _union(branches: tuple[str, ...]) -> Any:
    def read(r: _Reader) -> Any:
        index = r.long()
        if not 0 <= index < len(branches):
            raise r.fail(f"union branch {index} of {len(branches)}")
        kind = branches[index]
        if kind == "long":
            return r.long()
        if kind == "double":
            return r.double()
        if kind == "string":
            return r.string()
        if kind == "bytes":
            return r.bytes_()
        return None

    return read


def _check_schema(text: str, where: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The value branches of SystemProperties and Properties, once the writer schema is found to be Capture's."""
    try:
        schema = json.loads(text)
        fields = {f["name"]: f["type"] for f in schema["fields"]}
        names = tuple(f["name"] for f in schema["fields"])
        system = tuple(fields["SystemProperties"]["values"])
        props = tuple(fields["Properties"]["values"])
        ok = (
            names == _FIELDS and fields["SequenceNumber"] == "long" and fields["Offset"] == "string"
            and fields["EnqueuedTimeUtc"] == "string" and fields["Body"] == ["null", "bytes"]
            and set(system) <= {"long", "double", "string", "bytes", "null"}
            and set(props) <= {"long", "double", "string", "bytes", "null"}
        )  # fmt: skip
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise CaptureFileError(f"Capture file {where}: its writer schema is not Event Hubs Capture's (fields "
                               f"{', '.join(_FIELDS)}): {text[:300]}")  # fmt: skip
    return system, props


@dataclass
class Blocks:
    """A file's blocks of events, inflated: each block's records as bytes, with its event count, and the value
    branches of the file's two maps (its own writer schema's)."""

    where: str
    system_branches: tuple[str, ...]
    property_branches: tuple[str, ...]
    payloads: list[tuple[bytes | memoryview, int]]


def _header(data: bytes | memoryview, where: str) -> tuple[_Reader, str, tuple[str, ...], tuple[str, ...], bytes]:
    """A file's header, checked (magic, codec, Capture's writer schema): a reader at its first block, the codec,
    the two maps' value branches, and the sync marker."""
    if len(data) == 0:
        raise CaptureFileError(f"Capture file {where} is empty (0 bytes): not a file Capture writes (a window "
                               "without events gives a header and a block of no events); cut short?")  # fmt: skip
    if bytes(data[:4]) != MAGIC:
        raise CaptureFileError(f"Capture file {where}: not an Avro object container file (no 'Obj\\x01' header)")
    r = _Reader(data, where, start=4)
    metadata = r.map(lambda reader: reader.bytes_())
    codec = metadata.get("avro.codec", b"null").decode()
    if codec not in ("null", "deflate"):
        raise CaptureFileError(f"Capture file {where}: codec {codec!r}; Capture writes null or deflate")
    if "avro.schema" not in metadata:
        raise CaptureFileError(f"Capture file {where}: no writer schema in its header")
    system_branches, property_branches = _check_schema(metadata["avro.schema"].decode("utf-8", "replace"), where)
    return r, codec, system_branches, property_branches, r.raw(16)


def blocks(data: bytes | memoryview, where: str) -> Blocks:
    """The blocks of one Capture file (``where`` names it in messages), checked: header, writer schema, codec,
    sync markers; blocks of zero events left out."""
    r, codec, system_branches, property_branches, sync = _header(data, where)
    out = Blocks(where, system_branches, property_branches, [])
    view = memoryview(data) if isinstance(data, bytes) else data
    block = 0
    while r.pos < r.end:
        count = r.long()
        size = r.long()
        if size < 0 or r.pos + size > r.end:
            raise r.fail(f"cut short: block {block} of {size} bytes, {r.end - r.pos} left", _CutShort)
        payload: bytes | memoryview = view[r.pos : r.pos + size]
        r.pos += size
        if r.raw(16) != sync:
            r.pos -= 16
            raise r.fail(f"block {block}'s sync marker differs from the header's: the file is corrupt")
        if count < 0:
            raise r.fail(f"block {block} says it holds {count} events")
        if count:
            if codec == "deflate":
                try:
                    payload = zlib.decompress(payload, -15)
                except zlib.error as exc:
                    raise r.fail(f"block {block} does not inflate: {exc}") from None
            out.payloads.append((payload, count))
        block += 1
    return out


@dataclass(frozen=True)
class BlockMap:
    """Where a file's blocks of events lie and the sequence number each begins with: what lets a task fetch and
    decode only the blocks of its range. A stream's batches each read a slice of the same file (Capture writes
    up to 500 MB a window), and decoding the whole file for each slice costs each batch the file's CPU, memory
    and download."""

    head: int  # the header's length (magic, metadata, sync marker): the first block starts here
    offsets: tuple[int, ...]  # each block of events: where it starts (its count)...
    ends: tuple[int, ...]  # ...where it ends (after its sync marker)...
    firsts: tuple[int, ...]  # ...and its first event's sequence number

    @property
    def ordered(self) -> bool:
        """The blocks begin in ascending order, as the service writes them (a file's sequence numbers are
        contiguous and increasing): then a block holds the events below the next one's first."""
        return all(a < b for a, b in zip(self.firsts, self.firsts[1:], strict=False))

    def piece(self, start: int, end: int, most: int | None = None) -> tuple[int, int, bool] | None:
        """The bytes ``[lo, hi)`` of the blocks that can hold sequence numbers in ``[start, end)`` (an ordered
        file's: see :attr:`ordered`), cut after the blocks that fill ``most`` bytes (at least two), and ``more``:
        whether blocks after them can hold sequence numbers below ``end``; None when no block can. A batch read
        of a whole 500 MB file so holds a piece of it at a time, not all of it and all its events at once."""
        last = bisect.bisect_left(self.firsts, end)  # the blocks below it begin before end
        first = max(0, bisect.bisect_right(self.firsts, start) - 1)  # the one start falls in
        if last <= first:
            return None
        cut = last
        if most is not None:  # the block start falls in and the next: past a hole at that block's end, the next
            # event the file holds is in the piece (and read, or called a hole), never a block away
            cut = min(last, max(first + 2, bisect.bisect_right(self.ends, self.offsets[first] + most, first, last)))
        return self.offsets[first], self.ends[cut - 1], cut < last


# A streamed map reads the file this many bytes at a time: what it holds in memory, whatever the file's size.
STREAM_WINDOW = 4 << 20
_FIRST_BYTES = 256  # a block's first sequence number is in its first bytes: a long, or deflate's block header and it
_BLOCK_HEAD = 20  # a block's count and byte size: two longs of at most ten bytes
_HEADER_BYTES = 1 << 10  # the least read first for the header (then twice as far, as long as it is cut short)


def _streamed_first(have: Callable[[int, int], None], window: Callable[[], tuple[bytes, int]], payload: int,
                    length: int, codec: str, where: str) -> int:  # fmt: skip
    """The first sequence number of the block whose ``length`` bytes start at ``payload`` in the file, from its
    first bytes (the whole block only when a deflated one's code tables run past them)."""
    for n in (min(length, _FIRST_BYTES), length):
        have(payload, payload + n)
        buf, base = window()
        try:
            return _block_first(memoryview(buf)[payload - base : payload - base + n], codec, where)
        except _CutShort:
            if n == length:
                raise
    raise AssertionError("unreachable")


def streamed_block_map(read: Callable[[int, int], bytes], size: int, where: str,
                       window: int = STREAM_WINDOW) -> BlockMap:  # fmt: skip
    """The :class:`BlockMap` of a file of ``size`` bytes fetched by ``read(offset, length)`` a window at a time: its
    header and codec checked, every sync marker checked, blocks of zero events left out, each block inflated only
    as far as its first sequence number. No more than a window of the file is in memory, where a 500 MB file read
    whole would be held whole by each Python worker that reads it first. A block longer than the window is not
    fetched past its first bytes: its end is read where its size says it is. Small blocks cost one read per
    ``window`` bytes of the file, the bytes a whole read would fetch."""
    buf, base = b"", 0

    def have(lo: int, hi: int) -> None:  # the file's [lo, hi) (up to its end) in buf, else a window from lo
        nonlocal buf, base
        hi = min(hi, size)
        if lo >= base and hi <= base + len(buf):
            return
        if lo >= size:  # past the end (a file cut after a block's bytes): nothing to ask the store for
            buf, base = b"", lo
            return
        buf, base = read(lo, min(max(window, hi - lo), size - lo)), lo

    n = min(max(window, _HEADER_BYTES), size)
    while True:  # the header (magic, metadata with the writer schema, sync marker): a few kilobytes
        have(0, n)
        try:
            r, codec, _, _, sync = _header(buf, where)
            break
        except _CutShort:
            if n >= size:
                raise
            n = min(2 * n, size)
    head = pos = r.pos
    offsets: list[int] = []
    ends: list[int] = []
    firsts: list[int] = []
    while pos < size:
        start = pos
        have(pos, pos + _BLOCK_HEAD)
        r = _Reader(buf, where, pos - base, origin=base)
        count = r.long()
        length = r.long()
        payload = base + r.pos
        if length < 0 or payload + length > size:
            raise r.fail(f"cut short: block {len(offsets)} of {length} bytes, {size - payload} left", _CutShort)
        if count < 0:
            raise r.fail(f"a block says it holds {count} events")
        if count:
            first = _streamed_first(have, lambda: (buf, base), payload, length, codec, where)
        at, pos = payload + length, payload + length + 16
        have(at, pos + _BLOCK_HEAD)  # the sync marker, and the next block's count and size after it
        marker = _Reader(buf, where, at - base, origin=base)
        if marker.raw(16) != sync:
            marker.pos -= 16
            raise marker.fail("a block's sync marker differs from the header's: the file is corrupt")
        if count:
            offsets.append(start)
            ends.append(pos)
            firsts.append(first)
    return BlockMap(head, tuple(offsets), tuple(ends), tuple(firsts))


def _block_first(payload: bytes | memoryview, codec: str, where: str) -> int:
    """The first sequence number of a block of events (its bytes as written, or as many of its first ones as the
    file has): the first record's first field. A deflated block is inflated only that far."""
    if codec == "deflate":
        try:
            payload = zlib.decompressobj(-15).decompress(payload, 16)
        except zlib.error as exc:
            raise CaptureFileError(f"Capture file {where}: a block does not inflate: {exc}") from None
    return _Reader(payload, where).long()


def read_file(data: bytes | memoryview, where: str) -> CapturedEvents:
    """Every event of one Capture file (``where`` names it in messages), as Python values (the reference the
    columnar decoder, :mod:`eventhubs_spark.capture.columnar`, is held to)."""
    found = blocks(data, where)
    system_value, property_value = _union(found.system_branches), _union(found.property_branches)
    out = CapturedEvents()
    for block, (payload, count) in enumerate(found.payloads):
        _records(_Reader(payload, f"{where} block {block}"), count, out, system_value, property_value)
    return out


class NeedMore(Exception):
    """The head of a file given to :func:`first_sequence` ends before the answer: read more of it."""


def first_sequence(head: bytes | memoryview, where: str, whole: bool) -> int | None:
    """The sequence number of a file's first event, from its first bytes (``whole``: they are the whole file);
    None for a file of no events (zero-count blocks only). Raises :class:`NeedMore` when ``head`` ends too soon,
    and :class:`CaptureFileError` for a file that is not Capture's. What the driver reads of each file to plan
    ranges by sequence number without reading the file."""
    if len(head) < 4 and not whole:
        raise NeedMore
    try:
        r, codec, _, _, _ = _header(head, where)
        while True:
            if r.pos >= r.end:
                if whole:
                    return None
                raise NeedMore
            count = r.long()
            size = r.long()
            if count == 0:
                r.raw(size + 16)
                continue
            if count < 0:
                raise r.fail(f"a block says it holds {count} events")
            return _block_first(memoryview(head)[r.pos : min(r.end, r.pos + size)], codec, where)
    except _CutShort:
        if whole:
            raise
        raise NeedMore from None


def _records(r: _Reader, count: int, out: CapturedEvents, system_value: Any, property_value: Any) -> None:
    for _ in range(count):
        out.sequence_numbers.append(r.long())
        out.offsets.append(r.string())
        text = r.string()
        system = r.map(system_value)
        out.properties.append(r.map(property_value))
        branch = r.long()
        if branch not in (0, 1):
            raise r.fail(f"Body's union branch {branch}")
        out.bodies.append(r.bytes_() if branch == 1 else None)
        out.system_properties.append(system)
        exact = system.get("x-opt-enqueued-time")
        if isinstance(exact, int):
            out.enqueued_ms.append(exact)
            out.enqueued_to_the_second.append(False)
        else:
            try:
                out.enqueued_ms.append(dotnet_time_ms(text))
            except ValueError:
                raise r.fail(f"EnqueuedTimeUtc {text!r} is not a time as Capture writes it") from None
            out.enqueued_to_the_second.append(True)
    if r.pos != r.end:
        raise r.fail(f"{r.end - r.pos} bytes after the block's {count} events")
