"""The emulator's AMQP 1.0 server on asyncio: connections, sessions, links, `$cbs`, `$management`.

One event loop serves every connection, so the broker needs no locks. Deliveries to consumers are
written in bursts (one ``transport.write`` per pump), pre-settled as the service does, and paused
while the socket's write buffer is full, which bounds the emulator's memory per slow consumer.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import struct
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from . import amqp
from .amqp import Described, Int, Symbol, Timestamp, UInt, ULong, UShort
from .broker import Broker, Hub, Partition, parse_batch, parse_message

_LOG = logging.getLogger("eventhubs_spark.emulator")

_I = struct.Struct(">I")
_FRAME_HEADER = struct.Struct(">IBBH")
BATCH_FORMAT = 0x80013700
EPOCH = "com.microsoft:epoch"
RUNTIME_METRIC = "com.microsoft:enable-receiver-runtime-metric"
SELECTOR = "apache.org:selector-filter:string"
MAX_NON_EPOCH_RECEIVERS = 5
_SEND_CREDIT = 1000
_INCOMING_WINDOW = 1_000_000
_PUMP_BURST = 2000  # events per pump call before yielding to other connections
_WRITE_HIGH_WATER = 4 * 1024 * 1024


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
        self.next_sequence_number = 0
        self.epoch: int | None = None
        self.runtime_metrics = False
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


# --- connection ------------------------------------------------------------------------------------


class Connection(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
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

    # -- asyncio callbacks --
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
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
        self.last_received = time.monotonic()
        self.buffer += data
        try:
            self._process()
        except Exception as exc:  # a protocol error ends this connection, never the emulator
            _LOG.exception("closing connection after a protocol error")
            self._close_with_error("amqp:internal-error", f"emulator error: {exc}")

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
            pass  # everything the emulator sends is pre-settled
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
    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.last_sent = time.monotonic()
            self.transport.write(data)

    def send(self, channel: int, code: int, fields: list[Any], payload: bytes = b"") -> None:
        self.write(amqp.encode_frame(channel, amqp.encode_performative(code, fields), payload))

    def _close_transport(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _abort(self) -> None:
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
        offered = [Symbol(RUNTIME_METRIC)] if isinstance(link, OutLink) and link.runtime_metrics else None
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
                ULong(self.server.broker.max_message_size),
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
        limit = self.server.broker.max_message_size
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
                self._on_cbs(session, data)
            else:
                self._on_management(session, data)
            state = Described(ULong(amqp.ACCEPTED), [])
        except LinkError as exc:
            state = Described(ULong(amqp.REJECTED), [amqp.encode_error(exc.condition, exc.description)])
        except Exception as exc:
            _LOG.exception("could not process a message")
            state = Described(ULong(amqp.REJECTED), [amqp.encode_error("amqp:decode-error", str(exc))])
        if not settled:
            self.send(session.channel, amqp.DISPOSITION, [True, UInt(delivery_id), None, True, state, None])
        if link.credit < _SEND_CREDIT // 2:
            self._grant(link)

    def _on_cbs(self, session: Session, data: bytes) -> None:
        props, app, body = _decode_request(data)
        token = body if isinstance(body, str) else (body.decode("utf-8") if isinstance(body, bytes) else "")
        audience = str(app.get("name", ""))
        status, description = self.server.check_entity(audience)
        if status == 202:
            status, description = self.server.check_token(token, audience)
        if status == 202:
            self.authorized.append((_audience_path(audience), time.time() + 3600 * 24))
        self._reply(session, "$cbs", props, {"status-code": Int(status), "status-description": description}, None)

    def _on_management(self, session: Session, data: bytes) -> None:
        props, app, _ = _decode_request(data)
        if self.server.unanswered_management_calls > 0:
            self.server.unanswered_management_calls -= 1
            return  # a request lost on the way: the client waits for an answer that never comes
        status, description, body = self.server.management(self, app)
        reply_app: dict[str, Any] = {
            "status-code": Int(status),
            "status-description": description,
            "statusDescription": description,
        }
        if status >= 400:
            reply_app["error-condition"] = Symbol(_STATUS_CONDITIONS.get(status, "amqp:internal-error"))
        self._reply(session, "$management", props, reply_app, body)

    def _reply(self, session: Session, node: str, request_props: list[Any], app: dict[str, Any], body: Any) -> None:
        message_id = request_props[0] if request_props else None
        reply_props = [None, None, None, None, None, message_id, None, None, None, None, None, None, None]
        message = amqp.encode_section(amqp.PROPERTIES, reply_props) + amqp.encode_section(
            amqp.APPLICATION_PROPERTIES, app
        )
        if body is not None:
            message += amqp.encode_section(amqp.AMQP_VALUE, body)
        link = session.reply_link(node)
        if link is None:
            _LOG.warning("no reply link on node %s; dropping the reply", node)
            return
        link.pending.append(message)
        self._flush_replies(link)

    def _flush_replies(self, link: OutLink) -> None:
        while link.pending and link.credit > 0 and not link.detached:
            self.deliver(link, link.pending.pop(0))

    def deliver(self, link: OutLink, payload: bytes) -> None:
        """Send one pre-settled message on ``link``, split over frames as the peer's frame size needs."""
        self.write(self.encode_delivery(link, payload))

    def encode_delivery(self, link: OutLink, payload: bytes) -> bytes:
        session = link.session
        delivery_id = session.next_outgoing_id
        tag = link.next_tag
        link.next_tag = (tag + 1) & 0xFFFFFFFF
        link.credit -= 1
        link.delivery_count += 1
        if not link.prefix:
            link.prefix = b"\x00\x53\x14\xc0\x19\x0b\x70" + _I.pack(link.handle) + b"\x70"
        ids = _I.pack(delivery_id) + b"\xa0\x04" + _I.pack(tag) + b"\x43\x41"
        head_len = 8 + len(link.prefix) + len(ids) + 6
        room = max(512, min(self.remote_max_frame, 4294967295) - head_len)
        channel = session.channel
        if len(payload) <= room:
            session.next_outgoing_id += 1
            session.remote_incoming_window -= 1
            return (
                _FRAME_HEADER.pack(head_len + len(payload), 2, 0, channel)
                + link.prefix
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
                + link.prefix
                + ids
                + more
                + b"\x40\x40\x40\x40\x40"
                + bytes(chunk)
            )
            session.remote_incoming_window -= 1
        session.next_outgoing_id += 1
        return b"".join(parts)


