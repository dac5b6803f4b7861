"""A batch of received messages decoded column by column, by the layout they share.

Event Hubs messages of one partition are nearly all built alike: the same annotations in the same order with the
same encodings (a long sequence number, a str8 offset, a timestamp), the same application property names and value
types from one producer, one data section. Only the values and the lengths of the variable parts differ. Decoding
them one by one in Python walks the same structure again for every event (:mod:`eventhubs_spark.codec.message`: 3-5
µs each); here the structure is walked once per batch (how: :func:`decode_spans`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eventhubs_spark.amqp.messages import RawEvents, Unsupported, windows
from eventhubs_spark.codec import arrays
from eventhubs_spark.codec.columns import MICROS, MILLIS_MAX, Columns
from eventhubs_spark.codec.message import decode_message
from eventhubs_spark.codec.schema import ARROW_SCHEMA

__all__ = ["Layout", "decode_batch", "decode_spans", "events_batch", "learn", "spans"]

# Below this many messages a batch is decoded message by message: the column-wise pass has a fixed
# cost of some hundred microseconds (numpy and Arrow calls per layout step): measured even at about 64.
MIN_ROWS = 64
# Layouts tried per batch before the rest is decoded message by message (a batch of messages that are
# all different must not cost one pass per message).
MAX_LAYOUTS = 4

_SEQ = b"x-opt-sequence-number"
_OFFSET = b"x-opt-offset"
_TIME = b"x-opt-enqueued-time"
_KEY = b"x-opt-partition-key"
_PUBLISHER = b"x-opt-publisher"

# Step kinds of a layout.
_EXPECT = 0  # bytes every message has here
_FIXED = 1  # a value of fixed width: (slot, width)
_VAR = 2  # a length prefix of 1 or 4 bytes and that many bytes: (slot or None to skip, prefix width)
_SIZE = 3  # a compound's size prefix of 1 or 4 bytes: (tag, width); checked at its _END
_END = 4  # where the compound opened by _SIZE (tag) must end

# How a value becomes text in a map column, as arrow.to_text makes it of the SDK's value.
_TEXT = "text"  # str8/sym8/vbin8 and their 32-bit forms: UTF-8 (else the per-message path)
_SIGNED = {0x81: 8, 0x83: 8, 0x71: 4, 0x61: 2, 0x54: 1, 0x55: 1, 0x51: 1}  # constructor: width
_UNSIGNED = {0x80: 8, 0x70: 4, 0x60: 2, 0x52: 1, 0x53: 1, 0x50: 1}
_CONSTANT = {0x41: "true", 0x42: "false", 0x43: "0", 0x44: "0", 0x40: None}


@dataclass
class _Value:
    """Where one value of a layout is, and how it reads: ``kind`` is _TEXT (a span), "int", "uint",
    "bool" (one byte), or "const" (``const`` holds its text, or None)."""

    kind: str
    slot: int = -1
    width: int = 0
    const: str | None = None


@dataclass
class Layout:
    """The shape of one kind of message; see the module docstring."""

    steps: list[tuple[Any, ...]] = field(default_factory=list)
    slots: int = 0
    seq: int = -1  # the slot of the sequence number (8 bytes, signed)
    offset: _Value | None = None
    time: _Value | None = None
    key: _Value | None = None
    publisher: _Value | None = None
    body: int = -1  # the slot of the one data section's bytes, or -1 when the message has none
    props: list[tuple[str, _Value]] = field(default_factory=list)
    system: list[tuple[str, _Value]] = field(default_factory=list)

    def expect(self, data: bytes) -> None:
        if self.steps and self.steps[-1][0] == _EXPECT:
            self.steps[-1] = (_EXPECT, self.steps[-1][1] + data)
        else:
            self.steps.append((_EXPECT, data))

    def slot(self) -> int:
        self.slots += 1
        return self.slots - 1


def _u32(buf: bytes, p: int) -> int:
    return int.from_bytes(buf[p : p + 4], "big")


def _var(layout: Layout, buf: bytes, p: int, record: bool) -> tuple[int, int]:
    """A str/sym/binary value at ``buf[p]`` (its constructor taken as constant): (slot, next position)."""
    c = buf[p]
    layout.expect(bytes((c,)))
    slot = layout.slot() if record else -1
    if c in (0xA0, 0xA1, 0xA3):
        layout.steps.append((_VAR, slot if record else None, 1))
        return slot, p + 2 + buf[p + 1]
    if c in (0xB0, 0xB1, 0xB3):
        layout.steps.append((_VAR, slot if record else None, 4))
        return slot, p + 5 + _u32(buf, p + 1)
    raise Unsupported(f"constructor 0x{c:02x}")


def _value(layout: Layout, buf: bytes, p: int) -> tuple[_Value, int]:
    """A map value at ``buf[p]`` of a kind the layout can read: how it reads, and the next position."""
    c = buf[p]
    if c in (0xA0, 0xA1, 0xA3, 0xB0, 0xB1, 0xB3):
        slot, p = _var(layout, buf, p, True)
        return _Value(_TEXT, slot), p
    if c in _CONSTANT:
        layout.expect(bytes((c,)))
        return _Value("const", const=_CONSTANT[c]), p + 1
    layout.expect(bytes((c,)))
    if c == 0x56:
        slot = layout.slot()
        layout.steps.append((_FIXED, slot, 1))
        return _Value("bool", slot, 1), p + 2
    for table, kind in ((_SIGNED, "int"), (_UNSIGNED, "uint")):
        if c in table:
            slot = layout.slot()
            layout.steps.append((_FIXED, slot, table[c]))
            return _Value(kind, slot, table[c]), p + 1 + table[c]
    raise Unsupported(f"value 0x{c:02x}")


def _map(layout: Layout, buf: bytes, p: int) -> tuple[int, int, int]:
    """A map's constructor, size and count at ``buf[p]``: (its size check's tag, pairs, first key's position)."""
    c = buf[p]
    tag = layout.slot()
    if c == 0xC1:
        layout.expect(b"\xc1")
        layout.steps.append((_SIZE, tag, 1))
        layout.expect(bytes((buf[p + 2],)))
        count, q = buf[p + 2], p + 3
    elif c == 0xD1:
        layout.expect(b"\xd1")
        layout.steps.append((_SIZE, tag, 4))
        layout.expect(buf[p + 5 : p + 9])
        count, q = _u32(buf, p + 5), p + 9
    else:
        raise Unsupported(f"map 0x{c:02x}")
    if count & 1:
        raise Unsupported("a map with an odd count")
    return tag, count >> 1, q


