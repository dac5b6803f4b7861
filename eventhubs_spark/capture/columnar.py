"""A Capture file decoded straight into the source's Arrow columns.

One pass over its records only notes where each field lies (and the few values a hop needs anyway); then each
column is made at once from those positions.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import struct
from array import array
from typing import Any

import numpy as np
import pyarrow as pa

from eventhubs_spark.amqp.messages import windows
from eventhubs_spark.capture.files import blocks, dotnet_time_ms
from eventhubs_spark.codec import arrays
from eventhubs_spark.codec.columns import to_text
from eventhubs_spark.codec.layout import spans
from eventhubs_spark.codec.schema import ARROW_SCHEMA
from eventhubs_spark.errors import CaptureFileError

_MAP = ARROW_SCHEMA.field("properties").type
_TIME = ARROW_SCHEMA.field("enqueuedTime").type
_DOUBLE = struct.Struct("<d")
_OWN = frozenset({"x-opt-sequence-number", "x-opt-offset", "x-opt-enqueued-time", "x-opt-partition-key"})
_ENQUEUED = b"x-opt-enqueued-time"
_KEY = b"x-opt-partition-key"


class _Cut(Exception):
    """A record read past the end of its block."""


def _long(buf: bytes, p: int) -> tuple[int, int]:
    """A zigzag varint at ``p`` (the multi-byte case): its value and the position after it."""
    shift = result = 0
    while True:
        b = buf[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), p
        shift += 7
        if shift > 63:
            raise _Cut("a number longer than ten bytes")


class _Columns:
    """Where each record's fields lie in the joined payload, gathered by the walk."""

    def __init__(self) -> None:
        self.seq = array("q")
        self.offset_at = array("q")
        self.offset_len = array("q")
        self.time_at = array("q")
        self.time_len = array("q")
        self.enqueued = array("q")  # epoch ms from x-opt-enqueued-time, -1 where the record has none
        self.body_at = array("q")
        self.body_len = array("q")  # -1: a null body
        self.key: dict[int, Any] = {}  # row -> x-opt-partition-key's value
        self.system: dict[int, list[tuple[str, Any]]] = {}  # row -> the other system properties
        self.props: dict[int, list[tuple[str, Any]]] = {}  # row -> application properties
        # blocks read by the fast path: their first row and their offsets' bytes, a row each (one length a block)
        self.offset_rows: list[tuple[int, np.ndarray]] = []

    def __len__(self) -> int:
        return len(self.seq)


def _value(buf: bytes, p: int, kind: str) -> tuple[Any, int]:
    """A map value of union branch ``kind`` at ``p``: its Python value and the position after it."""
    if kind == "long":
        b = buf[p]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), p + 1
        return _long(buf, p)
    if kind == "double":
        return _DOUBLE.unpack_from(buf, p)[0], p + 8
    if kind == "null":
        return None, p
    b = buf[p]
    n, p = ((b >> 1) ^ -(b & 1), p + 1) if b < 0x80 else _long(buf, p)
    if n < 0:
        raise _Cut(f"a value of length {n}")
    raw = buf[p : p + n]
    return (raw.decode("utf-8", "replace") if kind == "string" else raw), p + n


