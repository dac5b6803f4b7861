"""Positions on geo-replicated hubs: a sequence number with its replication segment, as one integer.

A promotion on a geo-replicated hub begins a new replication segment whose sequence numbers may name lost events
again, so a position is one integer: the segment above :data:`SEQ_BITS`, the sequence number below. A hub that is not
geo-replicated has segment -1: its positions are its sequence numbers.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

SEQ_BITS = 40  # 1.1e12 events per partition and segment: 35 years at 1,000 events/s
SEQ_MASK = (1 << SEQ_BITS) - 1
MAX_SEGMENT = (1 << (63 - SEQ_BITS)) - 2


def pack(segment: int, seq: int) -> int:
    """The position of sequence number ``seq`` in replication segment ``segment`` (-1: none)."""
    if segment < 0:
        return seq
    if segment > MAX_SEGMENT or not 0 <= seq <= SEQ_MASK:
        raise ValueError(
            f"replication segment {segment} and sequence number {seq} are past what a position holds "
            f"(segments up to {MAX_SEGMENT}, sequence numbers below 2**{SEQ_BITS})"
        )
    return ((segment + 1) << SEQ_BITS) | seq


def segment_of(position: int) -> int:
    """The replication segment of a position (-1 on a hub that is not geo-replicated)."""
    return (position >> SEQ_BITS) - 1 if position > SEQ_MASK else -1


def seq_of(position: int) -> int:
    """The sequence number of a position, as the service and the SDKs show it."""
    return position & SEQ_MASK if position > SEQ_MASK else position


def of_event(segment: object, seq: int) -> int:
    """An event's position from its ``x-opt-sequence-number-epoch`` annotation (anything but a segment,
    missing or -1, means none) and its sequence number."""
    return pack(segment, seq) if type(segment) is int else seq


def of_offset(offset: object) -> int:
    """The replication segment an offset names: a geo-replicated one's ``segment:`` prefix (``"2:887"`` is in
    segment 2), else -1."""
    head, sep, _ = str(offset or "").partition(":")
    return int(head) if sep and head.isdigit() else -1


def show(position: int) -> str:
    """A position for people: ``"42"``, or ``"2:42"`` (segment 2, sequence number 42). A trigger's lag file shows
    two a partition (2,048 at 1,024 partitions): a plain one goes straight to text."""
    if position <= SEQ_MASK:
        return str(position)
    return f"{segment_of(position)}:{seq_of(position)}"


def parse(text: str) -> int:
    """The inverse of :func:`show` (``ValueError`` on anything else)."""
    segment, sep, seq = str(text).strip().partition(":")
    if not sep:
        return int(segment)
    return pack(int(segment), int(seq))


def count(start: int, end: int) -> int:
    """About how many events lie in ``[start, end)``: exact within a segment; across a promotion the new
    segment's first sequence number is not known, so the events of ``end``'s segment up to ``end`` count,
    as if it began after ``start``'s sequence number (never less than 1)."""
    if end <= start:
        return 0
    if end <= SEQ_MASK or segment_of(start) == segment_of(end):  # the first: no segments (planning's hot path)
        return end - start
    return max(1, seq_of(end) - seq_of(start))


def advance(start: int, n: int, end: int) -> int:
    """The position ``n`` events after ``start``, at most ``end``. Across a promotion the whole way to
    ``end`` is taken: ``start + n`` would name a place in a segment the partition no longer adds to, and a
    range that ends there could never read an event. Never before ``start``."""
    if end <= start or n <= 0:
        return start
    if end > SEQ_MASK and segment_of(start) != segment_of(end):
        return end
    return min(start + n, end)


class SegmentedSequence(int):
    """A position handed to the SDK's consumer as its event position: an ``int`` (so the SDK filters by
    sequence number) that formats as ``'<segment>:<sequence number>'``, the geo-replicated filter's form.
    Only made for positions with a segment (see :func:`sdk_position`)."""

    def __format__(self, spec: str) -> str:
        return show(int(self)) if not spec else int.__format__(int(self), spec)

    def __str__(self) -> str:
        return show(int(self))


def sdk_position(position: int) -> int:
    """What the SDK gets to filter on ``position``: the position itself, or on a geo-replicated hub one that
    renders with its segment."""
    return SegmentedSequence(position) if position > SEQ_MASK else position
