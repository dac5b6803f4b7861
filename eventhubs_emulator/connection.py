"""The emulator's AMQP 1.0 framing on asyncio: connections, sessions, links and deliveries.

A :class:`Connection` cuts frames from its socket, keeps its sessions and links and answers attach,
flow, transfer and detach as the service does; what a link is for (a hub, a partition, ``$cbs``,
``$management``) and every rule of the service are the :class:`~eventhubs_emulator.server.Server`'s.
Deliveries to consumers are written in bursts, pre-settled as the service does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from . import amqp
from .amqp import Described, Symbol, UInt, ULong, UShort

if TYPE_CHECKING:
    from .broker import Hub, Partition

_LOG = logging.getLogger("eventhubs_emulator")

_I = struct.Struct(">I")
# A single-frame pre-settled transfer's head: frame header (size; doff, type, channel), the link's fixed prefix
# (descriptor, list header, handle), delivery-id, delivery-tag (binary, 4 bytes), message-format 0, settled,
# more=false and five nulls.
_RUN_HEAD = struct.Struct(">I4s12sI2sI8s")
_RUN_TAIL = b"\x43\x41\x42\x40\x40\x40\x40\x40"
_FRAME_HEADER = struct.Struct(">IBBH")
RUNTIME_METRIC = "com.microsoft:enable-receiver-runtime-metric"
GEO_REPLICATION = "com.microsoft:georeplication"  # the SDKs ask for it; offered back on geo-replicated hubs
_SEND_CREDIT = 1000
_INCOMING_WINDOW = 1_000_000


class LinkError(Exception):
    """An AMQP error to answer an attach with (the link is detached carrying it)."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


# --- links -----------------------------------------------------------------------------------------


class Link:
    def __init__(self, session: Session, name: str, remote_handle: int, handle: int) -> None:
        self.session = session
        self.name = name
        self.remote_handle = remote_handle
        self.handle = handle
        self.detached = False
        self.source_address: str = ""
        self.target_address: str = ""


class InLink(Link):
    """The server's receiving end: a client sends events, cbs or management requests on it."""

    def __init__(self, session: Session, name: str, remote_handle: int, handle: int, kind: str) -> None:
        super().__init__(session, name, remote_handle, handle)
        self.kind = kind  # "cbs" | "management" | "events"
        self.hub: Hub | None = None
        self.partition: Partition | None = None
        self.delivery_count = 0
        self.credit = 0
        self.partial = bytearray()
        self.partial_size = 0
        self.partial_first: list[Any] | None = None
        self.last_send: Any = None  # the server's StoredSend of the last message stored from this link
        self.server_detached = False  # the server detached it (not the client letting go)


class OutLink(Link):
    """The server's sending end: events to a consumer, or replies on `$cbs`/`$management`."""

    def __init__(self, session: Session, name: str, remote_handle: int, handle: int, kind: str) -> None:
        super().__init__(session, name, remote_handle, handle)
        self.kind = kind  # "reply" | "events"
        self.credit = 0
        self.delivery_count = 0
        self.next_tag = 0
        self.pending: list[bytes] = []
        # events links only
        self.hub: Hub | None = None
        self.partition: Partition | None = None
        self.consumer_group = ""
        self.next_ordinal = 0  # the next event's place in its partition's log
        self.epoch: int | None = None
        self.runtime_metrics = False
        self.georeplication = False  # asked for com.microsoft:georeplication on a geo-replicated hub
        self.pump_scheduled = False
        self.prefix = b""
        self.notify: Callable[[], None] | None = None
        self.last_activity = time.monotonic()  # a delivery or credit from the client: the idle timer

    def key(self) -> tuple[str, str, str]:
        assert self.hub is not None and self.partition is not None
        return (self.hub.name.lower(), self.consumer_group, self.partition.id)


