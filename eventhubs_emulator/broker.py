"""The emulator's state: hubs, partitions and their event logs, independent of AMQP.

Everything here runs on the emulator's event-loop thread; the public :class:`~.Emulator` API
marshals calls onto it. Sequence numbers start at 0 per partition; offsets are byte positions in the
partition's log (as on the service, strings on the wire); enqueued times are milliseconds since the
epoch, never decreasing within a partition.

Every event carries ``x-opt-sequence-number-epoch``, its replication segment, first among its annotations
as the service sends it: -1 on a hub that is not geo-replicated. A geo-replicated hub's partitions count
segments from 1; its offsets are opaque strings, ``"<segment>:<offset>"``; and :meth:`Partition.promote`
begins a new segment, as a promotion of the secondary region does: a forced one loses the events not
yet replicated, so the new segment's sequence numbers go on from the last event kept and may repeat
ones the old segment had given. (segment, sequence number) names an event; a sequence number alone no
longer does. Internally each event also has an ``ordinal``, its place in the log, which is what the
links deliver by.
"""

from __future__ import annotations

import bisect
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import amqp

if TYPE_CHECKING:
    from .capture import Capturer

_q = struct.Struct(">q")

# Encoded map keys of the annotations the service stamps on each event (symbols).
_K_SEQ = amqp.encode_value(amqp.Symbol("x-opt-sequence-number"))
_K_OFFSET = amqp.encode_value(amqp.Symbol("x-opt-offset"))
_K_TIME = amqp.encode_value(amqp.Symbol("x-opt-enqueued-time"))
_K_KEY = amqp.encode_value(amqp.Symbol("x-opt-partition-key"))
_K_EPOCH = amqp.encode_value(amqp.Symbol("x-opt-sequence-number-epoch"))
_STAMPED = {
    "x-opt-sequence-number", "x-opt-offset", "x-opt-enqueued-time", "x-opt-partition-key",
    "x-opt-sequence-number-epoch",
}  # fmt: skip


def _epoch_value(segment: int) -> bytes:
    """A replication segment as the service encodes it: a byte (``T``) when it fits, else an int."""
    return b"\x54" + struct.pack(">b", segment) if -128 <= segment <= 127 else b"\x71" + struct.pack(">i", segment)


class Event:
    """One stored event: its position and the bytes to deliver (minus per-delivery annotations)."""

    __slots__ = (
        "_body_at",
        "delivery",
        "delivery_entries",
        "enqueued_ms",
        "header_len",
        "message",
        "offset",
        "ordinal",
        "partition_key",
        "segment",
        "sequence_number",
        "size",
    )

    def __init__(
        self,
        sequence_number: int,
        offset: int,
        enqueued_ms: int,
        partition_key: str | None,
        header: bytes,
        body: bytes,
        delivery_entries: tuple[bytes, ...] = (),
        segment: int = -1,
        ordinal: int = 0,
    ) -> None:
        self.sequence_number = sequence_number
        self.segment = segment
        self.ordinal = ordinal
        self.offset = offset
        self.enqueued_ms = enqueued_ms
        self.partition_key = partition_key
        # The producer's delivery annotations, delivered as they came (raw map entries, and the section).
        self.delivery_entries = delivery_entries
        self.delivery = b"\x00\x53\x71" + amqp.map_from_raw(list(delivery_entries)) if delivery_entries else b""
        # The message as a receiver without runtime metrics gets it, kept whole (not as header and body) so a run of
        # deliveries is encoded without joining each event's parts again (Connection.encode_run).
        self.message = header + self.delivery + body
        self.header_len = len(header)
        self._body_at = len(header) + len(self.delivery)
        self.size = len(self.message)

    @property
    def header(self) -> bytes:
        return self.message[: self.header_len]

    @property
    def body(self) -> bytes:
        """The message-annotations section onwards, annotations already stamped."""
        return self.message[self._body_at :]