def _key(buf: bytes, p: int) -> tuple[bytes, bytes, int]:
    """A map key (str8 or sym8 and their 32-bit forms): (its encoding, its bytes, the next position)."""
    c = buf[p]
    if c in (0xA1, 0xA3):
        end = p + 2 + buf[p + 1]
        return buf[p:end], buf[p + 2 : end], end
    if c in (0xB1, 0xB3):
        end = p + 5 + _u32(buf, p + 1)
        return buf[p:end], buf[p + 5 : end], end
    raise Unsupported(f"key 0x{c:02x}")


def learn(buf: bytes, p: int, end: int) -> Layout:
    """The layout of the message in ``buf[p:end]``; Unsupported when it has a form left to the
    per-message decoder."""
    layout = Layout()
    data_sections = 0
    while p < end:
        if buf[p] != 0 or buf[p + 1] != 0x53:
            raise Unsupported("a section descriptor in its long form")
        d = buf[p + 2]
        layout.expect(buf[p : p + 3])
        p += 3
        if d == 0x75:
            if data_sections:
                raise Unsupported("several data sections")
            data_sections += 1
            c = buf[p]
            if c not in (0xA0, 0xB0):
                raise Unsupported(f"data section 0x{c:02x}")
            layout.body, p = _var(layout, buf, p, True)
        elif d == 0x72 or d == 0x74:
            tag, pairs, q = _map(layout, buf, p)
            seen: set[bytes] = set()
            for _ in range(pairs):
                raw, name, q = _key(buf, q)
                if d == 0x74 and raw[0] not in (0xA1, 0xB1):
                    raise Unsupported("an application property named by a symbol")
                if name in seen:
                    raise Unsupported("a key twice in one map")
                seen.add(name)
                layout.expect(raw)
                if d == 0x72 and name == _SEQ:
                    if buf[q] != 0x81:
                        raise Unsupported("a sequence number that is not a long")
                    layout.expect(b"\x81")
                    layout.seq = layout.slot()
                    layout.steps.append((_FIXED, layout.seq, 8))
                    q += 9
                    continue
                value, q = _value(layout, buf, q)
                if d == 0x74:
                    layout.props.append((name.decode("utf-8", "replace"), value))
                    continue
                if name in (_OFFSET, _KEY, _PUBLISHER):
                    if value.kind not in (_TEXT, "const") or (value.kind == "const" and value.const is not None):
                        raise Unsupported("an offset, partition key or publisher that is not text")
                    if name == _OFFSET:
                        layout.offset = value
                        continue
                    if name == _KEY:
                        layout.key = value
                        continue
                    layout.publisher = value
                elif name == _TIME:
                    timestamp = value.kind == "int" and value.width == 8
                    if not timestamp and not (value.kind == "const" and value.const is None):
                        raise Unsupported("an enqueued time that is not a timestamp")
                    layout.time = value
                    continue
                layout.system.append((name.decode("utf-8", "replace"), value))
            layout.steps.append((_END, tag))
            p = _after_map(buf, p)
        elif d in (0x70, 0x71, 0x78):  # header, delivery annotations, footer: skipped, as their contents
            c = buf[p]
            layout.expect(bytes((c,)))
            if c in (0xC0, 0xC1):
                layout.steps.append((_VAR, None, 1))
                p += 2 + buf[p + 1]
            elif c in (0xD0, 0xD1):
                layout.steps.append((_VAR, None, 4))
                p += 5 + _u32(buf, p + 1)
            elif c in (0x45, 0x40):
                p += 1
            else:
                raise Unsupported(f"section value 0x{c:02x}")
        else:
            raise Unsupported(f"section 0x{d:02x}")
    if layout.seq < 0:
        raise Unsupported("no x-opt-sequence-number annotation")
    if p != end:
        raise Unsupported("a message that ends inside a section")
    return layout