class Session:
    def __init__(self, conn: Connection, channel: int, next_incoming_id: int, remote_incoming_window: int) -> None:
        self.conn = conn
        self.channel = channel
        self.next_outgoing_id = 0
        self.next_incoming_id = next_incoming_id
        self.incoming_window = _INCOMING_WINDOW
        self.remote_incoming_window = remote_incoming_window
        self.links_by_remote: dict[int, Link] = {}
        self.next_handle = 0

    def reply_link(self, node: str) -> OutLink | None:
        for link in self.links_by_remote.values():
            if isinstance(link, OutLink) and link.kind == "reply" and link.source_address == node:
                return link
        return None


@dataclasses.dataclass(frozen=True)
class EncodedSection:
    """A message section already encoded (an answer's body the service keeps encoded while it stays the same)."""

    data: bytes


# --- what a connection asks of the service --------------------------------------------------------------


class Service(Protocol):
    """The service behind the connections (:class:`~eventhubs_emulator.server.Server`): what each link is
    for and the service's rules. A connection frames, keeps sessions and links, and asks this for the rest."""

    host: str
    idle_timeout: float
    max_frame_size: int
    unsettled_answers: bool  # management answers go unsettled (a fault control)
    stats: dict[str, int]

    @property
    def max_message_size(self) -> int: ...

    def connected(self, conn: Connection) -> None: ...

    def disconnected(self, conn: Connection) -> None: ...

    def open_consumer(self, conn: Connection, link: OutLink, source: list[Any], attach: list[Any]) -> None: ...

    def open_producer(self, conn: Connection, link: InLink) -> None: ...

    def forget_link(self, link: Link) -> None: ...

    def schedule_pump(self, link: OutLink) -> None: ...

    def accept_events(self, link: InLink, data: bytes, message_format: int) -> None: ...

    def answer_lost(self, link: InLink) -> bool: ...

    def on_cbs(self, conn: Connection, session: Session, data: bytes) -> None: ...

    def on_management(self, conn: Connection, session: Session, data: bytes) -> None: ...


# --- connection ------------------------------------------------------------------------------------