def _walk(buf: bytes, p: int, end: int, count: int, out: _Columns, system: tuple[str, ...],
          props: tuple[str, ...]) -> int:  # fmt: skip
    """The ``count`` records of one block at ``buf[p:end]`` into ``out``; returns where they end. Written out
    field by field, with a varint's one- and two-byte cases inline: this loop is what a file's read costs."""
    seq_a, oat, olen, tat, tlen = out.seq.append, out.offset_at.append, out.offset_len.append, out.time_at.append, \
        out.time_len.append  # fmt: skip
    enq, bat, blen = out.enqueued.append, out.body_at.append, out.body_len.append
    row = len(out.seq)
    for _ in range(count):
        # SequenceNumber
        b = buf[p]
        if b < 0x80:
            seq_a((b >> 1) ^ -(b & 1))
            p += 1
        else:
            v, p = _long(buf, p)
            seq_a(v)
        # Offset, then EnqueuedTimeUtc: a length (even: zigzag of a length >= 0), then the text
        b = buf[p]
        if b < 0x80 and not b & 1:
            n = b >> 1
            p += 1
        else:
            n, p = _long(buf, p)
            if n < 0:
                raise _Cut(f"a string of length {n}")
        oat(p)
        olen(n)
        p += n
        b = buf[p]
        if b < 0x80 and not b & 1:
            n = b >> 1
            p += 1
        else:
            n, p = _long(buf, p)
            if n < 0:
                raise _Cut(f"a string of length {n}")
        tat(p)
        tlen(n)
        p += n
        # SystemProperties
        enqueued = -1
        while True:
            b = buf[p]
            if b == 0:
                p += 1
                break
            n, p = ((b >> 1) ^ -(b & 1), p + 1) if b < 0x80 else _long(buf, p)
            if n < 0:  # a block of the map with its byte size after the count
                n = -n
                _, p = _long(buf, p)
            for _ in range(n):
                b = buf[p]
                if b < 0x80 and not b & 1:
                    k = b >> 1
                    p += 1
                else:
                    k, p = _long(buf, p)
                    if k < 0:
                        raise _Cut(f"a key of length {k}")
                key = buf[p : p + k]
                p += k
                b = buf[p]
                if b >= 0x80 or b & 1 or (b >> 1) >= len(system):
                    raise _Cut(f"union branch {(b >> 1) ^ -(b & 1)} of {len(system)}")
                p += 1
                kind = system[b >> 1]
                if kind == "long":
                    b = buf[p]
                    if b < 0x80:
                        value: Any = (b >> 1) ^ -(b & 1)
                        p += 1
                    else:
                        value, p = _long(buf, p)
                else:
                    value, p = _value(buf, p, kind)
                if key == _ENQUEUED and kind == "long":
                    enqueued = value
                elif key == _KEY:
                    out.key[row] = value
                else:
                    out.system.setdefault(row, []).append((key.decode("utf-8", "replace"), value))
        enq(enqueued)
        # Properties
        while True:
            b = buf[p]
            if b == 0:
                p += 1
                break
            n, p = ((b >> 1) ^ -(b & 1), p + 1) if b < 0x80 else _long(buf, p)
            if n < 0:
                n = -n
                _, p = _long(buf, p)
            entries = out.props.setdefault(row, [])
            for _ in range(n):
                k, p = _long(buf, p)
                if k < 0:
                    raise _Cut(f"a key of length {k}")
                key = buf[p : p + k]
                p += k
                branch, p = _long(buf, p)
                if not 0 <= branch < len(props):
                    raise _Cut(f"union branch {branch} of {len(props)}")
                value, p = _value(buf, p, props[branch])
                entries.append((key.decode("utf-8", "replace"), value))
        # Body: branch 1 (bytes) or 0 (null)
        b = buf[p]
        if b == 2:
            b = buf[p + 1]
            if b < 0x80 and not b & 1:
                n = b >> 1
                p += 2
            else:
                c = buf[p + 2]
                if (b & 1) == 0 and c < 0x80:  # two bytes: most bodies
                    n = ((b & 0x7F) | (c << 7)) >> 1
                    p += 3
                else:
                    n, p = _long(buf, p + 1)
                    if n < 0:
                        raise _Cut(f"a body of length {n}")
            bat(p)
            blen(n)
            p += n
        elif b == 0:
            p += 1
            bat(p)
            blen(-1)
        else:
            raise _Cut(f"Body's union branch {(b >> 1) ^ -(b & 1)}")
        if p > end:
            raise _Cut("a record runs past its block")
        row += 1
    return p