@dataclass
class IncomingMessage:
    """A message as a producer sent it, split so the broker can stamp service annotations."""

    header: bytes
    annotations: list[tuple[object, bytes]]  # raw map entries of the producer's own annotations
    rest: bytes  # properties, application properties, body, footer
    partition_key: str | None
    delivery: tuple[bytes, ...] = ()  # raw map entries of the producer's delivery annotations


def parse_message(message: bytes) -> IncomingMessage:
    """Split an encoded message into the parts the broker keeps and the annotations it stamps."""
    header = b""
    delivery: list[bytes] = []
    annotations: list[tuple[object, bytes]] = []
    rest_parts = []
    key = None
    for descriptor, start, end in amqp.split_sections(message):
        if descriptor == amqp.HEADER:
            header = message[start:end]
        elif descriptor == amqp.DELIVERY_ANNOTATIONS:
            _, value_pos = amqp.decode_value(message, start + 1)
            delivery.extend(raw for _, raw in amqp.map_entries_raw(message, value_pos))
        elif descriptor == amqp.MESSAGE_ANNOTATIONS:
            _, value_pos = amqp.decode_value(message, start + 1)
            for k, raw in amqp.map_entries_raw(message, value_pos):
                if k == "x-opt-partition-key":
                    value, _ = amqp.decode_value(raw, amqp.skip_value(raw, 0))
                    key = value if isinstance(value, str) else None
                if k not in _STAMPED:
                    annotations.append((k, raw))
        else:
            rest_parts.append(message[start:end])
    return IncomingMessage(bytes(header), annotations, b"".join(rest_parts), key, tuple(delivery))


def parse_batch(payload: bytes) -> tuple[list[IncomingMessage], str | None]:
    """Unpack an Event Hubs batch (message format 0x80013700): one data section per event."""
    outer_key = None
    events = []
    for descriptor, start, _end in amqp.split_sections(payload):
        if descriptor == amqp.DATA:
            inner = amqp.section_value(payload, start)
            events.append(parse_message(inner))
        elif descriptor == amqp.MESSAGE_ANNOTATIONS:
            annotations = amqp.section_value(payload, start) or {}
            value = annotations.get("x-opt-partition-key")
            outer_key = value if isinstance(value, str) else None
    if outer_key is None:
        outer_key = next((e.partition_key for e in events if e.partition_key is not None), None)
    return events, outer_key