UByte0 = amqp.UByte(0)
UByte1 = amqp.UByte(1)
_HEARTBEAT = _FRAME_HEADER.pack(8, 2, 0, 0)  # an empty frame: keeps a connection with an idle time-out open


def _hms(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


_STATUS_CONDITIONS = {
    400: "com.microsoft:argument-out-of-range",
    401: "amqp:unauthorized-access",
    404: "amqp:not-found",
    500: "amqp:internal-error",
    503: "com.microsoft:server-busy",
}


def _address(terminus: Any) -> str:
    if isinstance(terminus, list) and terminus:
        value = terminus[0]
        if isinstance(value, bytes):
            return value.decode("utf-8")
        return str(value) if value is not None else ""
    return ""


def _reencode_terminus(terminus: Any, code: int) -> Any:
    if terminus is None:
        return Described(ULong(code), [None])
    if isinstance(terminus, Described):
        return Described(ULong(code), terminus.value)
    return Described(ULong(code), terminus)


def _decode_request(data: bytes) -> tuple[list[Any], dict[str, Any], Any]:
    props: list[Any] = []
    app: dict[str, Any] = {}
    body: Any = None
    for descriptor, start, _ in amqp.split_sections(data):
        if descriptor == amqp.PROPERTIES:
            props = amqp.section_value(data, start) or []
        elif descriptor == amqp.APPLICATION_PROPERTIES:
            raw = amqp.section_value(data, start) or {}
            app = {_text(k): (_text(v) if isinstance(v, bytes) else v) for k, v in raw.items()}
        elif descriptor in (amqp.AMQP_VALUE, amqp.DATA):
            body = amqp.section_value(data, start)
    return props, app, body


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _audience_path(audience: str) -> str:
    """The entity path of a token audience, lower-cased, without scheme and host."""
    parsed = urllib.parse.urlparse(audience if "://" in audience else "sb://" + audience)
    return parsed.path.strip("/").lower()


def parse_entity(address: str) -> list[str]:
    """Path segments of a link address (``amqps://host:port/hub/ConsumerGroups/cg/Partitions/0``)."""
    if "://" in address:
        address = urllib.parse.urlparse(address).path
    return [urllib.parse.unquote(p) for p in address.strip("/").split("/") if p]


def parse_selector(expr: str) -> tuple[str, bool, str]:
    """Split ``amqp.annotation.x-opt-offset >= '12'`` into (field, inclusive, value)."""
    for op, inclusive in ((">=", True), (">", False), ("=", True)):
        if op in expr:
            left, _, right = expr.partition(op)
            field = left.strip().removeprefix("amqp.annotation.")
            return field, inclusive, right.strip().strip("'")
    raise LinkError("amqp:invalid-field", f"Invalid selector filter expression: {expr!r}")


class Server:
    """Owns the broker, the listening socket and the cross-connection state (receivers, faults)."""

    def __init__(
        self,
        broker: Broker,
        host: str = "127.0.0.1",
        port: int = 0,
        keys: dict[str, str] | None = None,
        max_frame_size: int = 65536,
        token_verifier: Callable[[str], str | None] | None = None,
        idle_timeout: float = 120.0,
        link_idle_timeout: float = 1800.0,
    ) -> None:
        self.broker = broker
        self.idle_timeout = idle_timeout
        self.link_idle_timeout = link_idle_timeout
        # Checks a Microsoft Entra ID token (JWT) for Event Hubs: None = valid, else why not.
        self.token_verifier = token_verifier
        self.host = host
        self.port = port
        self.keys = dict(keys or {})
        self.max_frame_size = max_frame_size
        self.connections: set[Connection] = set()
        self.receivers: dict[tuple[str, str, str], list[OutLink]] = {}
        self.failing_management_calls = 0
        self.unanswered_management_calls = 0
        self.failing_status = 503
        self._server: asyncio.base_events.Server | None = None
        self._retention_task: asyncio.Task[None] | None = None
        self._idle_task: asyncio.Task[None] | None = None
        self.stats = {
            "events_in": 0,
            "events_out": 0,
            "connections": 0,
            "idle_connections_closed": 0,
            "idle_links_detached": 0,
            "heartbeats": 0,
        }

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: Connection(self), self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._retention_task = loop.create_task(self._retention_loop())
        self._idle_task = loop.create_task(self._idle_loop())

    async def stop(self) -> None:
        for task in (self._retention_task, self._idle_task):
            if task is not None:
                task.cancel()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn._abort()
        if self._server is not None:
            await self._server.wait_closed()

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            self.broker.apply_retention()

    async def _idle_loop(self) -> None:
        """The service's idle rules, checked a few times per shortest time-out."""
        while True:
            shortest = min([t for t in (self.idle_timeout, self.link_idle_timeout, 4.0) if t > 0])
            await asyncio.sleep(max(0.05, min(1.0, shortest / 4)))
            try:
                self.check_idle(time.monotonic())
            except Exception:  # the timers must never stop
                _LOG.exception("idle check failed")

    def check_idle(self, now: float) -> None:
        """Heartbeats where a peer asked for them; close idle connections; detach idle consumer links."""
        for conn in list(self.connections):
            if conn.closed:
                continue
            if self.idle_timeout > 0 and now - conn.last_received > self.idle_timeout:
                self.stats["idle_connections_closed"] += 1
                conn._close_with_error(
                    "amqp:connection:forced",
                    f"The connection was inactive for more than the allowed {int(self.idle_timeout * 1000)} "
                    "milliseconds and is closed by container 'LinkTracker'.",
                )
                continue
            if conn.remote_idle_timeout and now - conn.last_sent >= conn.remote_idle_timeout / 2:
                self.stats["heartbeats"] += 1
                conn.write(_HEARTBEAT)
            if self.link_idle_timeout <= 0:
                continue
            for session in list(conn.sessions.values()):
                for link in list(session.links_by_remote.values()):
                    if (
                        isinstance(link, OutLink)
                        and link.kind == "events"
                        and not link.detached
                        and now - link.last_activity > self.link_idle_timeout
                    ):
                        self.stats["idle_links_detached"] += 1
                        conn.detach(
                            link,
                            "amqp:link:detach-forced",
                            f"The link '{link.name}' is force detached by the broker because of errors occurred in "
                            f"consumer({link.name}). Detach origin: AmqpMessageConsumer.IdleTimerExpired: Idle "
                            f"timeout: {_hms(self.link_idle_timeout)}.",
                        )

    def check_entity(self, audience: str) -> tuple[int, str]:
        """A token for a hub that does not exist is refused at put-token (404), as the service does."""
        segments = [seg for seg in _audience_path(audience).split("/") if seg]
        if segments and self.broker.hub(urllib.parse.unquote(segments[0])) is None:
            return 404, (
                f"The messaging entity 'sb://{self.host}/{urllib.parse.unquote(segments[0])}' could not be found. "
                "To know more visit https://aka.ms/sbResourceMgrExceptions."
            )
        return 202, "Accepted"

    # -- auth --
    def check_token(self, token: str, audience: str) -> tuple[int, str]:
        if not token.startswith("SharedAccessSignature ") and self.token_verifier is not None:
            problem = self.token_verifier(token)
            return (401, f"Unauthorized: {problem}") if problem else (202, "Accepted")
        if not self.keys:
            return 202, "Accepted"
        if not token.startswith("SharedAccessSignature "):
            return 401, "InvalidIssuer: the emulator checks shared access signatures only."
        fields = dict(urllib.parse.parse_qsl(token[len("SharedAccessSignature ") :], keep_blank_values=True))
        key_name, sig, expiry, resource = fields.get("skn"), fields.get("sig"), fields.get("se"), fields.get("sr")
        if not (key_name and sig and expiry and resource):
            return 401, "InvalidSignature: the token lacks one of sr, sig, se, skn."
        key = self.keys.get(key_name)
        if key is None:
            return 401, f"Unauthorized: the shared access policy {key_name!r} does not exist."
        to_sign = urllib.parse.quote_plus(resource) + "\n" + expiry
        expected = base64.b64encode(hmac.new(key.encode(), to_sign.encode(), hashlib.sha256).digest()).decode()
        if not hmac.compare_digest(expected, sig):
            return 401, "InvalidSignature: The token has an invalid signature."
        if int(expiry) < time.time():
            return 401, "ExpiredToken: The token is expired."
        if not _audience_path(audience).startswith(_audience_path(resource)):
            return 401, "InvalidAudience: The token's resource does not cover the audience."
        return 202, "Accepted"

    def authorized(self, conn: Connection, path: str) -> bool:
        if not self.keys and self.token_verifier is None:
            return True
        now = time.time()
        path = path.lower()
        return any(exp > now and (not aud or path == aud or path.startswith(aud + "/")) for aud, exp in conn.authorized)

    # -- producers --
    def open_producer(self, conn: Connection, link: InLink) -> None:
        segments = parse_entity(link.target_address)
        if not segments:
            raise LinkError("amqp:not-found", f"The messaging entity '{link.target_address}' could not be found.")
        hub = self._hub(segments[0], link.target_address)
        if not self.authorized(conn, segments[0]):
            raise LinkError("amqp:unauthorized-access", "Unauthorized access. 'Send' claim(s) are required.")
        link.hub = hub
        if len(segments) >= 3 and segments[1].lower() == "partitions":
            link.partition = self._partition(hub, segments[2])
        elif len(segments) != 1:
            raise LinkError("amqp:not-found", f"The messaging entity '{link.target_address}' could not be found.")

    def accept_events(self, link: InLink, data: bytes, message_format: int) -> None:
        assert link.hub is not None
        if message_format == BATCH_FORMAT:
            messages, key = parse_batch(data)
        else:
            m = parse_message(data)
            messages, key = [m], m.partition_key
        if not messages:
            return
        partition = link.partition or link.hub.route(key)
        partition.append(messages, key)
        self.stats["events_in"] += len(messages)

    # -- consumers --
    def _hub(self, name: str, address: str) -> Hub:
        hub = self.broker.hub(name)
        if hub is None:
            raise LinkError(
                "amqp:not-found",
                f"The messaging entity 'sb://{self.host}/{name}' could not be found. "
                f"To know more visit https://aka.ms/sbResourceMgrExceptions. ({address})",
            )
        return hub

    def _partition(self, hub: Hub, partition_id: str) -> Partition:
        partition = hub.partition(partition_id)
        if partition is None:
            raise LinkError(
                "com.microsoft:argument-out-of-range",
                f"The specified partition is invalid for an EventHub partition sender or receiver. "
                f"It should be between 0 and {len(hub.partitions) - 1}.",
            )
        return partition

    def open_consumer(self, conn: Connection, link: OutLink, source: list[Any], attach: list[Any]) -> None:
        segments = parse_entity(link.source_address)
        if len(segments) != 5 or segments[1].lower() != "consumergroups" or segments[3].lower() != "partitions":
            raise LinkError("amqp:not-found", f"The messaging entity '{link.source_address}' could not be found.")
        hub = self._hub(segments[0], link.source_address)
        group = segments[2].lower()
        if not hub.has_consumer_group(group):
            raise LinkError(
                "amqp:not-found",
                f"The messaging entity 'sb://{self.host}/{hub.name}/consumergroups/{segments[2]}' could not be found.",
            )
        partition = self._partition(hub, segments[4])
        if not self.authorized(conn, f"{hub.name}/consumergroups/{group}"):
            raise LinkError("amqp:unauthorized-access", "Unauthorized access. 'Listen' claim(s) are required.")
        link.hub, link.partition, link.consumer_group = hub, partition, group
        properties = attach[13] or {}
        epoch = properties.get(EPOCH)
        link.epoch = int(epoch) if epoch is not None else None
        desired = attach[12] or []
        if isinstance(desired, str):
            desired = [desired]
        link.runtime_metrics = RUNTIME_METRIC in desired
        link.next_sequence_number = self._start_position(partition, source)
        self._admit(conn, link)
        link.notify = lambda: self.schedule_pump(link)
        partition.listeners.add(link.notify)

    def _start_position(self, partition: Partition, source: list[Any]) -> int:
        filters = source[7] if len(source) > 7 and isinstance(source[7], dict) else {}
        expr = None
        for value in filters.values():
            value = value.value if isinstance(value, Described) else value
            if isinstance(value, bytes):
                value = value.decode("utf-8")
            if isinstance(value, str):
                expr = value
        if expr is None:
            return partition.beginning_sequence_number
        field, inclusive, value = parse_selector(expr)
        events = partition.events
        try:
            if field == "x-opt-offset":
                if value == "-1":
                    return partition.beginning_sequence_number
                if value == "@latest":
                    return partition.next_sequence_number
                index = partition.index_of_offset(int(value), inclusive)
            elif field == "x-opt-sequence-number":
                seq = int(value) if inclusive else int(value) + 1
                return max(seq, partition.beginning_sequence_number)
            elif field == "x-opt-enqueued-time":
                index = partition.index_of_time(int(value), inclusive)
            else:
                raise LinkError("amqp:invalid-field", f"Unsupported selector field {field!r} in {expr!r}")
        except ValueError:
            raise LinkError("amqp:invalid-field", f"Invalid selector filter value in {expr!r}") from None
        return events[index].sequence_number if index < len(events) else partition.next_sequence_number

    def _admit(self, conn: Connection, link: OutLink) -> None:
        """Owner-level rules: a higher (or equal) epoch steals, a lower one or a non-epoch is refused."""
        key = link.key()
        current = [r for r in self.receivers.get(key, []) if not r.detached]
        epochs = [r.epoch for r in current if r.epoch is not None]
        entity = f"{key[0]}/consumergroups/{key[1]}/partitions/{key[2]}"
        if link.epoch is None:
            if epochs:
                raise LinkError(
                    "amqp:link:stolen",
                    f"At least one receiver for the endpoint is created with epoch of '{max(epochs)}', and so "
                    f"non-epoch receiver is not allowed. Either reconnect with a higher epoch, or make sure all "
                    f"epoch receivers are closed or disconnected. Reference:{link.name}, Entity:{entity}",
                )
            if len(current) >= MAX_NON_EPOCH_RECEIVERS:
                raise LinkError(
                    "amqp:resource-limit-exceeded",
                    f"Exceeded the maximum number of allowed receivers per partition in a consumer group which is "
                    f"{MAX_NON_EPOCH_RECEIVERS}. List of connected receivers - "
                    f"{', '.join(r.name for r in current)}. Entity:{entity}",
                )
        else:
            if epochs and max(epochs) > link.epoch:
                raise LinkError(
                    "amqp:link:stolen",
                    f"Receiver '{link.name}' with epoch '{link.epoch}' cannot be created because a receiver with "
                    f"higher epoch '{max(epochs)}' already exists. Entity:{entity}",
                )
            for old in current:
                old.session.conn.detach(
                    old,
                    "amqp:link:stolen",
                    f"New receiver '{link.name}' with higher epoch of '{link.epoch}' is created hence current "
                    f"receiver '{old.name}' with epoch '{old.epoch if old.epoch is not None else 'nil'}' is getting "
                    f"disconnected. If you are recreating the receiver, make sure a higher epoch is used. "
                    f"Entity:{entity}",
                )
            current = []
        current.append(link)
        self.receivers[key] = current

    def forget_link(self, link: Link) -> None:
        link.detached = True
        if isinstance(link, OutLink) and link.kind == "events" and link.partition is not None:
            key = link.key()
            remaining = [r for r in self.receivers.get(key, []) if r is not link]
            self.receivers[key] = remaining
            if link.notify is not None:
                link.partition.listeners.discard(link.notify)

    def schedule_pump(self, link: OutLink) -> None:
        if not link.pump_scheduled and not link.detached:
            link.pump_scheduled = True
            asyncio.get_running_loop().call_soon(self._pump, link)

    def _pump(self, link: OutLink) -> None:
        link.pump_scheduled = False
        conn = link.session.conn
        partition = link.partition
        if link.detached or conn.closed or partition is None or partition.stalled:
            return
        if conn.paused or (conn.transport is not None and conn.transport.get_write_buffer_size() > _WRITE_HIGH_WATER):
            return  # resume_writing reschedules
        events = partition.events
        if not events:
            return
        base = events[0].sequence_number
        if link.next_sequence_number < base:
            link.next_sequence_number = base  # retention removed what this reader had not read
        index = link.next_sequence_number - base
        budget = min(link.credit, len(events) - index, _PUMP_BURST)
        if partition.delay_s > 0:
            budget = min(budget, 1)
        if budget <= 0 or link.session.remote_incoming_window <= 0:
            return
        metric_entries: list[bytes] = []
        metrics = b""
        if link.runtime_metrics:
            metric_entries = [
                amqp.encode_value(Symbol(k)) + amqp.encode_value(v)
                for k, v in (
                    ("last_enqueued_sequence_number", partition.next_sequence_number - 1),
                    ("last_enqueued_offset", str(partition.last_offset)),
                    ("last_enqueued_time_utc", Timestamp(partition.last_enqueued_ms)),
                    ("runtime_info_retrieval_time_utc", Timestamp(int(time.time() * 1000))),
                )
            ]
            metrics = b"\x00\x53\x71" + amqp.map_from_raw(metric_entries)
        out = []
        encode = conn.encode_delivery
        session = link.session
        for ev in events[index : index + budget]:
            if session.remote_incoming_window <= 0:
                break
            delivery = metrics
            if ev.delivery_entries:  # the producer's delivery annotations, with the metrics in the same map
                delivery = (
                    b"\x00\x53\x71" + amqp.map_from_raw([*ev.delivery_entries, *metric_entries])
                    if metric_entries
                    else ev.delivery
                )
            out.append(encode(link, ev.header + delivery + ev.body))
            link.next_sequence_number = ev.sequence_number + 1
        conn.write(b"".join(out))
        link.last_activity = time.monotonic()
        self.stats["events_out"] += len(out)
        if link.credit > 0 and link.next_sequence_number < partition.next_sequence_number:
            if partition.delay_s > 0:
                link.pump_scheduled = True
                asyncio.get_running_loop().call_later(partition.delay_s, self._pump, link)
            else:
                self.schedule_pump(link)

    # -- management --
    def management(self, conn: Connection, app: dict[str, Any]) -> tuple[int, str, Any]:
        if self.failing_management_calls > 0:
            self.failing_management_calls -= 1
            return self.failing_status, "The server is busy (injected by the emulator's fault controls).", None
        if self.keys or self.token_verifier is not None:
            token = app.get("security_token")
            token = token.decode() if isinstance(token, bytes) else str(token or "")
            status, description = self.check_token(token, f"sb://{self.host}/{app.get('name', '')}")
            if status != 202:
                return status, description, None
        operation = str(app.get("operation", ""))
        kind = str(app.get("type", ""))
        name = str(app.get("name", ""))
        if operation != "READ":
            return 400, f"Invalid operation {operation!r}: the emulator supports READ.", None
        hub = self.broker.hub(name)
        if hub is None:
            return 404, f"The messaging entity 'sb://{self.host}/{name}' could not be found.", None
        if kind == "com.microsoft:eventhub":
            return 200, "OK", hub.properties()
        if kind == "com.microsoft:partition":
            pid = str(app.get("partition", ""))
            partition = hub.partition(pid)
            if partition is None:
                return (
                    400,
                    f"The specified partition is invalid for an EventHub partition sender or receiver. "
                    f"It should be between 0 and {len(hub.partitions) - 1}.",
                    None,
                )
            props = partition.properties()
            props["type"] = "com.microsoft:partition"
            return 200, "OK", props
        return 400, f"Unsupported management type {kind!r}.", None

    # -- fault controls --
    def drop_connections(self) -> int:
        n = len(self.connections)
        for conn in list(self.connections):
            conn._abort()
        return n

    def detach_receivers(self, hub: str, partition: str) -> int:
        n = 0
        for (h, _g, p), links in list(self.receivers.items()):
            if h == hub.lower() and p == partition:
                for link in list(links):
                    link.session.conn.detach(
                        link, "amqp:link:detach-forced", "The link was detached by the emulator's fault controls."
                    )
                    n += 1
        return n

    def wake(self, partition: Partition) -> None:
        for notify in list(partition.listeners):
            notify()