class _Template:
    """The layout the first record of a block has, taken as every record's: fixed bytes from the record's start to
    the partition key's length (or to the body's, without a key), then fixed bytes from the key's end to the body's
    length. Where values may differ, only their kind is fixed: a varint's length (its continuation bits), a text of
    fixed length (its bytes free)."""

    def __init__(self) -> None:
        self.head = b""  # the first record's bytes before the key's (or the body's) length
        self.tail = b""  # after the key, before the body's length (empty without a key)
        self.exact_head: list[int] = []  # positions in head that must equal the first record's
        self.bits_head: list[int] = []  # positions whose continuation bit must equal the first record's
        self.exact_tail: list[int] = []
        self.bits_tail: list[int] = []
        self.seq = (0, 0)  # (position, length) in head
        self.offset = (0, 0)
        self.time = (0, 0)
        self.enqueued: tuple[int, int] | None = None
        self.keyed = False
        self.tail_start = 0  # where the tail begins in the first record (after its key)


def _template(buf: bytes, p: int, system: tuple[str, ...]) -> _Template | None:
    """The layout of the record at ``p``, when it is one the fast path takes: one-byte lengths, a system map of
    longs and at most one text (the partition key), no application properties, a body."""
    t = _Template()
    start = p
    parts: list[tuple[str, int, int]] = []  # (kind, position, length) relative to the record's start
    q = p
    while buf[q] >= 0x80:
        q += 1
    q += 1
    t.seq = (0, q - p)
    parts.append(("bits", 0, q - p))
    for name in ("offset", "time"):
        b = buf[q]
        if b >= 0x80 or b & 1:
            return None
        parts.append(("exact", q - start, 1))
        setattr(t, name, (q + 1 - start, b >> 1))
        parts.append(("free", q + 1 - start, b >> 1))
        q += 1 + (b >> 1)
    b = buf[q]
    if b == 0 or b >= 0x80 or b & 1:
        return None
    parts.append(("exact", q - start, 1))
    q += 1
    head_end = tail_start = None
    for _ in range(b >> 1):
        k = buf[q]
        if k >= 0x80 or k & 1:
            return None
        key = buf[q + 1 : q + 1 + (k >> 1)]
        branch = buf[q + 1 + (k >> 1)]
        if branch >= 0x80 or branch & 1 or (branch >> 1) >= len(system):
            return None
        parts.append(("exact", q - start, 2 + (k >> 1)))
        q += 2 + (k >> 1)
        kind = system[branch >> 1]
        if kind == "long":
            v = q
            while buf[q] >= 0x80:
                q += 1
            q += 1
            parts.append(("bits", v - start, q - v))
            if key == _ENQUEUED:
                t.enqueued = (v - start, q - v)
        elif kind == "string" and key == _KEY and head_end is None:
            head_end = q - start
            n = buf[q]
            if n >= 0x80 or n & 1:
                return None
            q += 1 + (n >> 1)
            tail_start = q - start
        else:
            return None
    if buf[q] != 0 or buf[q + 1] != 0 or buf[q + 2] != 2:  # the map's end, no properties, a body
        return None
    parts.append(("exact", q - start, 3))
    q += 3
    body_len_at = q - start
    if head_end is None:
        head_end = body_len_at
    t.head = buf[start : start + head_end]
    t.keyed = tail_start is not None
    if tail_start is not None:
        t.tail = buf[start + tail_start : start + body_len_at]
        t.tail_start = tail_start
    for kind, at, n in parts:
        in_tail = tail_start is not None and at >= tail_start
        base = tail_start if in_tail and tail_start is not None else 0
        exact, bits = (t.exact_tail, t.bits_tail) if in_tail else (t.exact_head, t.bits_head)
        if kind == "exact":
            exact.extend(range(at - base, at - base + n))
        elif kind == "bits":
            bits.extend(range(at - base, at - base + n))
    return t


def _varints(rows: np.ndarray) -> np.ndarray:
    """Zigzag varints of one length, a row each (the bytes of each row, as numpy), as int64."""
    value = np.zeros(len(rows), dtype=np.uint64)
    for j in range(rows.shape[1]):
        value |= (rows[:, j].astype(np.uint64) & np.uint64(0x7F)) << np.uint64(7 * j)
    return ((value >> np.uint64(1)).astype(np.int64)) ^ -((value & np.uint64(1)).astype(np.int64))