class Partition:
    """An append-only log with retention, plus the receivers attached to it."""

    def __init__(self, hub: Hub, partition_id: str) -> None:
        self.hub = hub
        self.id = partition_id
        self.events: list[Event] = []
        self.next_sequence_number = 0
        self.next_offset = 0
        self.last_enqueued_ms = 0
        self.last_offset = -1
        self.listeners: set[Callable[[], None]] = set()
        self.stalled = False
        self.delay_s = 0.0
        self.segment = 1 if hub.geo_replicated else -1  # the replication segment new events get
        self.next_ordinal = 0  # the next event's place in the log (what links deliver by)

    # -- positions --
    @property
    def beginning_sequence_number(self) -> int:
        return self.events[0].sequence_number if self.events else self.next_sequence_number

    @property
    def beginning_segment(self) -> int:
        return self.events[0].segment if self.events else self.segment

    @property
    def first_ordinal(self) -> int:
        return self.events[0].ordinal if self.events else self.next_ordinal

    def ordinal_at(self, index: int) -> int:
        return self.events[index].ordinal if index < len(self.events) else self.next_ordinal

    def index_of_position(self, segment: int, seq: int, inclusive: bool) -> int:
        """Index of the first event at or after (``inclusive``) or after (segment, seq), on a geo-replicated
        hub (elsewhere ordinals are sequence numbers). Segment -1 means the current one."""
        key = (self.segment if segment < 0 else segment, seq)
        fn = bisect.bisect_left if inclusive else bisect.bisect_right
        return fn(self.events, key, key=lambda e: (e.segment, e.sequence_number))

    def wire_offset(self, offset: int, segment: int | None = None) -> str:
        """An offset as it goes on the wire: an opaque ``segment:offset`` on a geo-replicated hub."""
        if not self.hub.geo_replicated:
            return str(offset)
        return f"{self.segment if segment is None else segment}:{offset}"

    @staticmethod
    def parse_offset(text: str) -> int:
        """An offset from a filter: ``segment:offset`` (geo-replicated hubs) or a plain number."""
        return int(text.rpartition(":")[2])

    def index_of_sequence(self, seq: int) -> int:
        """Index in ``events`` of the first event with sequence number >= ``seq``."""
        if not self.events:
            return 0
        return max(0, min(len(self.events), seq - self.events[0].sequence_number))

    def index_of_offset(self, offset: int, inclusive: bool) -> int:
        fn = bisect.bisect_left if inclusive else bisect.bisect_right
        return fn(self.events, offset, key=lambda e: e.offset)

    def index_of_time(self, ms: int, inclusive: bool) -> int:
        fn = bisect.bisect_left if inclusive else bisect.bisect_right
        return fn(self.events, ms, key=lambda e: e.enqueued_ms)

    # -- writes --
    def append(self, messages: list[IncomingMessage], key: str | None) -> None:
        now = max(int(time.time() * 1000), self.last_enqueued_ms)
        for m in messages:
            seq = self.next_sequence_number
            offset = self.next_offset
            pkey = key if key is not None else m.partition_key
            entries = [_K_EPOCH + _epoch_value(self.segment)]  # first, as the service puts it
            entries.extend(raw for _, raw in m.annotations)
            entries.append(_K_SEQ + b"\x81" + _q.pack(seq))
            entries.append(_K_OFFSET + amqp.encode_value(self.wire_offset(offset)))
            entries.append(_K_TIME + b"\x83" + _q.pack(now))
            if pkey is not None:
                entries.append(_K_KEY + amqp.encode_value(pkey))
            body = b"\x00\x53\x72" + amqp.map_from_raw(entries) + m.rest
            event = Event(seq, offset, now, pkey, m.header, body, m.delivery, self.segment, self.next_ordinal)
            self.events.append(event)
            self.next_ordinal += 1
            self.next_sequence_number = seq + 1
            self.next_offset = offset + event.size
            self.last_offset = offset
        self.last_enqueued_ms = now
        if self.hub.capturer is not None and messages:
            self.hub.capturer.appended(self, self.events[-len(messages) :])
        for notify in list(self.listeners):
            notify()

    def promote(self, lose: int = 0) -> int:
        """A promotion of the secondary region: a new replication segment begins. A forced one loses the
        last ``lose`` events (not yet replicated): the new segment's sequence numbers go on from the last
        event kept. Returns how many were lost."""
        if not self.hub.geo_replicated:
            raise ValueError(f"hub {self.hub.name!r} is not geo-replicated: nothing to promote")
        lost = min(max(lose, 0), len(self.events))
        if lost:
            gone = self.events[-lost:]
            del self.events[-lost:]
            self.next_sequence_number = gone[0].sequence_number
            self.next_ordinal = gone[0].ordinal
        self.last_offset = self.events[-1].offset if self.events else -1
        self.segment += 1
        return lost

    def trim_before(self, sequence_number: int) -> int:
        """Drop events with a sequence number below ``sequence_number``; returns how many."""
        n = self.index_of_sequence(sequence_number)
        del self.events[:n]
        return n

    def trim_older_than(self, cutoff_ms: int) -> int:
        n = bisect.bisect_left(self.events, cutoff_ms, key=lambda e: e.enqueued_ms)
        del self.events[:n]
        return n

    def properties(self) -> dict[str, object]:
        last = self.next_sequence_number - 1
        last_segment = self.events[-1].segment if self.events else self.segment
        found: dict[str, object] = {
            "name": self.hub.name,
            "partition": self.id,
            "begin_sequence_number": self.beginning_sequence_number,
            "last_enqueued_sequence_number": last,
            "last_enqueued_offset": self.wire_offset(self.last_offset, last_segment),
            "is_partition_empty": not self.events,
            "last_enqueued_time_utc": amqp.Timestamp(self.last_enqueued_ms),
        }
        if self.hub.geo_replicated:
            found["begin_replication_segment"] = self.beginning_segment
            found["last_enqueued_replication_segment"] = last_segment
        return found