class Connection(asyncio.Protocol):
    def __init__(self, server: Service) -> None:
        self.server = server
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.stage = "header"
        self.sessions: dict[int, Session] = {}
        self.remote_max_frame = 512
        self.paused = False
        self.closed = False
        self.authorized: list[tuple[str, float]] = []  # (audience path, expiry)
        self.last_received = self.last_sent = time.monotonic()
        self.remote_idle_timeout: float | None = None  # seconds; the peer wants a frame at least this often
        # The namespace as the client addressed it (the host in its OPEN, the port it reached), for the
        # service's error texts: "The messaging entity 'sb://<namespace>/<hub>' could not be found".
        self.namespace = server.host
        self.number = 0  # set by the server when the connection is made, from 1
        # A black hole (Server.black_hole): nothing read is processed and nothing is written, the socket stays
        # open (no FIN); when it ends, what was held goes through in order, as a network that heals delivers it.
        self.holed = False
        self.hole_heals = False  # the hole has an end (Server.black_hole with seconds)
        self._lost_in_hole = False
        self._held_in = bytearray()
        self._held_out: list[bytes] = []
        self._out: list[bytes] | None = None  # writes held while a read's frames are processed (data_received)

    # -- asyncio callbacks --
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.connected(self)
        local = transport.get_extra_info("sockname")
        self._local_port = local[1] if isinstance(local, tuple) and len(local) >= 2 else None
        self.namespace = self._address(self.server.host)

    def _address(self, host: str) -> str:
        return f"{host}:{self._local_port}" if self._local_port else host

    def connection_lost(self, exc: Exception | None) -> None:
        if self.holed and self.hole_heals:
            # The peer closed while the network held its bytes: a network that heals delivers what it sent before
            # it closed, then the close (a send it gave up on may be stored all the same). Nothing goes back.
            self.transport = None
            self._lost_in_hole = True
            return
        self._lost()

    def _lost(self) -> None:
        self.closed = True
        self.server.disconnected(self)
        for session in list(self.sessions.values()):
            self._drop_session(session)
        self.sessions.clear()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        for session in self.sessions.values():
            for link in session.links_by_remote.values():
                if isinstance(link, OutLink) and link.kind == "events":
                    self.server.schedule_pump(link)

    def data_received(self, data: bytes) -> None:
        if self.holed:
            self._held_in += data
            return
        self.last_received = time.monotonic()
        self.buffer += data
        # What the frames just read make the emulator write goes out in one write when they are all processed
        # (a client that pipelines 64 management requests gets 128 frames back in one send, not 128 sends).
        self._out = []
        try:
            self._process()
        except Exception as exc:  # a protocol error ends this connection, never the emulator
            _LOG.exception("closing connection after a protocol error")
            self._close_with_error("amqp:internal-error", f"emulator error: {exc}")
        finally:
            self._flush_out()

    def _flush_out(self) -> None:
        out, self._out = self._out, None
        if out and self.transport is not None and not self.closed:
            self.transport.write(b"".join(out))

    # -- parsing --
    def _process(self) -> None:
        buf = self.buffer
        while not self.closed:
            if self.stage in ("header", "amqp-header"):
                if len(buf) < 8:
                    return
                header = bytes(buf[:8])
                del buf[:8]
                if header == amqp.SASL_HEADER and self.stage == "header":
                    self.write(amqp.SASL_HEADER)
                    mechanisms = amqp.encode_performative(
                        amqp.SASL_MECHANISMS, [amqp.Array("symbol", ["ANONYMOUS", "MSSBCBS", "PLAIN"])]
                    )
                    self.write(amqp.encode_frame(0, mechanisms, frame_type=1))
                    self.stage = "sasl"
                elif header == amqp.AMQP_HEADER:
                    self.write(amqp.AMQP_HEADER)
                    self.stage = "open"
                else:
                    self.write(amqp.AMQP_HEADER)
                    self._abort()
                    return
                continue
            if len(buf) < 8:
                return
            size, doff, _frame_type, channel = _FRAME_HEADER.unpack_from(buf, 0)
            if len(buf) < size:
                return
            body = bytes(buf[doff * 4 : size])
            del buf[:size]
            if not body:
                continue  # heartbeat
            if self.stage == "sasl":
                code, _, _ = amqp.decode_performative(body)
                if code == amqp.SASL_INIT:
                    outcome = amqp.encode_performative(amqp.SASL_OUTCOME, [UByte0, None])
                    self.write(amqp.encode_frame(0, outcome, frame_type=1))
                    self.stage = "amqp-header"
                continue
            self._frame(channel, body)

    def _frame(self, channel: int, body: bytes) -> None:
        code, fields, payload_pos = amqp.decode_performative(body)
        if code == amqp.TRANSFER:
            session = self.sessions.get(channel)
            if session is not None:
                self._on_transfer(session, fields, body[payload_pos:])
        elif code == amqp.FLOW:
            session = self.sessions.get(channel)
            if session is not None:
                self._on_flow(session, fields)
        elif code == amqp.DISPOSITION:
            # the emulator sends everything pre-settled, but management answers when told otherwise
            # (Server.unsettled_answers): the client's settlements of those are counted
            if fields and fields[0] and len(fields) > 3 and fields[3]:
                first = int(fields[1])
                last = int(fields[2]) if fields[2] is not None else first
                self.server.stats["answers_settled_by_client"] += last - first + 1
        elif code == amqp.ATTACH:
            session = self.sessions.get(channel)
            if session is not None:
                self._on_attach(session, fields)
        elif code == amqp.DETACH:
            session = self.sessions.get(channel)
            if session is not None:
                self._on_detach(session, fields)
        elif code == amqp.BEGIN:
            self._on_begin(channel, fields)
        elif code == amqp.END:
            session = self.sessions.pop(channel, None)
            if session is not None:
                self._drop_session(session)
                self.send(channel, amqp.END, [None])
        elif code == amqp.OPEN:
            if isinstance(fields[1], str) and fields[1]:
                self.namespace = self._address(fields[1].split("/")[0])
            self.remote_max_frame = fields[2] if len(fields) > 2 and fields[2] else 4294967295
            if len(fields) > 4 and fields[4]:
                self.remote_idle_timeout = int(fields[4]) / 1000
            idle = self.server.idle_timeout
            self.send(
                0,
                amqp.OPEN,
                [
                    "eventhubs-spark-emulator",
                    None,
                    UInt(self.server.max_frame_size),
                    UShort(65535),
                    UInt(int(idle * 1000)) if idle > 0 else None,
                    None,
                    None,
                    None,
                    None,
                    None,
                ],
            )
        elif code == amqp.CLOSE:
            self.send(0, amqp.CLOSE, [None])
            self._close_transport()

    # -- writing --
    def end_hole(self) -> None:
        """The black hole ends: what the peer sent meanwhile is read, what was held for it is sent."""
        if not self.holed:
            return
        self.holed = False
        held_out, self._held_out = self._held_out, []
        for data in held_out:
            self.write(data)
        held_in, self._held_in = bytes(self._held_in), bytearray()
        if held_in and not self.closed:
            self.data_received(held_in)
        if self._lost_in_hole:
            self._lost()
            return
        self.resume_writing()  # the consumers' pumps go on

    def write(self, data: bytes) -> None:
        if self.holed:
            self._held_out.append(data)
            return
        if self.transport is not None and not self.closed:
            self.last_sent = time.monotonic()
            if self._out is not None:
                self._out.append(data)
            else:
                self.transport.write(data)

    def send(self, channel: int, code: int, fields: list[Any], payload: bytes = b"") -> None:
        self.write(amqp.encode_frame(channel, amqp.encode_performative(code, fields), payload))

    def _close_transport(self) -> None:
        self._flush_out()
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _abort(self) -> None:
        self._flush_out()
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _close_with_error(self, condition: str, description: str) -> None:
        if self.transport is not None and not self.closed:
            self.send(0, amqp.CLOSE, [amqp.encode_error(condition, description)])
            self._close_transport()

    # -- sessions --
    def _on_begin(self, channel: int, fields: list[Any]) -> None:
        session = Session(self, channel, next_incoming_id=fields[1] or 0, remote_incoming_window=fields[2] or 0)
        self.sessions[channel] = session
        self.send(
            channel,
            amqp.BEGIN,
            [
                UShort(channel),
                UInt(0),
                UInt(_INCOMING_WINDOW),
                UInt(_INCOMING_WINDOW),
                UInt(4294967295),
                None,
                None,
                None,
            ],
        )

    def _drop_session(self, session: Session) -> None:
        for link in list(session.links_by_remote.values()):
            self.server.forget_link(link)
        session.links_by_remote.clear()

    def _on_flow(self, session: Session, fields: list[Any]) -> None:
        next_incoming_id = fields[0] if fields[0] is not None else 0
        session.remote_incoming_window = next_incoming_id + (fields[1] or 0) - session.next_outgoing_id
        handle = fields[4]
        if handle is None:
            for any_link in session.links_by_remote.values():
                if isinstance(any_link, OutLink) and any_link.kind == "events":
                    self.server.schedule_pump(any_link)
            return
        out = session.links_by_remote.get(handle)
        if isinstance(out, OutLink):
            out.last_activity = time.monotonic()
            delivery_count = fields[5] if fields[5] is not None else out.delivery_count
            out.credit = delivery_count + (fields[6] or 0) - out.delivery_count
            if out.kind == "events":
                self.server.schedule_pump(out)
            else:
                self._flush_replies(out)

    # -- links --
    def _on_attach(self, session: Session, fields: list[Any]) -> None:
        name, remote_handle, role = fields[0], fields[1], fields[2]
        source = fields[5].value if isinstance(fields[5], Described) else fields[5]
        target = fields[6].value if isinstance(fields[6], Described) else fields[6]
        source_address = _address(source)
        target_address = _address(target)
        handle = session.next_handle
        session.next_handle += 1
        link: Link
        error: LinkError | None = None
        reply_source = fields[5]
        if role:  # the client receives: the server sends
            out = OutLink(session, name, remote_handle, handle, "reply")
            out.source_address = source_address
            out.target_address = target_address
            link = out
            if source_address not in ("$cbs", "$management"):
                out.kind = "events"
                try:
                    self.server.open_consumer(self, out, source or [], fields)
                except LinkError as exc:
                    error = exc
        else:  # the client sends
            kind = "cbs" if target_address == "$cbs" else "management" if target_address == "$management" else "events"
            inl = InLink(session, name, remote_handle, handle, kind)
            inl.source_address = source_address
            inl.target_address = target_address
            inl.delivery_count = fields[9] or 0
            link = inl
            if kind == "events":
                try:
                    self.server.open_producer(self, inl)
                except LinkError as exc:
                    error = exc
        session.links_by_remote[remote_handle] = link
        offered = None
        if isinstance(link, OutLink):
            wanted = ((RUNTIME_METRIC, link.runtime_metrics), (GEO_REPLICATION, link.georeplication))
            offered = [Symbol(c) for c, on in wanted if on] or None
        self.send(
            session.channel,
            amqp.ATTACH,
            [
                name,
                UInt(handle),
                not role,
                UByte1 if role else UByte0,  # settled deliveries toward receivers, as the service
                UByte0,
                _reencode_terminus(reply_source, amqp.SOURCE),
                _reencode_terminus(fields[6], amqp.TARGET),
                None,
                False,
                UInt(0) if role else None,
                ULong(self.server.max_message_size),
                amqp.Array("symbol", offered) if offered else None,
                None,
                None,
            ],
        )
        if error is not None:
            self.detach(link, error.condition, error.description)
            return
        if isinstance(link, InLink):
            self._grant(link)

    def _grant(self, link: InLink) -> None:
        link.credit = _SEND_CREDIT
        s = link.session
        self.send(
            s.channel,
            amqp.FLOW,
            [
                UInt(s.next_incoming_id),
                UInt(s.incoming_window),
                UInt(s.next_outgoing_id),
                UInt(_INCOMING_WINDOW),
                UInt(link.handle),
                UInt(link.delivery_count),
                UInt(link.credit),
                None,
                False,
                False,
                None,
            ],
        )

    def detach(self, link: Link, condition: str | None, description: str = "") -> None:
        """Detach a link from the server side, with an error unless ``condition`` is None."""
        if link.detached:
            return
        link.detached = True
        if isinstance(link, InLink):
            link.server_detached = True
        self.server.forget_link(link)
        error = amqp.encode_error(condition, description) if condition else None
        self.send(link.session.channel, amqp.DETACH, [UInt(link.handle), True, error])

    def _on_detach(self, session: Session, fields: list[Any]) -> None:
        link = session.links_by_remote.pop(fields[0], None)
        if link is None:
            return
        if not link.detached:
            link.detached = True
            self.server.forget_link(link)
            self.send(session.channel, amqp.DETACH, [UInt(link.handle), True, None])

    # -- transfers from the client --
    def _on_transfer(self, session: Session, fields: list[Any], payload: bytes) -> None:
        session.next_incoming_id += 1
        session.incoming_window -= 1
        if session.incoming_window < _INCOMING_WINDOW // 2:
            session.incoming_window = _INCOMING_WINDOW
            self.send(
                session.channel,
                amqp.FLOW,
                [
                    UInt(session.next_incoming_id),
                    UInt(session.incoming_window),
                    UInt(session.next_outgoing_id),
                    UInt(_INCOMING_WINDOW),
                    None,
                    None,
                    None,
                    None,
                    False,
                    False,
                    None,
                ],
            )
        link = session.links_by_remote.get(fields[0])
        if not isinstance(link, InLink) or link.detached:
            return
        if link.partial_first is None:
            link.partial_first = fields
        limit = self.server.max_message_size
        link.partial_size += len(payload)
        if link.partial_size <= limit + 65536:
            link.partial += payload
        if fields[5]:  # more frames follow
            return
        first = link.partial_first
        data = bytes(link.partial)
        size = link.partial_size
        link.partial = bytearray()
        link.partial_size = 0
        link.partial_first = None
        link.delivery_count += 1
        link.credit -= 1
        delivery_id = first[1]
        settled = bool(first[4])
        try:
            if link.kind == "events":
                if size > limit:
                    raise LinkError(
                        "amqp:link:message-size-exceeded",
                        f"The received message (delivery-id:{delivery_id}, size:{size} bytes) exceeds the limit "
                        f"({limit} bytes) currently allowed on the link.",
                    )
                self.server.accept_events(link, data, first[3] or 0)
            elif link.kind == "cbs":
                self.server.on_cbs(self, session, data)
            else:
                self.server.on_management(self, session, data)
            state = Described(ULong(amqp.ACCEPTED), [])
        except LinkError as exc:
            state = Described(ULong(amqp.REJECTED), [amqp.encode_error(exc.condition, exc.description)])
        except Exception as exc:
            _LOG.exception("could not process a message")
            state = Described(ULong(amqp.REJECTED), [amqp.encode_error("amqp:decode-error", str(exc))])
        if link.kind == "events" and self.server.answer_lost(link):
            # stored, and the answer lost with its connection: the client cannot know, until it asks
            self.holed, self.hole_heals = True, False
            return
        if not settled:
            self.send(session.channel, amqp.DISPOSITION, [True, UInt(delivery_id), None, True, state, None])
        if link.credit < _SEND_CREDIT // 2:
            self._grant(link)

    def reply(
        self, session: Session, node: str, request_props: list[Any], app: dict[str, Any] | bytes, body: Any
    ) -> None:
        """Answer a request on node ``$cbs`` or ``$management`` on the session's reply link for it. ``app``: the
        application properties, or their section already encoded (the same for every answer that went well);
        ``body``: the answer's value, or its section already encoded (an :class:`EncodedSection`)."""
        message_id = request_props[0] if request_props else None
        # the correlation id is the properties' sixth field; the ones after it are null and left out, as AMQP allows
        reply_props = [None, None, None, None, None, message_id]
        application = app if isinstance(app, bytes) else amqp.encode_section(amqp.APPLICATION_PROPERTIES, app)
        message = amqp.encode_section(amqp.PROPERTIES, reply_props) + application
        if isinstance(body, EncodedSection):
            message += body.data
        elif body is not None:
            message += amqp.encode_section(amqp.AMQP_VALUE, body)
        link = session.reply_link(node)
        if link is None:
            _LOG.warning("no reply link on node %s; dropping the reply", node)
            return
        link.pending.append(message)
        self._flush_replies(link)

    def _flush_replies(self, link: OutLink) -> None:
        settled = not (self.server.unsettled_answers and link.source_address == "$management")
        while link.pending and link.credit > 0 and not link.detached:
            self.write(self.encode_delivery(link, link.pending.pop(0), settled))

    def encode_run(self, link: OutLink, payloads: list[bytes]) -> bytes | None:
        """A run of pre-settled deliveries on ``link``, each in one frame, as one write; None (nothing counted) when
        one of them needs more than a frame: the caller sends them one by one (:meth:`encode_delivery`). The
        caller also sees that the session's window and the link's credit take the whole run.

        Why: encoding one delivery at a time cost the emulator about 2 µs of CPU per event, a core's worth at
        500k events/s; benchmarks run it on the same two cores as the reader they measure. Here each frame's 38
        bytes of head are one struct pack."""
        prefix = _transfer_prefix(link)
        room = max(512, min(self.remote_max_frame, 4294967295) - _RUN_HEAD.size)
        if not payloads or max(map(len, payloads)) > room:
            return None
        session = link.session
        count = len(payloads)
        first_id, first_tag = session.next_outgoing_id, link.next_tag
        session.next_outgoing_id += count
        session.remote_incoming_window -= count
        link.next_tag = (first_tag + count) & 0xFFFFFFFF
        link.credit -= count
        link.delivery_count += count
        pack, size = _RUN_HEAD.pack, _RUN_HEAD.size
        doff_type_channel = b"\x02\x00" + session.channel.to_bytes(2, "big")
        return b"".join(
            [
                pack(size + len(p), doff_type_channel, prefix, first_id + i, b"\xa0\x04",
                     (first_tag + i) & 0xFFFFFFFF, _RUN_TAIL) + p
                for i, p in enumerate(payloads)
            ]
        )  # fmt: skip

    def encode_delivery(self, link: OutLink, payload: bytes, settled: bool = True) -> bytes:
        session = link.session
        delivery_id = session.next_outgoing_id
        tag = link.next_tag
        link.next_tag = (tag + 1) & 0xFFFFFFFF
        link.credit -= 1
        link.delivery_count += 1
        prefix = _transfer_prefix(link)
        ids = _I.pack(delivery_id) + b"\xa0\x04" + _I.pack(tag) + (b"\x43\x41" if settled else b"\x43\x42")
        head_len = 8 + len(prefix) + len(ids) + 6
        room = max(512, min(self.remote_max_frame, 4294967295) - head_len)
        channel = session.channel
        if len(payload) <= room:
            session.next_outgoing_id += 1
            session.remote_incoming_window -= 1
            return (
                _FRAME_HEADER.pack(head_len + len(payload), 2, 0, channel)
                + prefix
                + ids
                + b"\x42\x40\x40\x40\x40\x40"
                + payload
            )
        parts = []
        view = memoryview(payload)
        for start in range(0, len(payload), room):
            chunk = view[start : start + room]
            more = b"\x41" if start + room < len(payload) else b"\x42"
            parts.append(
                _FRAME_HEADER.pack(head_len + len(chunk), 2, 0, channel)
                + prefix
                + ids
                + more
                + b"\x40\x40\x40\x40\x40"
                + bytes(chunk)
            )
            session.remote_incoming_window -= 1
        session.next_outgoing_id += 1
        return b"".join(parts)