def _after_map(buf: bytes, p: int) -> int:
    if buf[p] == 0xC1:
        return p + 2 + buf[p + 1]
    return p + 5 + _u32(buf, p + 1)


def _match(
    layout: Layout, data: np.ndarray, buffer: pa.Buffer, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, list[Any]]:
    """Which of the messages ``data[starts[i]:ends[i]]`` have ``layout`` (a boolean per message), and
    each slot's positions in them: a fixed value's first byte, a variable value's (start, end)."""
    pos = starts.astype(np.int64)
    ok = np.ones(len(pos), dtype=bool)
    slots: list[Any] = [None] * layout.slots
    runs: list[np.ndarray] = []  # where each constant run is in each message, compared at the end
    for step in layout.steps:
        kind = step[0]
        if kind == _EXPECT:
            runs.append(pos)
            pos = pos + len(step[1])  # a new array: the run keeps its positions while pos moves on in place
        elif kind == _FIXED:
            slots[step[1]] = pos.copy()
            pos += step[2]
        elif kind == _END:
            opened, size = slots[step[1]]
            ok &= pos - opened == size
        else:
            width = step[2]
            length = _prefix(data, pos, width)
            pos += width
            if kind == _VAR:
                if step[1] is not None:
                    slots[step[1]] = (pos.copy(), pos + length)
                pos += length
            else:  # _SIZE
                slots[step[1]] = (pos.copy(), length)
    ok &= pos == ends
    if runs:
        ok &= _constants(layout, runs, starts, ends, data, buffer)
    return ok, slots


_RUNS: dict[tuple[bytes, ...], pa.Array] = {}


def _runs(constants: tuple[bytes, ...], n: int) -> pa.Array:
    """A layout's constant runs, each followed by an empty value, ``n`` times over, as one binary array
    (``2 * len(constants) * n - 1`` values): what :func:`_constants` compares a batch's runs with, value by
    value. Made once per layout (by its runs: a stream learns the same layouts again and again) and size, grown
    by doubling, and sliced."""
    per_message = 2 * len(constants)
    made = _RUNS.get(constants)
    if made is None or len(made) < per_message * n - 1:
        capacity = 1 << max(12, (n - 1).bit_length())
        widths = np.zeros(per_message, dtype=np.int64)
        widths[0::2] = [len(c) for c in constants]
        offsets = np.zeros(per_message * capacity + 1, dtype=np.int64)
        np.cumsum(np.tile(widths, capacity), out=offsets[1:])
        values = pa.py_buffer(b"".join(constants) * capacity)
        if len(_RUNS) >= 16:  # a handful of layouts in a process; never an unbounded cache
            _RUNS.clear()
        made = _RUNS[constants] = pa.Array.from_buffers(
            pa.large_binary(), per_message * capacity, [None, pa.py_buffer(offsets), values]
        )
    return made.slice(0, per_message * n - 1)