@dataclass
class Hub:
    name: str
    partitions: list[Partition] = field(default_factory=list)
    consumer_groups: set[str] = field(default_factory=lambda: {"$default"})
    retention_s: float | None = None
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    geo_replicated: bool = False
    capturer: Capturer | None = None  # Event Hubs Capture, where it is on for this hub (capture.py)
    _round_robin: int = 0

    def add_partitions(self, count: int) -> None:
        start = len(self.partitions)
        self.partitions.extend(Partition(self, str(i)) for i in range(start, start + count))
        if self.capturer is not None:
            for partition in self.partitions[start:]:
                self.capturer.start_partition(partition)

    def partition(self, partition_id: str) -> Partition | None:
        if partition_id.isascii() and partition_id.isdigit() and int(partition_id) < len(self.partitions):
            return self.partitions[int(partition_id)]
        return None

    def route(self, key: str | None) -> Partition:
        """Pick the partition for an event sent to the hub: one key always maps to one partition."""
        if key is not None:
            return self.partitions[zlib.crc32(key.encode("utf-8")) % len(self.partitions)]
        p = self.partitions[self._round_robin % len(self.partitions)]
        self._round_robin += 1
        return p

    def has_consumer_group(self, name: str) -> bool:
        return name.lower() in self.consumer_groups

    def properties(self) -> dict[str, object]:
        return {
            "name": self.name,
            "type": "com.microsoft:eventhub",
            "created_at": amqp.Timestamp(self.created_ms),
            "partition_count": amqp.Int(len(self.partitions)),  # an AMQP int, as the service: the JVM SDKs cast it
            "partition_ids": amqp.Array("string", [p.id for p in self.partitions]),
        }


class Broker:
    """All hubs of one emulated namespace."""

    def __init__(self, max_message_size: int = 1024 * 1024) -> None:
        self.hubs: dict[str, Hub] = {}
        self.max_message_size = max_message_size
        self.capturer: Capturer | None = None

    def capture(self, capturer: Capturer) -> None:
        """Switch Capture on for the hubs it covers, those there now and those added later."""
        self.capturer = capturer
        for hub in self.hubs.values():
            self._capture_hub(hub)

    def _capture_hub(self, hub: Hub) -> None:
        if self.capturer is not None and self.capturer.covers(hub.name):
            hub.capturer = self.capturer
            for partition in hub.partitions:
                self.capturer.start_partition(partition)

    def add_hub(
        self,
        name: str,
        partitions: int,
        consumer_groups: list[str] | tuple[str, ...] = (),
        retention_s: float | None = None,
        geo_replicated: bool = False,
    ) -> Hub:
        if not name or "/" in name:
            raise ValueError(f"invalid hub name {name!r}: use letters, digits, '.', '-' or '_', e.g. 'telemetry'")
        if not 1 <= partitions <= 1024:
            raise ValueError(f"hub {name!r}: partition count must be between 1 and 1024, got {partitions}")
        key = name.lower()
        if key in self.hubs:
            raise ValueError(f"hub {name!r} already exists")
        hub = Hub(name=name, retention_s=retention_s, geo_replicated=geo_replicated)
        hub.consumer_groups.update(g.lower() for g in consumer_groups)
        hub.add_partitions(partitions)
        self.hubs[key] = hub
        self._capture_hub(hub)
        return hub

    def hub(self, name: str) -> Hub | None:
        return self.hubs.get(name.lower())

    def apply_retention(self, now_ms: int | None = None) -> int:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        removed = 0
        for hub in self.hubs.values():
            if hub.retention_s is not None:
                cutoff = now_ms - int(hub.retention_s * 1000)
                for p in hub.partitions:
                    removed += p.trim_older_than(cutoff)
        return removed