def _fast(buf: bytes, u8: np.ndarray, p: int, end: int, count: int, out: _Columns, system: tuple[str, ...]) -> bool:
    """The block's records into ``out`` by the first record's layout (:class:`_Template`), checked for every record
    at once; False (``out`` untouched) when any record differs from it, for the walk to read the block."""
    try:
        t = _template(buf, p, system)
    except IndexError:
        return False
    if t is None:
        return False
    head, tail, keyed = len(t.head), len(t.tail), t.keyed
    key_at, key_len, body_at, body_len = array("q"), array("q"), array("q"), array("q")
    first_start = p
    bat, blen = body_at.append, body_len.append
    found = None if keyed else _chain(u8, p, end, count, t)
    if found is not None:
        body_at.frombytes(found[0].tobytes())
        body_len.frombytes(found[1].tobytes())
        count, p = 0, end  # the walk below has nothing left to do
    try:
        for _ in range(count):
            q = p + head
            if keyed:
                b = buf[q]
                if b >= 0x80 or b & 1:
                    return False
                key_at.append(q + 1)
                key_len.append(b >> 1)
                q += 1 + (b >> 1) + tail
            b = buf[q]
            if b < 0x80:
                if b & 1:
                    return False
                n = b >> 1
                q += 1
            else:
                c = buf[q + 1]
                if c >= 0x80 or b & 1:
                    return False
                n = ((b & 0x7F) | (c << 7)) >> 1
                q += 2
            bat(q)
            blen(n)
            p = q + n
    except IndexError:
        return False
    if p != end:
        return False
    ends = np.frombuffer(body_at, dtype=np.int64) + np.frombuffer(body_len, dtype=np.int64)
    s = np.concatenate(([first_start], ends[:-1]))  # each record begins where the one before ends
    rows = u8[s[:, None] + np.arange(head)]
    first = np.frombuffer(t.head, dtype=np.uint8)
    if t.exact_head and not (rows[:, t.exact_head] == first[t.exact_head]).all():
        return False
    if t.bits_head and not ((rows[:, t.bits_head] & 0x80) == (first[t.bits_head] & 0x80)).all():
        return False
    enqueued_rows = None
    if keyed:
        k = np.frombuffer(key_at, dtype=np.int64) + np.frombuffer(key_len, dtype=np.int64)
        tails = u8[k[:, None] + np.arange(tail)]
        last = np.frombuffer(t.tail, dtype=np.uint8)
        if t.exact_tail and not (tails[:, t.exact_tail] == last[t.exact_tail]).all():
            return False
        if t.bits_tail and not ((tails[:, t.bits_tail] & 0x80) == (last[t.bits_tail] & 0x80)).all():
            return False
        if t.enqueued is not None and t.enqueued[0] >= head:
            at, n = t.enqueued[0] - t.tail_start, t.enqueued[1]
            enqueued_rows = tails[:, at : at + n]
    row = len(out.seq)
    out.seq.frombytes(_varints(rows[:, t.seq[0] : t.seq[0] + t.seq[1]]).tobytes())
    out.offset_at.frombytes((s + t.offset[0]).tobytes())
    out.offset_len.frombytes(np.full(len(s), t.offset[1], dtype=np.int64).tobytes())
    out.offset_rows.append((row, np.ascontiguousarray(rows[:, t.offset[0] : t.offset[0] + t.offset[1]])))
    out.time_at.frombytes((s + t.time[0]).tobytes())
    out.time_len.frombytes(np.full(len(s), t.time[1], dtype=np.int64).tobytes())
    if t.enqueued is None:
        out.enqueued.frombytes(np.full(len(s), -1, dtype=np.int64).tobytes())
    elif t.enqueued[0] < head:
        out.enqueued.frombytes(_varints(rows[:, t.enqueued[0] : t.enqueued[0] + t.enqueued[1]]).tobytes())
    else:
        assert enqueued_rows is not None
        out.enqueued.frombytes(_varints(enqueued_rows).tobytes())
    out.body_at.extend(body_at)
    out.body_len.extend(body_len)
    if keyed:
        for i, (a, n) in enumerate(zip(key_at, key_len, strict=True)):
            out.key[row + i] = buf[a : a + n].decode("utf-8", "replace")
    return True


