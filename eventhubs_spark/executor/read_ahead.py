"""What a partition's receiver has read ahead and not yet handed out.

A receiver's link reads ahead of its tasks (its credit, bounded by ``eventhubs.readAheadEvents`` and
``readAheadBytes``: :class:`~eventhubs_spark.amqp.receive_connections.LinkSpec`), into the link's sink. A range takes
what it needs from there; the part of a chunk that lies past the range's end is held here, in order,
for the partition's next range, so an idle receiver carries its read-ahead over from one micro-batch to
the next. When the link ends, everything still held (here and in the sink) is kept, and the new link
opens after the last of it: nothing is read twice, nothing skipped.
"""

from __future__ import annotations

from eventhubs_spark.amqp.messages import RawEvents
from eventhubs_spark.amqp.receive_connections import Link


class HeldEvents:
    """Events read ahead of a receiver's position, oldest first, each once."""

    __slots__ = ("_events",)

    def __init__(self) -> None:
        self._events: RawEvents | None = None

    def hold(self, chunk: RawEvents) -> None:
        """Keep events a range did not need, before anything held already (they come first)."""
        if not chunk.seqs:
            return
        if self._events is not None and self._events.seqs:
            chunk.extend(self._events)
        self._events = chunk

    def take(self, wanted: int) -> RawEvents | None:
        """Up to ``wanted`` of the oldest held events, or None when nothing is held."""
        events = self._events
        if events is None or not events.seqs:
            return None
        if len(events) <= wanted:
            self._events = None
            return events
        return events.take(wanted)

    def drain(self, link: Link | None) -> RawEvents:
        """Everything held, then everything ``link``'s sink still holds (read before the link ended); nothing
        is held afterwards."""
        held = self._events or RawEvents()
        self._events = None
        if link is not None:
            sink = link.sink
            with sink.cond:
                while (chunk := sink.take(1 << 62)) is not None:
                    held.extend(chunk)
        return held

    def replace(self, events: RawEvents | None) -> None:
        """Hold exactly ``events`` (None or empty: nothing)."""
        self._events = events if events else None

    def clear(self) -> None:
        self._events = None
