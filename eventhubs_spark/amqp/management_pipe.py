"""Partition-properties requests pipelined on the SDK's open ``$management`` link, written and read here.

Each request is a transfer frame made from bytes built once per call, a window's worth in one write, within the
link's credit and the session's window; the answers are read off the same transport. The connection, the sign-in,
the links and every other frame stay the SDK's, whose counters move as it would move them.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any

from eventhubs_spark.amqp import sdk
from eventhubs_spark.amqp.messages import Unsupported, compound, scalar
from eventhubs_spark.errors import TransientError

_HEADER = struct.Struct(">IBBH").pack
_U32 = struct.Struct(">I").pack
_LONG = struct.Struct(">q").unpack_from
_TRANSFER = 0x14
_DISPOSITION = 0x15
_PROPERTIES, _APPLICATION_PROPERTIES, _AMQP_VALUE = 0x73, 0x74, 0x77
_ACCEPTED_CODE = 0x24
_ACCEPTED = b"\x00\x53\x24\x45"  # the accepted outcome: described, an empty list
_OUTCOMES = {_ACCEPTED_CODE: "accepted", 0x25: "rejected", 0x26: "released", 0x27: "modified"}


def _string(value: str | bytes) -> bytes:
    """An AMQP string (str8 up to 255 bytes, else str32)."""
    data = value.encode("utf-8") if isinstance(value, str) else value
    return (b"\xa1" + bytes((len(data),)) if len(data) < 256 else b"\xb1" + _U32(len(data))) + data


def _uint(value: int) -> bytes:
    return b"\x70" + _U32(value & 0xFFFFFFFF)


def request_payload(fixed_pairs: bytes, fixed_count: int, partition: str, message_id: bytes) -> bytes:
    """One ``$management`` request message: its properties (a message id, nothing else) and its application
    properties, ``fixed_pairs`` (``fixed_count`` encoded key-value pairs: the hub, the operation, the token)
    and the partition. No body, as the SDK sends it."""
    pairs = fixed_pairs + _string("partition") + _string(partition)
    count = 2 * fixed_count + 2
    application = b"\x00\x53\x74\xd1" + _U32(len(pairs) + 4) + _U32(count) + pairs
    properties = b"\x00\x53\x73\xc0\x12\x01\x98" + message_id  # a list of one: the message id, a UUID
    return properties + application


def fixed_pairs(pairs: dict[str, str]) -> bytes:
    """Encoded key-value pairs of the application properties every request of a call shares."""
    return b"".join(_string(key) + _string(value) for key, value in pairs.items())


def transfer_frame(channel: int, handle: int, delivery_id: int, tag: int, payload: bytes) -> bytes:
    """One unsettled transfer frame carrying ``payload`` whole (the fields the SDK sends; the rest left out,
    their defaults)."""
    performative = (
        b"\x00\x53\x14\xc0\x14\x05" + _uint(handle) + _uint(delivery_id) + b"\xa0\x04" + _U32(tag & 0xFFFFFFFF)
        + b"\x43\x42"
    )  # fmt: skip
    size = 8 + len(performative) + len(payload)
    return _HEADER(size, 2, 0, channel) + performative + payload


def disposition_frame(channel: int, first: int, last: int) -> bytes:
    """Settles (accepted) this side's receipt of deliveries ``first`` to ``last``."""
    fields = b"\x41" + _uint(first) + _uint(last) + b"\x41" + _ACCEPTED
    performative = b"\x00\x53\x15\xc0" + bytes((len(fields) + 1, 5)) + fields
    return _HEADER(8 + len(performative), 2, 0, channel) + performative