def _constants(
    layout: Layout, runs: list[np.ndarray], starts: np.ndarray, ends: np.ndarray, data: np.ndarray, buffer: pa.Buffer
) -> np.ndarray:
    """Whether each message ``data[starts[i]:ends[i]]`` has the layout's constant runs where ``runs`` says they
    are (a boolean per message).

    All the runs of all the messages are compared in one call of Arrow's equality on binary values (a length
    check and a memcmp each, in C): the batch's buffer is read as one binary array whose values are the runs, in
    order, and the gaps between them, against the layout's runs and empty gaps (:func:`_runs`); about a third
    less than numpy's comparison of gathered runs, run by run, which is left for spans out of order. A binary
    array's offsets must not decrease: a message's runs follow one another, but in a message without this
    layout they may run past its end (positions read from its bytes), so such a message fails at once and its
    values are made empty at its start."""
    n, count = len(starts), len(runs)
    constants = tuple(step[1] for step in layout.steps if step[0] == _EXPECT)
    fits = np.ones(n, dtype=bool)
    limit = np.minimum(ends, len(buffer))  # never an offset past the buffer, whatever the spans say
    cuts = np.empty((2 * count, n), dtype=np.int64)  # per run: where it begins, where it ends
    for k, (at, constant) in enumerate(zip(runs, constants, strict=True)):
        fits &= at <= limit - len(constant)
        cuts[2 * k] = at
        np.add(at, len(constant), out=cuts[2 * k + 1])
    if not fits.all():
        if not fits.any():
            return fits
        cuts[:, ~fits] = starts[~fits]
    flat = cuts.T.reshape(-1)  # message by message, run by run
    if not (flat[1:] >= flat[:-1]).all():  # messages out of order or overlapping: not a stream's chunk
        for at, constant in zip(runs, constants, strict=True):
            m = len(constant)
            fits &= windows(data, m)[np.minimum(at, max(len(data) - m, 0))] == np.void(constant)
        return fits
    values = 2 * n * count - 1
    found = pa.Array.from_buffers(pa.large_binary(), values, [None, pa.py_buffer(flat), buffer])
    same = pc.equal(found, _runs(constants, n))
    bits = np.unpackbits(np.frombuffer(same.buffers()[1], dtype=np.uint8), count=values, bitorder="little")
    fits[np.flatnonzero(bits[0::2] == 0) // count] = False
    return fits


def _prefix(data: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """The length prefixes of ``width`` bytes (1, or 4 big-endian) at ``pos`` (clipped to the data)."""
    if len(data) < width:
        return np.zeros(len(pos), dtype=np.int64)
    if width == 1:
        return data[np.minimum(pos, len(data) - 1)].astype(np.int64)
    return windows(data, 4)[np.minimum(pos, len(data) - 4)].view(">u4").astype(np.int64)


def _ints(data: np.ndarray, pos: np.ndarray, width: int, signed: bool) -> np.ndarray:
    """Big-endian integers of ``width`` bytes at ``pos``, as int64 (uint64 for unsigned 8-byte ones)."""
    raw = windows(data, width)[pos]
    dtype = np.dtype(f">{'i' if signed else 'u'}{width}")
    return raw.view(dtype).astype(np.uint64 if width == 8 and not signed else np.int64)


def spans(buffer: pa.Buffer, start: np.ndarray, end: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A binary array of ``buffer[start[i]:end[i]]`` (increasing, not overlapping), copied in C: the spans
    and the gaps between them as one array over the buffer, of which every other value is taken (null
    where ``valid`` is False)."""
    n = len(start)
    if n == 0:
        return arrays.empty(pa.binary())
    offsets = np.empty(2 * n, dtype=np.int32)
    offsets[0::2] = start
    offsets[1::2] = end
    both = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(offsets), buffer])
    every_other = np.arange(0, 2 * n - 1, 2, dtype=np.int64)
    return both.take(arrays.numbers(every_other, pa.int64(), valid))


class _NotText(Exception):
    """A value the layout reads as text is not UTF-8: the batch takes the per-message path."""


def _as_text(values: pa.Array) -> pa.Array:
    try:
        return values.cast(pa.string())
    except pa.ArrowInvalid:
        raise _NotText from None


class _Group:
    """The messages of one layout: their rows among the batch's column-decoded ones, and the slots'
    positions in them."""

    __slots__ = ("layout", "rows", "slots")

    def __init__(self, layout: Layout, rows: np.ndarray, slots: list[Any]) -> None:
        self.layout, self.rows, self.slots = layout, rows, slots


def _other_texts(value: _Value, data: np.ndarray, slots: list[Any], n: int) -> pa.Array:
    """A value that is not a span (an integer, a boolean, a constant) of ``n`` messages, as text."""
    if value.kind == "const":
        return pa.nulls(n, pa.string()) if value.const is None else arrays.repeated_text(value.const, n)
    if value.kind == "bool":
        return arrays.texts(np.where(data[slots[value.slot]] == 1, "true", "false").tolist())
    ints = _ints(data, slots[value.slot], value.width, value.kind == "int")
    return arrays.numbers(ints, pa.from_numpy_dtype(ints.dtype)).cast(pa.string())


def _text_column(groups: list[_Group], name: str, data_end: np.ndarray, buffer: pa.Buffer) -> pa.Array:
    """The offset, partition key or publisher column: each group's value where its layout has text there,
    null elsewhere."""
    texts = [(g, value) for g in groups if (value := getattr(g.layout, name)) is not None and value.kind == _TEXT]
    if not texts:  # the usual case for keys and publishers: no arrays to fill
        return pa.nulls(len(data_end), pa.string())
    if len(texts) == 1 and len(texts[0][0].rows) == len(data_end):  # one layout, every row: its spans as they are
        g, value = texts[0]
        return _as_text(spans(buffer, *g.slots[value.slot]))
    start, end = data_end.copy(), data_end.copy()  # empty spans at each message's end keep the order
    valid = np.zeros(len(data_end), dtype=bool)
    for g, value in texts:
        start[g.rows], end[g.rows] = g.slots[value.slot]
        valid[g.rows] = True
    return _as_text(spans(buffer, start, end, None if valid.all() else valid))


_EMPTY_MAPS: list[pa.Array] = []


def _empty_maps(n: int) -> pa.Array:
    """``n`` empty maps: a slice of one array made once (and again, larger, when a batch outgrows it)."""
    if not _EMPTY_MAPS or len(_EMPTY_MAPS[0]) < n:
        size = max(n, 4096)
        empty = arrays.empty(pa.string())
        _EMPTY_MAPS[:] = [pa.MapArray.from_arrays(arrays.ints(np.zeros(size + 1), pa.int32()), empty, empty)]
    return _EMPTY_MAPS[0].slice(0, n)


_CONSTANT_MAPS: dict[tuple[tuple[str, str | None], ...], pa.Array] = {}


def _constant_entries(g: _Group, name: str, data: np.ndarray) -> tuple[tuple[str, str | None], ...] | None:
    """The entries of a layout's map when every message of the group has the same ones, key and value (a
    geo-replicated hub's replication segment in systemProperties, the same on every event of a run); else None."""
    out: list[tuple[str, str | None]] = []
    for key, value in getattr(g.layout, name):
        if value.kind == "const":
            out.append((key, value.const))
        elif value.kind in ("int", "uint"):
            ints = _ints(data, g.slots[value.slot], value.width, value.kind == "int")
            if len(ints) == 0 or (ints != ints[0]).any():
                return None
            out.append((key, str(int(ints[0]))))
        else:
            return None
    return tuple(out)


def _constant_maps(entries: tuple[tuple[str, str | None], ...], n: int) -> pa.Array:
    """``n`` maps of the same ``entries``, in Arrow's own form: offsets a step apart over one keys and one
    values array, made once per entries (and again, larger, when a batch outgrows it) and sliced."""
    made = _CONSTANT_MAPS.get(entries)
    if made is None or len(made) < n:
        size, k = max(n, 4096), len(entries)
        keys = arrays.texts([key for key, _ in entries] * size)
        values = arrays.texts([value for _, value in entries] * size)
        offsets = arrays.ints(np.arange(0, (size + 1) * k, k), pa.int32())
        if len(_CONSTANT_MAPS) > 64:  # a handful of distinct entry sets in a process; never an unbounded cache
            _CONSTANT_MAPS.clear()
        made = _CONSTANT_MAPS[entries] = pa.MapArray.from_arrays(offsets, keys, values)
    return made.slice(0, n)


def _map_column(groups: list[_Group], name: str, n: int, data: np.ndarray, buffer: pa.Buffer) -> pa.Array:
    """The properties or systemProperties column: row by row the entries of its message's layout, in
    their order; text values cut from the buffer in one pass, the others made text per layout."""
    if not any(getattr(g.layout, name) for g in groups):  # the usual case for properties
        return _empty_maps(n)
    if len(groups) == 1 and len(groups[0].rows) == n:  # one layout: the usual case for systemProperties
        entries = _constant_entries(groups[0], name, data)
        if entries is not None:
            return _constant_maps(entries, n)
    counts = np.zeros(n, dtype=np.int64)
    for g in groups:
        counts[g.rows] = len(getattr(g.layout, name))
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        empty = arrays.empty(pa.string())
        return pa.MapArray.from_arrays(arrays.numbers(offsets, pa.int32()), empty, empty)
    codes = np.empty(total, dtype=np.int64)
    names: dict[str, int] = {}
    span_at: list[np.ndarray] = []
    span_start: list[np.ndarray] = []
    span_end: list[np.ndarray] = []
    other_at: list[np.ndarray] = []
    others: list[pa.Array] = []
    for g in groups:
        first = offsets[g.rows].astype(np.int64)
        for j, (key, value) in enumerate(getattr(g.layout, name)):
            at = first + j
            codes[at] = names.setdefault(key, len(names))
            if value.kind == _TEXT:
                span_at.append(at)
                span_start.append(g.slots[value.slot][0])
                span_end.append(g.slots[value.slot][1])
            else:
                other_at.append(at)
                others.append(_other_texts(value, data, g.slots, len(g.rows)))
    parts: list[pa.Array] = []
    where: list[np.ndarray] = []
    if span_at:
        at = np.concatenate(span_at)
        order = np.argsort(at, kind="stable")  # entry order is byte order: the spans come out increasing
        parts.append(_as_text(spans(buffer, np.concatenate(span_start)[order], np.concatenate(span_end)[order])))
        where.append(at[order])
    parts.extend(others)
    where.extend(other_at)
    values = pa.concat_arrays(parts) if len(parts) > 1 else parts[0]
    if len(parts) > 1:
        source = np.empty(total, dtype=np.int64)
        source[np.concatenate(where)] = np.arange(total, dtype=np.int64)
        values = values.take(arrays.numbers(source, pa.int64()))
    keys = arrays.texts(list(names)).take(arrays.numbers(codes, pa.int64()))
    return pa.MapArray.from_arrays(arrays.numbers(offsets, pa.int32()), keys, values)


def _assemble(groups: list[_Group], starts: np.ndarray, ends: np.ndarray, data: np.ndarray, buffer: pa.Buffer,
              partition: str) -> pa.RecordBatch:  # fmt: skip
    """The record batch of the messages ``starts``/``ends`` (every one in exactly one group): each column
    built once for all of them, whatever their layouts."""
    n = len(starts)
    if len(groups) == 1 and len(groups[0].rows) == n:  # one layout, so every row, in order
        return _assemble_one(groups[0], ends, data, buffer, partition)
    seq = np.empty(n, dtype=np.int64)
    millis = np.zeros(n, dtype=np.int64)
    has_time = np.zeros(n, dtype=bool)
    body_start, body_end = ends.copy(), ends.copy()
    for g in groups:
        layout, rows, slots = g.layout, g.rows, g.slots
        seq[rows] = _ints(data, slots[layout.seq], 8, True)
        if layout.time is not None and layout.time.kind == "int":
            millis[rows] = _ints(data, slots[layout.time.slot], 8, True)
            has_time[rows] = True
        if layout.body >= 0:
            body_start[rows], body_end[rows] = slots[layout.body]
    times = _times(millis, has_time)
    return pa.RecordBatch.from_arrays(
        [
            spans(buffer, body_start, body_end),
            arrays.repeated_text(partition, n),
            _text_column(groups, "offset", ends, buffer),
            arrays.numbers(seq, pa.int64()),
            times,
            _text_column(groups, "publisher", ends, buffer),
            _text_column(groups, "key", ends, buffer),
            _map_column(groups, "props", n, data, buffer),
            _map_column(groups, "system", n, data, buffer),
        ],
        schema=ARROW_SCHEMA,
    )


def _assemble_one(g: _Group, ends: np.ndarray, data: np.ndarray, buffer: pa.Buffer, partition: str) -> pa.RecordBatch:
    """:func:`_assemble` for a batch of one layout: each column straight from the slots, nothing scattered."""
    layout, slots, n = g.layout, g.slots, len(ends)
    if layout.time is not None and layout.time.kind == "int":
        times = _times(_ints(data, slots[layout.time.slot], 8, True), None)
    else:
        times = pa.nulls(n, MICROS)
    body = spans(buffer, *slots[layout.body]) if layout.body >= 0 else spans(buffer, ends, ends)
    return pa.RecordBatch.from_arrays(
        [
            body,
            arrays.repeated_text(partition, n),
            _text_column([g], "offset", ends, buffer),
            arrays.numbers(_ints(data, slots[layout.seq], 8, True), pa.int64()),
            times,
            _text_column([g], "publisher", ends, buffer),
            _text_column([g], "key", ends, buffer),
            _map_column([g], "props", n, data, buffer),
            _map_column([g], "system", n, data, buffer),
        ],
        schema=ARROW_SCHEMA,
    )


def _times(millis: np.ndarray, has_time: np.ndarray | None) -> pa.Array:
    """Enqueued times, milliseconds since the epoch, as microsecond timestamps (null where a message has none;
    ``has_time`` None: every message has one)."""
    if len(millis) and np.abs(millis).max() > MILLIS_MAX:  # as arrow.Columns does: Arrow's cast raises the error
        column = arrays.numbers(millis, pa.int64(), has_time)
        return column.cast(pa.timestamp("ms", tz="UTC")).cast(MICROS)
    return arrays.numbers(millis * 1000, MICROS, has_time)


def _cut(slots: list[Any], rows: np.ndarray) -> list[Any]:
    return [None if s is None else (s[0][rows], s[1][rows]) if isinstance(s, tuple) else s[rows] for s in slots]


def events_batch(events: RawEvents, partition: str, needed: frozenset[int] | None = None) -> tuple[pa.RecordBatch, int]:
    """The record batch of a receiver's chunk, and how many of its events the SDK's decoder made (``needed``: see
    :func:`decode_spans`)."""
    buffer, starts, ends = events.spans()
    return decode_spans(buffer, starts, ends, partition, needed=needed)


def decode_batch(messages: pa.Array, partition: str, min_rows: int = MIN_ROWS) -> tuple[pa.RecordBatch, int]:
    """The source schema's record batch of a binary array of messages (one per row), and how many of
    them the SDK's decoder made."""
    n = len(messages)
    buffers = messages.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32, count=n + 1, offset=messages.offset * 4).astype(np.int64)
    buffer = buffers[2] if buffers[2] is not None else pa.py_buffer(b"")
    return decode_spans(buffer, offsets[:-1], offsets[1:], partition, min_rows)


# The layout learnt last (in this process): the next batch, of the same stream most likely, is matched against
# it first, and learns one only when its first message has another (a match proves every message it takes).
_RECENT: list[Layout] = []


def decode_spans(
    buffer: bytes | pa.Buffer,
    starts: np.ndarray,
    ends: np.ndarray,
    partition: str,
    min_rows: int = MIN_ROWS,
    needed: frozenset[int] | None = None,
) -> tuple[pa.RecordBatch, int]:
    """The source schema's record batch of the messages ``buffer[starts[i]:ends[i]]`` (in order; the bytes
    between them are not looked at, so a buffer of frames as they arrived will do), and how many of them
    the SDK's decoder made. See the module docstring. ``needed``: the columns (by index) the caller uses; a batch
    decoded one message at a time may leave the others null (:meth:`Columns.to_batch`).

    1. :func:`learn` reads one message with a Python walk and writes down its **layout**: the bytes that
       must be the same in every message of that shape (section descriptors, map sizes' positions, keys,
       value constructors) and where the values are (fixed width, or a length prefix and its bytes). The
       layout learnt last is tried first on the next batch (a stream's chunks are alike), so most batches
       learn nothing.
    2. :func:`_match` checks every other message of the batch against it at once with numpy: each length
       prefix followed, each map's declared size checked against what it holds, the layout must end exactly
       where the message ends, and every constant run of every message compared in one call of Arrow's
       equality (:func:`_constants`). A message that passes was parsed exactly as the
       sequential decoder parses it; one that does not is left for the next layout.
    3. The values become Arrow columns without a Python object per event: fixed-width integers read from
       a gathered byte matrix, variable parts (bodies, offsets, string values) cut from the batch's one
       data buffer in C (:func:`spans`). A batch of one layout (the usual case) takes its columns straight
       from the slots, and columns no message has (keys, publishers, system properties, often) cost
       nothing per batch: the fixed cost of a batch is what makes large chunks pay (about 0.3 ms).

    What the layout does not describe (a properties section, floats, UUIDs, lists and maps among the
    properties, value or sequence bodies, several data sections, duplicate keys, text that is not UTF-8),
    and batches too small to be worth it, go through the per-message decoder, which falls back to the SDK's
    own where it must. A property test holds both ways to the SDK's decoding, row by row.
    """
    n = len(starts)
    if not isinstance(buffer, pa.Buffer):
        buffer = pa.py_buffer(buffer)
    if n < max(min_rows, 1):
        return _one_by_one(buffer, starts, ends, np.arange(n), partition, needed)
    data = np.frombuffer(buffer, dtype=np.uint8)
    left = np.arange(n, dtype=np.int64)
    found: list[tuple[Layout, np.ndarray, list[Any]]] = []  # (layout, rows of the batch, slots)
    single: list[int] = []  # rows no layout was learnt from: decoded one by one
    for _ in range(MAX_LAYOUTS):
        if not len(left):
            break
        first = int(left[0])
        recent = _RECENT[0] if _RECENT and not found else None
        ok = None
        if recent is not None:  # the last batch's layout, tried before learning one: chunks of a stream are alike
            layout = recent
            ok, slots = _match(layout, data, buffer, starts[left], ends[left])
            if not ok[0]:
                ok = None
        if ok is None:
            try:
                message = _bytes(buffer, int(starts[first]), int(ends[first]))  # a copy of one message, not the buffer
                layout = learn(message, 0, len(message))
            except (Unsupported, IndexError):
                single.append(first)
                left = left[1:]
                continue
            ok, slots = _match(layout, data, buffer, starts[left], ends[left])
            _RECENT[:] = [layout]
        if not ok[0]:  # cannot happen: a layout matches the message it was learnt from; if it did, no harm
            single.append(first)
            left = left[1:]
            continue
        found.append((layout, left[ok], _cut(slots, ok)))
        left = left[~ok]
    if not found:
        return _one_by_one(buffer, starts, ends, np.arange(n), partition)
    if len(found) == 1 and not single and not len(left):  # the usual case: one layout, every message
        layout, _, slots = found[0]
        try:
            return _assemble([_Group(layout, np.arange(n), slots)], starts, ends, data, buffer, partition), 0
        except _NotText:
            return _one_by_one(buffer, starts, ends, np.arange(n), partition)
    rest = np.sort(np.concatenate([left, np.array(single, dtype=np.int64)]))
    columnwise = np.sort(np.concatenate([rows for _, rows, _ in found]))
    groups = [_Group(layout, np.searchsorted(columnwise, rows), slots) for layout, rows, slots in found]
    try:
        batch = _assemble(groups, starts[columnwise], ends[columnwise], data, buffer, partition)
    except _NotText:
        return _one_by_one(buffer, starts, ends, np.arange(n), partition)
    if not len(rest):
        return batch, 0
    others, fallbacks = _one_by_one(buffer, starts, ends, rest, partition)
    return _join([(columnwise, batch), (rest, others)], n), fallbacks


def _bytes(buffer: pa.Buffer, start: int, end: int) -> bytes:
    return buffer.slice(start, end - start).to_pybytes()


def _one_by_one(
    buffer: pa.Buffer,
    starts: np.ndarray,
    ends: np.ndarray,
    rows: np.ndarray,
    partition: str,
    needed: frozenset[int] | None = None,
) -> tuple[pa.RecordBatch, int]:
    """The messages ``rows`` decoded one at a time (:func:`~eventhubs_spark.codec.message.decode_message`), and
    how many of them the SDK's decoder made."""
    cols = Columns()
    for start, end in zip(starts[rows].tolist(), ends[rows].tolist(), strict=True):
        decode_message(cols, _bytes(buffer, start, end))
    return cols.to_batch(partition, needed), cols.fallbacks


def _join(parts: list[tuple[np.ndarray, pa.RecordBatch]], n: int) -> pa.RecordBatch:
    """One batch of the parts' rows in the messages' order."""
    table = pa.Table.from_batches([b for _, b in parts], schema=ARROW_SCHEMA)
    order = np.concatenate([rows for rows, _ in parts])
    where = np.empty(n, dtype=np.int64)
    where[order] = np.arange(n, dtype=np.int64)
    return table.take(arrays.numbers(where, pa.int64())).combine_chunks().to_batches()[0]