def _transfer_prefix(link: OutLink) -> bytes:
    """The bytes every TRANSFER on ``link`` begins with (descriptor, list header, handle), made once per link."""
    if not link.prefix:
        link.prefix = b"\x00\x53\x14\xc0\x19\x0b\x70" + _I.pack(link.handle) + b"\x70"
    return link.prefix


UByte0 = amqp.UByte(0)
UByte1 = amqp.UByte(1)


def _address(terminus: Any) -> str:
    if isinstance(terminus, list) and terminus:
        value = terminus[0]
        if isinstance(value, bytes):
            return value.decode("utf-8")
        return str(value) if value is not None else ""
    return ""


# A terminus's fields by position, with the AMQP type each has (source: 11 fields, target: 7); what is not named
# here goes back as decoded. The decoder gives plain ints for every integer type, and a list for an array.
_TERMINUS_FIELDS = {
    amqp.SOURCE: {1: "uint", 2: "symbol", 3: "uint", 6: "symbol", 9: "symbols", 10: "symbols"},
    amqp.TARGET: {1: "uint", 2: "symbol", 3: "uint", 6: "symbols"},
}


def _retyped(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == "uint":
        return UInt(value)
    if kind == "symbol":
        return Symbol(value)
    values = value if isinstance(value, list) else [value]
    return amqp.Array("symbol", [Symbol(v) for v in values])


def _reencode_terminus(terminus: Any, code: int) -> Any:
    """The client's source or target, sent back in the ATTACH reply with each field in its own AMQP type: a JVM
    client (proton-j) casts every field, so a durability sent back as a long, or capabilities as a list rather
    than an array, fails its connection with amqp:decode-error."""
    if terminus is None:
        return Described(ULong(code), [None])
    fields = terminus.value if isinstance(terminus, Described) else terminus
    if not isinstance(fields, list):
        return Described(ULong(code), fields)
    kinds = _TERMINUS_FIELDS.get(code, {})
    return Described(ULong(code), [_retyped(v, kinds[i]) if i in kinds else v for i, v in enumerate(fields)])