def value(buf: bytes, p: int) -> tuple[Any, int]:
    """Any AMQP value at ``buf[p]`` as the SDK gives it (strings and symbols as bytes, maps as dicts, lists as
    lists, a described value as its value); raises :class:`Unsupported` for what this reader leaves to the SDK
    (arrays, decimals)."""
    c = buf[p]
    if c == 0x00:
        _descriptor, p = value(buf, p + 1)
        return value(buf, p)
    if c == 0xC1 or c == 0xD1:
        count, q, end = compound(buf, p)
        mapping = {}
        for _ in range(count // 2):
            key, q = value(buf, q)
            mapping[key], q = value(buf, q)
        return mapping, end
    if c == 0xC0 or c == 0xD0 or c == 0x45:
        count, q, end = compound(buf, p)
        items = []
        for _ in range(count):
            item, q = value(buf, q)
            items.append(item)
        return items, end
    return scalar(buf, p)


@dataclass
class Reply:
    """One answer: its correlation id, status, description and body (the SDK's forms)."""

    correlation: Any
    status: int
    description: str
    body: Any


def _flat_map(buf: bytes, p: int) -> tuple[dict[Any, Any], int]:
    """A map of scalars at ``buf[p]`` as :func:`value` gives it, read in one loop (a partition's answer is one: 16
    keys and values); Unsupported when a value is a compound, which :func:`value` reads."""
    count, q, end = compound(buf, p)
    if buf[p] == 0x45 or buf[p] == 0xC0 or buf[p] == 0xD0:
        raise Unsupported("a list")
    out: dict[Any, Any] = {}
    for _ in range(count >> 1):
        if buf[q] == 0xA1 or buf[q] == 0xA3:  # the keys the service writes: str8 and sym8
            n = buf[q + 1]
            key: Any = buf[q + 2 : q + 2 + n]
            q += 2 + n
        else:
            key, q = scalar(buf, q)
        c = buf[q]
        if c == 0xA1:  # a string value (names, ids, offsets)
            n = buf[q + 1]
            out[key] = buf[q + 2 : q + 2 + n]
            q += 2 + n
        elif c == 0x81 or c == 0x83:  # a long (sequence numbers) or a timestamp (enqueued times)
            out[key] = _LONG(buf, q + 1)[0]
            q += 9
        else:
            out[key], q = scalar(buf, q)
    return out, end


def _reply_sections(message: bytes) -> tuple[Any, dict[Any, Any], Any]:
    """(correlation id, application properties, body) of an answer laid out as the service and the emulator lay
    one out: properties, application properties of scalars, a body that is a map of scalars or a scalar; anything
    else is Unsupported. A partition's answer takes 8 us here against 10.5 reading every value (:func:`value`),
    and a trigger of a 1,024-partition hub reads 1,024 of them."""
    correlation: Any = None
    application: dict[Any, Any] = {}
    body: Any = None
    p, end = 0, len(message)
    while p < end:
        if message[p] != 0x00 or message[p + 1] != 0x53:
            raise Unsupported("a section without a small descriptor")
        code = message[p + 2]
        p += 3
        if code == _PROPERTIES:
            count, q, after = compound(message, p)
            for _ in range(min(count, 5)):  # message id, user id, to, subject, reply to: passed over
                q = scalar(message, q)[1]
            if count > 5:
                correlation, _q = scalar(message, q)
            p = after
        elif code == _APPLICATION_PROPERTIES:
            application, p = _flat_map(message, p)
        elif code == _AMQP_VALUE:
            if message[p] in (0xC1, 0xD1):
                body, p = _flat_map(message, p)
            else:
                body, p = scalar(message, p)
        else:
            raise Unsupported(f"section 0x{code:02x}")
    return correlation, application, body


def decode_reply(message: bytes) -> Reply:
    """A ``$management`` answer's correlation id, status code and description (application properties, under
    the names the service uses) and body (an AMQP value)."""
    try:
        correlation, application, body = _reply_sections(message)
    except (Unsupported, IndexError, ValueError, struct.error):
        correlation, application, body = _any_reply_sections(message)
    status = application.get(b"status-code", application.get(b"statusCode"))
    description = application.get(b"status-description", application.get(b"statusDescription", b""))
    if isinstance(description, bytes):
        description = description.decode("utf-8", "replace")
    return Reply(correlation, int(status) if status is not None else 500, str(description or ""), body)


def _any_reply_sections(message: bytes) -> tuple[Any, dict[Any, Any], Any]:
    """:func:`_reply_sections` for any layout: every value read (:func:`value`), else the SDK's decoder."""
    try:
        properties: list[Any] = []
        application: dict[Any, Any] = {}
        body = None
        p, end = 0, len(message)
        while p < end:
            if message[p] != 0x00 or message[p + 1] != 0x53:
                raise Unsupported("a section without a small descriptor")
            code = message[p + 2]
            section, p = value(message, p + 3)
            if code == _PROPERTIES:
                properties = section
            elif code == _APPLICATION_PROPERTIES:
                application = section
            elif code == _AMQP_VALUE:
                body = section
        correlation = properties[5] if len(properties) > 5 else None
    except (Unsupported, IndexError, ValueError, struct.error):
        decoded = sdk.decode_message(message)
        correlation = getattr(decoded.properties, "correlation_id", None)
        application = dict(decoded.application_properties or {})
        body = decoded.value
    return correlation, application, body


class ManagementPipe:
    """Requests of one call, pipelined on an open management client's links (see the module's text)."""

    def __init__(self, wire: sdk.ManagementWire) -> None:
        self.wire = wire
        self.most_in_flight = 0
        self.written = 0  # requests sent, over the pipe's life (for tests)
        self.credit_renewals = 0  # times the response link was given credit again (for tests)
        self._partial = bytearray()  # an answer's frames so far, when it spans several
        self._first: list[Any] | None = None

    @classmethod
    def of(cls, mgmt: Any) -> ManagementPipe | None:
        """A pipe on ``mgmt``'s ``$management`` links, or None before a first request through the SDK made them
        (or when the installed SDK lacks an internal the pipe needs: then the SDK's own path is used)."""
        wire = sdk.management_wire(mgmt)
        return None if wire is None else cls(wire)

    async def ask(self, shared: dict[str, str], partitions: list[str], window: int) -> list[Reply]:
        """Each partition's answer, in ``partitions``' order. ``shared``: the application properties every
        request carries (hub name, operation, type, token); at most ``window`` unanswered at once. Raises
        :class:`~eventhubs_spark.errors.TransientError` when the link or connection went away or a request
        was refused: the caller reconnects and asks again."""
        wire = self.wire
        count = len(partitions)
        prefix = os.urandom(8)  # this call's answers, told from a timed-out call's late ones
        pairs, pair_count = fixed_pairs(shared), len(shared)
        replies: list[Reply | None] = [None] * count
        sent = answered = 0
        our_ids: dict[int, int] = {}  # delivery id of a request of this call -> its index
        unsettled: list[int] = []  # delivery ids of answers the service sent unsettled
        longest = max(partitions, key=len, default="")
        largest = len(transfer_frame(0, 0, 0, 0, request_payload(pairs, pair_count, longest, bytes(16))))
        if largest > sdk.remote_max_frame_size(wire.connection):
            raise Unsupported(f"a request of {largest} bytes is over the service's frame size: left to the SDK")
        source = sdk.FrameSource(wire.transport)
        try:
            while answered < count:
                in_flight = sent - answered
                room = min(window, wire.request.current_link_credit, wire.session.remote_incoming_window) - in_flight
                # refill in runs (at least half a window, or the rest), one write each
                if sent < count and room > 0 and (room >= window // 2 or count - sent <= room or in_flight == 0):
                    run = min(room, count - sent)
                    if await sdk.keep_answers_coming(wire.response, 2 * window):
                        self.credit_renewals += 1
                    frames = []
                    for index in range(sent, sent + run):
                        payload = request_payload(
                            pairs, pair_count, partitions[index], prefix + index.to_bytes(8, "big")
                        )
                        delivery_id = wire.session.next_outgoing_id
                        frame = transfer_frame(
                            wire.session.channel,
                            wire.request.handle,
                            delivery_id,
                            wire.request.delivery_count + 1,
                            payload,
                        )
                        frames.append(frame)
                        our_ids[delivery_id & 0xFFFFFFFF] = index
                        sdk.count_sent(wire.session, wire.request)
                    await sdk.write(wire, b"".join(frames))
                    sent += run
                    self.written += run
                    self.most_in_flight = max(self.most_in_flight, sent - answered)
                answered += await self._next_frame(source, prefix, count, replies, our_ids, unsettled)
                if unsettled and (answered == count or len(unsettled) >= window // 2):
                    await self._settle(unsettled)
        finally:
            source.stop()
        return [reply for reply in replies if reply is not None]

    async def _next_frame(
        self,
        source: sdk.FrameSource,
        prefix: bytes,
        count: int,
        replies: list[Reply | None],
        our_ids: dict[int, int],
        unsettled: list[int],
    ) -> int:
        """Read one frame: an answer of this call (1 returned), a disposition of its requests, or anything else,
        which goes to the SDK. Raises TransientError when the links or the connection are no longer usable."""
        wire = self.wire
        channel, body = await source.next()
        sdk.note_frame_received(wire.connection)
        if body is None:
            return 0  # a heartbeat
        data = bytes(body)
        ours = sdk.session_at(wire.connection, channel) is wire.session
        if ours and len(data) > 3 and data[0] == 0 and data[1] == 0x53:
            performative = data[2]
            if performative == _TRANSFER:
                fields, end = _fields(data, 6)
                if fields[0] == wire.response.remote_handle:
                    more = bool(fields[5])
                    await sdk.count_received(wire.session, wire.response, more)
                    if fields[1] is not None:
                        self._first = fields  # an answer over several frames: its first frame's id and flags
                    self._partial += data[end:]
                    if more:
                        return 0
                    first, message = self._first, bytes(self._partial)
                    self._partial.clear()
                    if first is not None and not first[4] and first[1] is not None:
                        unsettled.append(first[1])
                    reply = decode_reply(message)
                    correlation = getattr(reply.correlation, "bytes", None)
                    if correlation is not None and correlation[:8] == prefix:
                        index = int.from_bytes(correlation[8:], "big")
                        if index < count and replies[index] is None:
                            replies[index] = reply
                            return 1
                    return 0  # a late answer of an earlier call that timed out
            elif performative == _DISPOSITION:
                fields, _end = _fields(data, 5)
                first, last = fields[1], fields[2] if fields[2] is not None else fields[1]
                if fields[0] and first in our_ids and last in our_ids:
                    state = fields[4]  # the outcome's descriptor, None when the disposition has no state
                    if state is not None and state != _ACCEPTED_CODE:
                        outcome = _OUTCOMES.get(state, f"outcome {state!r}")
                        raise TransientError(f"the service answered a management request with {outcome}")
                    return 0
        await sdk.process_frame(wire.connection, channel, body)
        broken = sdk.management_broken(wire)
        if broken is not None:
            raise TransientError(f"the management link went away: {broken}")
        return 0

    async def _settle(self, unsettled: list[int]) -> None:
        """Accept the answers the service sent unsettled, one disposition per run of consecutive ids."""
        ids = sorted(unsettled)
        unsettled.clear()
        frames, first = [], ids[0]
        for prev, cur in zip(ids, [*ids[1:], None], strict=True):
            if cur != prev + 1:
                frames.append(disposition_frame(self.wire.session.channel, first, prev))
                first = cur if cur is not None else first
        await sdk.write(self.wire, b"".join(frames))


def _fields(data: bytes, wanted: int) -> tuple[list[Any], int]:
    """The first ``wanted`` fields of a performative (missing ones None; a compound one None; a described one, such
    as a disposition's outcome, its descriptor) and where the performative ends (a transfer's message starts there)."""
    count, p, end = compound(data, 3)
    fields: list[Any] = []
    for _ in range(min(count, wanted)):
        c = data[p]
        if c == 0x00:
            descriptor, _after = scalar(data, p + 1)
            _ignored, p = value(data, p)
            fields.append(descriptor)
        elif c in (0xC0, 0xC1, 0xD0, 0xD1, 0x45):
            _ignored, p = value(data, p)
            fields.append(None)
        else:
            item, p = scalar(data, p)
            fields.append(item)
    fields.extend([None] * (wanted - len(fields)))
    return fields, end