def _chain(u8: np.ndarray, p: int, end: int, count: int, t: _Template) -> tuple[np.ndarray, np.ndarray] | None:
    """Where each body of a block of records without a key lies (its start and length), found with numpy instead of
    :func:`_fast`'s walk from record to record; None when this cannot say (the walk then reads the block).

    Every record of the template has its longest run of fixed bytes (a system property's key, as a rule) at the same
    place: the runs found in the block say where records may begin, and they are records if each ends (its body's
    length read after the template's head) exactly where the next begins, the first at the block's start and the
    last at its end. The same bytes inside a body break that chain: the walk reads such a block."""
    a, n = 0, 0
    run_start = prev = -2
    for i in t.exact_head:  # the longest run of consecutive fixed positions
        run_start = i if i != prev + 1 else run_start
        prev = i
        if i - run_start + 1 > n:
            a, n = run_start, i - run_start + 1
    if n < 4 or count < 2:
        return None
    head = len(t.head)
    pattern = t.head[a : a + n]
    region = u8[p + a : end]
    hits = np.flatnonzero(region == pattern[0])
    hits = hits[hits <= len(region) - n]
    starts = hits[windows(u8, n)[p + a + hits] == np.void(pattern)].astype(np.int64) + p
    if len(starts) < count or starts[0] != p:
        return None
    starts = starts[:count]
    at = np.minimum(starts + head, len(u8) - 2)
    b = u8[at].astype(np.int64)
    c = u8[at + 1].astype(np.int64)
    two = b >= 0x80
    length = np.where(two, ((b & 0x7F) | (c << 7)) >> 1, b >> 1)
    body = starts + head + 1 + two
    ends = body + length
    good = ((b & 1) == 0) & (~two | (c < 0x80)) & (starts + head < end)
    if not (good.all() and (ends[:-1] == starts[1:]).all() and ends[-1] == end):
        return None
    return body, length


def decode(data: bytes | memoryview, where: str, partition: str) -> tuple[np.ndarray, pa.RecordBatch]:
    """Every event of one Capture file as the source's record batch, and its sequence numbers (numpy)."""
    found = blocks(data, where)
    buf = b"".join(bytes(payload) for payload, _ in found.payloads)
    out = _Columns()
    u8 = np.frombuffer(buf, dtype=np.uint8)
    p = 0
    for block, (payload, count) in enumerate(found.payloads):
        end = p + len(payload)
        if _fast(buf, u8, p, end, count, out, found.system_branches):
            p = end
            continue
        try:
            q = _walk(buf, p, end, count, out, found.system_branches, found.property_branches)
        except (_Cut, IndexError, struct.error) as exc:
            why = str(exc) if isinstance(exc, _Cut) else "cut short"
            raise CaptureFileError(f"Capture file {where} block {block}: {why}: a record runs past its block or "
                                   "is not Capture's") from None  # fmt: skip
        if q != end:
            raise CaptureFileError(f"Capture file {where} block {block}: {end - q} bytes after the block's {count} "
                                   "events")  # fmt: skip
        p = end
    return np.frombuffer(out.seq, dtype=np.int64), _batch(buf, out, partition, where)


def _strings(buf: bytes, at: array, length: array, kind: pa.DataType) -> pa.Array:
    """Values cut out of ``buf`` by position and length (a length of -1: an empty value), joined once."""
    lengths = np.frombuffer(length, dtype=np.int64)
    if len(buf) < 2**31 and len(lengths):
        start = np.frombuffer(at, dtype=np.int64).copy()
        empty = lengths < 0
        end = start + np.maximum(lengths, 0)
        if empty.any():  # an empty value sits where the one before it ended (the spans must not go back)
            reached = np.maximum.accumulate(np.where(empty, 0, end))
            before = np.concatenate(([0], reached[:-1]))
            start[empty] = end[empty] = before[empty]
        if (start[1:] >= end[:-1]).all() and start[0] >= 0:  # in order, not overlapping: cut in C
            column = spans(pa.py_buffer(buf), start, end)
            # text as it is (the caller checks it is UTF-8, with its own message)
            return column if kind == pa.binary() else pa.Array.from_buffers(kind, len(column), column.buffers())
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.maximum(lengths, 0), out=offsets[1:])
    values = b"".join([buf[a : a + n] for a, n in zip(at, length, strict=True)])
    large = offsets[-1] >= 2**31
    typ = (pa.large_binary() if kind == pa.binary() else pa.large_string()) if large else kind
    offsets_buffer = pa.py_buffer(offsets if large else offsets.astype(np.int32))
    array_ = pa.Array.from_buffers(typ, len(lengths), [None, offsets_buffer, pa.py_buffer(values)])
    return array_.cast(kind) if large else array_


def _offsets(buf: bytes, out: _Columns) -> pa.Array:
    """The Offset column: from the fast path's rows of bytes where it read every block, else cut out by position;
    checked as UTF-8 (the file's text, not trusted)."""
    if sum(len(r) for _, r in out.offset_rows) == len(out):
        lengths = np.frombuffer(out.offset_len, dtype=np.int64)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        values = b"".join(r.tobytes() for _, r in out.offset_rows)
        column = pa.Array.from_buffers(pa.string(), len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(values)])
    else:
        column = _strings(buf, out.offset_at, out.offset_len, pa.string())
    try:
        column.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise CaptureFileError(f"an Offset that is not UTF-8 text: {exc}") from None
    return column


def _map(rows: dict[int, list[tuple[str, Any]]], n: int) -> pa.Array:
    if not rows:
        empty = arrays.empty(pa.string())
        return pa.MapArray.from_arrays(arrays.numbers(np.zeros(n + 1, dtype=np.int32), pa.int32()), empty, empty)
    counts = np.zeros(n, dtype=np.int32)
    keys: list[str] = []
    values: list[str | None] = []
    for row in sorted(rows):
        entries = rows[row]
        counts[row] = len(entries)
        for key, value in entries:
            keys.append(key)
            values.append(to_text(value))
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.MapArray.from_arrays(arrays.numbers(offsets, pa.int32()), arrays.texts(keys), arrays.texts(values))


def _batch(buf: bytes, out: _Columns, partition: str, where: str) -> pa.RecordBatch:
    n = len(out)
    enqueued = np.frombuffer(out.enqueued, dtype=np.int64).copy()
    missing = np.flatnonzero(enqueued < 0)
    if len(missing):  # older files: EnqueuedTimeUtc alone, to the second (events of a second share the text)
        seen: dict[bytes, int] = {}
        for i in missing:
            text = buf[out.time_at[i] : out.time_at[i] + out.time_len[i]]
            if text not in seen:
                try:
                    seen[text] = dotnet_time_ms(text.decode("utf-8", "replace"))
                except ValueError:
                    raise CaptureFileError(f"Capture file {where}: EnqueuedTimeUtc {text!r} is not a time as Capture "
                                           "writes it") from None  # fmt: skip
            enqueued[i] = seen[text]
    keys: list[str | None] = [None] * n
    for row, value in out.key.items():
        keys[row] = value if isinstance(value, str) else to_text(value)
    columns = [
        _strings(buf, out.body_at, out.body_len, pa.binary()),
        arrays.repeated_text(partition, n),
        _offsets(buf, out),
        arrays.numbers(np.frombuffer(out.seq, dtype=np.int64), pa.int64()),
        arrays.numbers(enqueued * 1000, _TIME),
        pa.nulls(n, pa.string()),
        arrays.texts(keys),
        _map(out.props, n),
        _map({row: [(k, v) for k, v in entries if k not in _OWN] for row, entries in out.system.items()}, n),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
