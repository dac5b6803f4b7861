"""The emulator's service: what each link is for, and the service's rules.

Links are routed to hubs, partitions and consumer groups; tokens are checked at ``$cbs``; hub and
partition properties are answered at ``$management``; owner levels (epochs), the limit of non-epoch
receivers, the idle rules and the fault controls live here. The framing below it is
:mod:`eventhubs_emulator.connection`. One event loop serves every connection, so nothing needs a lock;
a consumer's pump pauses while its socket's write buffer is full, which bounds the memory per slow
consumer.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import dataclasses
import functools
import hashlib
import hmac
import logging
import math
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from . import amqp
from .amqp import Described, Int, Symbol, Timestamp
from .broker import Broker, Hub, Partition, parse_batch, parse_message
from .connection import (
    GEO_REPLICATION,
    RUNTIME_METRIC,
    Connection,
    EncodedSection,
    InLink,
    Link,
    LinkError,
    OutLink,
    Session,
)
from .metering import Meter
from .tls import Certificate

_LOG = logging.getLogger("eventhubs_emulator")

BATCH_FORMAT = 0x80013700
EPOCH = "com.microsoft:epoch"
SELECTOR = "apache.org:selector-filter:string"
MAX_NON_EPOCH_RECEIVERS = 5
_PUMP_BURST = 2000  # events per pump call before yielding to other connections
_WRITE_HIGH_WATER = 4 * 1024 * 1024
_SEND_LOG = 100_000  # stored sends remembered (Server.sends)


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


@functools.lru_cache(maxsize=256)
def _reply_application(status: int, description: str) -> bytes:
    """A management answer's application properties, encoded once per status and description (a planning trigger
    at 1,024 partitions asks 1,024 times and gets 1,024 alike)."""
    reply_app: dict[str, Any] = {
        "status-code": Int(status),
        "status-description": description,
        "statusDescription": description,
    }
    if status >= 400:
        reply_app["error-condition"] = Symbol(_STATUS_CONDITIONS.get(status, "amqp:internal-error"))
    return amqp.encode_section(amqp.APPLICATION_PROPERTIES, reply_app)


@functools.lru_cache(maxsize=8192)
def _encoded_body(items: tuple[tuple[str, Any], ...]) -> EncodedSection:
    """A management answer's body, encoded once while a partition's properties stay the same (a trigger asks
    every partition, and most did not change since the last)."""
    return EncodedSection(amqp.encode_section(amqp.AMQP_VALUE, dict(items)))


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


@dataclasses.dataclass(slots=True)
class StoredSend:
    """One message (or batch) the emulator stored: over which connection, where, which sequence numbers."""

    connection: int  # the connection's number, from 1 in the order clients connected
    hub: str
    partition: str
    first: int  # sequence number of its first event
    count: int
    # the client let go of its link (detached it, ended its session or closed or dropped its connection) with
    # this as the link's last stored send, not after a detach of the server's: the client may never have seen
    # it accepted (its send timed out), so a copy it sent again elsewhere is a repeat at least once allows
    client_let_go: bool = False


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
        tls_port: int | None = None,
        websocket_port: int | None = None,
        certificate: Certificate | None = None,
        meter: Meter | None = None,
    ) -> None:
        """``tls_port`` serves AMQPS and ``websocket_port`` AMQP over WebSockets (TLS) with ``certificate``
        (0 picks a free port, None serves none); ``port`` always serves plain AMQP. ``meter``: the
        namespace's throughput units (None: unmetered)."""
        self.meter = meter
        self.broker = broker
        self.tls_port = tls_port
        self.websocket_port = websocket_port
        self.certificate = certificate
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
        # Receiving links attached, by (hub, consumer group, partition): what a client's reuse of its links
        # costs the service (each attach is a round trip, a token check and a restart of delivery).
        self.consumer_attaches: dict[tuple[str, str, str], int] = {}
        self.events_out_by_hub: dict[str, int] = {}  # what each hub sent to receivers (a namespace's metered egress)
        self.failing_management_calls = 0
        self.unanswered_management_calls = 0
        self.rejecting_management_calls = 0
        self.unsettled_answers = False
        # Sends to a hub (by lower-cased name) whose answer is lost: stored, then their connection falls into a
        # black hole for good before the disposition goes out (Emulator.lose_send_answers)
        self.lost_send_answers: dict[str, int] = {}
        # Connections made from now that fall into a black hole for good before answering anything (not even the
        # protocol header): a network that drops a connection while it opens (Emulator.black_hole_openings)
        self.holed_openings = 0
        self.holed_sign_ins = 0  # the next connections to sign in fall into a black hole at their put-token
        self.failing_status = 503
        self._servers: list[asyncio.base_events.Server] = []
        self._retention_task: asyncio.Task[None] | None = None
        self._idle_task: asyncio.Task[None] | None = None
        self.stats = {
            "events_in": 0,
            "events_out": 0,
            "connections": 0,
            "connections_accepted": 0,  # every connection a client opened (stats()' "connections": those open now)
            "idle_connections_closed": 0,
            "idle_links_detached": 0,
            "heartbeats": 0,
            "forced_detaches": 0,
            "black_holes": 0,
            "management_requests": 0,
            "answers_settled_by_client": 0,
            "send_answers_lost": 0,
        }
        self._connection_numbers = 0
        # Every send stored, newest last (bounded): tests tell a repeat the client made after a send it could not
        # know the outcome of (its link let go right after) from one that had no reason (Emulator.stored_sends).
        self.sends: collections.deque[StoredSend] = collections.deque(maxlen=_SEND_LOG)

    @property
    def max_message_size(self) -> int:
        return self.broker.max_message_size

    def connected(self, conn: Connection) -> None:
        self._connection_numbers += 1
        self.stats["connections_accepted"] += 1
        conn.number = self._connection_numbers
        self.connections.add(conn)
        if self.holed_openings > 0:
            self.holed_openings -= 1
            self._hole_for_good(conn)

    def _hole_for_good(self, conn: Connection) -> None:
        """``conn`` stops answering for good, now (Emulator.black_hole_openings, black_hole_sign_ins)."""
        conn.holed, conn.hole_heals = True, False
        self.stats["black_holes"] += 1

    def disconnected(self, conn: Connection) -> None:
        self.connections.discard(conn)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        plain = await loop.create_server(lambda: Connection(self), self.host, self.port)
        self._servers.append(plain)
        self.port = plain.sockets[0].getsockname()[1]
        if self.tls_port is not None or self.websocket_port is not None:
            if self.certificate is None:
                raise ValueError("a TLS or WebSocket listener needs a certificate")
            context = self.certificate.server_context()
            if self.tls_port is not None:
                amqps = await loop.create_server(lambda: Connection(self), self.host, self.tls_port, ssl=context)
                self._servers.append(amqps)
                self.tls_port = amqps.sockets[0].getsockname()[1]
            if self.websocket_port is not None:
                from . import websocket  # wsproto: needed only where AMQP over WebSockets is served

                factory = websocket.protocol_factory(lambda: Connection(self))
                wss = await loop.create_server(factory, self.host, self.websocket_port, ssl=context)
                self._servers.append(wss)
                self.websocket_port = wss.sockets[0].getsockname()[1]
        self._retention_task = loop.create_task(self._retention_loop())
        self._idle_task = loop.create_task(self._idle_loop())

    async def stop(self) -> None:
        for task in (self._retention_task, self._idle_task):
            if task is not None:
                task.cancel()
        for listener in self._servers:
            listener.close()
        for conn in list(self.connections):
            conn._abort()
        for listener in self._servers:
            await listener.wait_closed()

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
            if conn.closed or conn.holed:
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
                conn.write(amqp.HEARTBEAT)
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

    def check_entity(self, conn: Connection, audience: str) -> tuple[int, str]:
        """A token for a hub that does not exist is refused at put-token (404), as the service does."""
        segments = [seg for seg in _audience_path(audience).split("/") if seg]
        if segments and self.broker.hub(urllib.parse.unquote(segments[0])) is None:
            return 404, (
                f"The messaging entity 'sb://{conn.namespace}/{urllib.parse.unquote(segments[0])}' could not be "
                "found. "
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
        hub = self._hub(conn, segments[0], link.target_address)
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
        if self.meter is not None:
            wait = self.meter.admit_ingress(len(messages), len(data))
            if wait > 0:
                raise LinkError(
                    "com.microsoft:server-busy",
                    f"The request was terminated because the namespace {link.session.conn.namespace} is being "
                    f"throttled. Error code : 50002. Sub error : 102. Please wait {max(1, math.ceil(wait))} seconds "
                    "and try again. To know more visit https://aka.ms/sbResourceMgrExceptions",
                )
        partition = link.partition or link.hub.route(key)
        partition.append(messages, key)
        self.stats["events_in"] += len(messages)
        stored = StoredSend(link.session.conn.number, link.hub.name, partition.id,
                            partition.next_sequence_number - len(messages), len(messages))  # fmt: skip
        self.sends.append(stored)
        link.last_send = stored

    # -- consumers --
    def _hub(self, conn: Connection, name: str, address: str) -> Hub:
        hub = self.broker.hub(name)
        if hub is None:
            raise LinkError(
                "amqp:not-found",
                f"The messaging entity 'sb://{conn.namespace}/{name}' could not be found. "
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
        hub = self._hub(conn, segments[0], link.source_address)
        group = segments[2].lower()
        if not hub.has_consumer_group(group):
            raise LinkError(
                "amqp:not-found",
                f"The messaging entity 'sb://{conn.namespace}/{hub.name}/consumergroups/{segments[2]}' could not be "
                "found.",
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
        link.georeplication = GEO_REPLICATION in desired and hub.geo_replicated
        link.next_ordinal = self._start_position(partition, source)
        self._admit(conn, link)
        key = link.key()
        self.consumer_attaches[key] = self.consumer_attaches.get(key, 0) + 1
        link.notify = lambda: self.schedule_pump(link)
        partition.listeners.add(link.notify)

    def _start_position(self, partition: Partition, source: list[Any]) -> int:
        """The ordinal (place in the log) of the first event the link's filter selects."""
        filters = source[7] if len(source) > 7 and isinstance(source[7], dict) else {}
        expr = None
        for value in filters.values():
            value = value.value if isinstance(value, Described) else value
            if isinstance(value, bytes):
                value = value.decode("utf-8")
            if isinstance(value, str):
                expr = value
        if expr is None:
            return partition.first_ordinal
        field, inclusive, value = parse_selector(expr)
        try:
            if field == "x-opt-offset":
                if value == "-1":
                    return partition.first_ordinal
                if value == "@latest":
                    return partition.next_ordinal
                index = partition.index_of_offset(partition.parse_offset(value), inclusive)
            elif field == "x-opt-sequence-number":
                # '<replication segment>:<sequence number>' (segment -1: unknown), or the number alone
                segment, _, seq = value.rpartition(":")
                if not partition.hub.geo_replicated:  # ordinals are sequence numbers: one past the end waits
                    return max(int(seq) if inclusive else int(seq) + 1, partition.first_ordinal)
                index = partition.index_of_position(int(segment) if segment else -1, int(seq), inclusive)
            elif field == "x-opt-enqueued-time":
                index = partition.index_of_time(int(value), inclusive)
            else:
                raise LinkError("amqp:invalid-field", f"Unsupported selector field {field!r} in {expr!r}")
        except ValueError:
            raise LinkError("amqp:invalid-field", f"Invalid selector filter value in {expr!r}") from None
        return partition.ordinal_at(index)

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
        if isinstance(link, InLink) and link.last_send is not None and not link.server_detached:
            link.last_send.client_let_go = True
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
        if link.detached or conn.closed or partition is None or partition.stalled or conn.holed:
            return  # a black-holed connection's pumps go on when the hole ends (Connection.end_hole)
        if conn.paused or (conn.transport is not None and conn.transport.get_write_buffer_size() > _WRITE_HIGH_WATER):
            return  # resume_writing reschedules
        events = partition.events
        if not events:
            return
        base = events[0].ordinal
        if link.next_ordinal < base:
            link.next_ordinal = base  # retention removed what this reader had not read
        index = link.next_ordinal - base
        budget = min(link.credit, len(events) - index, _PUMP_BURST)
        if partition.delay_s > 0:
            budget = min(budget, 1)
        if budget <= 0 or link.session.remote_incoming_window <= 0:
            return
        if self.meter is not None:
            wait = self.meter.egress_wait()
            if wait > 0:  # egress is not refused, it waits for the namespace's allowance
                link.pump_scheduled = True
                asyncio.get_running_loop().call_later(wait, self._pump, link)
                return
        metric_entries: list[bytes] = []
        metrics = b""
        if link.runtime_metrics:
            metric_entries = [
                amqp.encode_value(Symbol(k)) + amqp.encode_value(v)
                for k, v in (
                    ("last_enqueued_sequence_number", partition.next_sequence_number - 1),
                    ("last_enqueued_offset", partition.wire_offset(partition.last_offset)),
                    ("last_enqueued_time_utc", Timestamp(partition.last_enqueued_ms)),
                    ("runtime_info_retrieval_time_utc", Timestamp(int(time.time() * 1000))),
                )
            ]
            metrics = b"\x00\x53\x71" + amqp.map_from_raw(metric_entries)
        session = link.session
        if not metric_entries:  # every event goes as stored: the run in one write
            run = events[index : index + min(budget, session.remote_incoming_window)]
            data_or_none = conn.encode_run(link, [ev.message for ev in run])
            if data_or_none is not None:
                link.next_ordinal = run[-1].ordinal + 1
                self._sent(link, conn, len(run), data_or_none)
                return
        out = []
        encode = conn.encode_delivery
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
            out.append(encode(link, ev.header + delivery + ev.body if metrics else ev.message))
            link.next_ordinal = ev.ordinal + 1
        self._sent(link, conn, len(out), b"".join(out))

    def _sent(self, link: OutLink, conn: Connection, count: int, data: bytes) -> None:
        """Write a pump's deliveries, count them, and pump again while the link has credit and events wait."""
        partition = link.partition
        assert partition is not None
        conn.write(data)
        if self.meter is not None:
            self.meter.sent(count, len(data))
        link.last_activity = time.monotonic()
        self.stats["events_out"] += count
        hub_name = link.hub.name.lower() if link.hub is not None else ""
        self.events_out_by_hub[hub_name] = self.events_out_by_hub.get(hub_name, 0) + count
        if link.credit > 0 and link.next_ordinal < partition.next_ordinal:
            if partition.delay_s > 0:
                link.pump_scheduled = True
                asyncio.get_running_loop().call_later(partition.delay_s, self._pump, link)
            else:
                self.schedule_pump(link)

    # -- $cbs and $management --
    def on_cbs(self, conn: Connection, session: Session, data: bytes) -> None:
        """A put-token request: the entity must exist and the token be valid for it."""
        if self.holed_sign_ins > 0:  # opened and answered so far; the sign-in and all after it go unanswered
            self.holed_sign_ins -= 1
            self._hole_for_good(conn)
            return
        props, app, body = _decode_request(data)
        token = body if isinstance(body, str) else (body.decode("utf-8") if isinstance(body, bytes) else "")
        audience = str(app.get("name", ""))
        status, description = self.check_entity(conn, audience)
        if status == 202:
            status, description = self.check_token(token, audience)
        if status == 202:
            conn.authorized.append((_audience_path(audience), time.time() + 3600 * 24))
        conn.reply(session, "$cbs", props, {"status-code": Int(status), "status-description": description}, None)

    def on_management(self, conn: Connection, session: Session, data: bytes) -> None:
        """A READ of hub or partition properties (or a request the fault controls leave unanswered)."""
        props, app, _ = _decode_request(data)
        self.stats["management_requests"] += 1
        if self.unanswered_management_calls > 0:
            self.unanswered_management_calls -= 1
            return  # a request lost on the way: the client waits for an answer that never comes
        if self.rejecting_management_calls > 0:
            self.rejecting_management_calls -= 1
            raise LinkError("com.microsoft:server-busy", "The request was refused (the emulator's fault controls).")
        status, description, body = self.management(conn, app)
        if isinstance(body, dict) and app.get("type") == "com.microsoft:partition":  # flat: every value hashable
            body = _encoded_body(tuple(body.items()))
        conn.reply(session, "$management", props, _reply_application(status, description), body)

    # -- management --
    def management(self, conn: Connection, app: dict[str, Any]) -> tuple[int, str, Any]:
        if self.failing_management_calls > 0:
            self.failing_management_calls -= 1
            return self.failing_status, "The server is busy (injected by the emulator's fault controls).", None
        if self.keys or self.token_verifier is not None:
            token = app.get("security_token")
            token = token.decode() if isinstance(token, bytes) else str(token or "")
            status, description = self.check_token(token, f"sb://{conn.namespace}/{app.get('name', '')}")
            if status != 202:
                return status, description, None
        operation = str(app.get("operation", ""))
        kind = str(app.get("type", ""))
        name = str(app.get("name", ""))
        if operation != "READ":
            return 400, f"Invalid operation {operation!r}: the emulator supports READ.", None
        hub = self.broker.hub(name)
        if hub is None:
            return 404, f"The messaging entity 'sb://{conn.namespace}/{name}' could not be found.", None
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

    def _websockets(self) -> list[Any]:
        """The WebSocket connections (websocket.WebSocketServerProtocol) the AMQP connections ride on."""
        if self.websocket_port is None:
            return []
        from .websocket import WebSocketServerProtocol

        outers = [getattr(conn.transport, "_outer", None) for conn in self.connections]
        return [o for o in outers if isinstance(o, WebSocketServerProtocol)]

    def ping_websockets(self, payload: bytes = b"") -> int:
        """Send a WebSocket ping on every AMQP-over-WebSockets connection; returns how many."""
        outers = self._websockets()
        for outer in outers:
            outer.ping(payload)
        return len(outers)

    def websocket_pongs(self) -> int:
        """Pongs received on the WebSocket connections open now (answers to pings)."""
        return sum(o.pongs for o in self._websockets())

    def detach_receivers(self, hub: str, partition: str) -> int:
        return self.detach_links(hub, senders=False, partition=partition,
                                 description="The link was detached by the emulator's fault controls.")  # fmt: skip

    def detach_links(
        self, hub: str | None = None, receivers: bool = True, senders: bool = True,
        condition: str = "amqp:link:detach-forced", description: str = "", partition: str | None = None,
    ) -> int:  # fmt: skip
        """Detach every receiving and/or sending link of events (of one hub, or all; of one partition, or any)
        with ``condition``, as the service does when it moves a partition (``amqp:link:detach-forced``) or
        times a link out (``com.microsoft:timeout``); the number detached."""
        text = description or (
            "The link was force detached by the service (the emulator's fault controls). "
            if condition != "com.microsoft:timeout" else "The operation did not complete within the allotted "
            "timeout (the emulator's fault controls)."
        )  # fmt: skip
        n = 0
        for conn in list(self.connections):
            for session in list(conn.sessions.values()):
                for link in list(session.links_by_remote.values()):
                    if not isinstance(link, InLink | OutLink) or link.detached or link.kind != "events":
                        continue
                    if not (receivers if isinstance(link, OutLink) else senders):
                        continue
                    if hub is not None and (link.hub is None or link.hub.name.lower() != hub.lower()):
                        continue
                    if partition is not None and (link.partition is None or link.partition.id != partition):
                        continue
                    conn.detach(link, condition, text)
                    self.stats["forced_detaches"] += 1
                    n += 1
        return n

    def answer_lost(self, link: InLink) -> bool:
        """Whether the send just stored from ``link`` loses its answer (Emulator.lose_send_answers); counts it."""
        hub = link.hub.name.lower() if link.hub is not None else ""
        if self.lost_send_answers.get(hub, 0) <= 0:
            return False
        self.lost_send_answers[hub] -= 1
        self.stats["send_answers_lost"] += 1
        return True

    def black_hole(self, seconds: float | None) -> int:
        """Every open connection stops answering (no frames, no FIN) for ``seconds``, or for good (None);
        connections made later are served. The number of connections holed."""
        n = 0
        for conn in list(self.connections):
            if conn.closed or conn.holed:
                continue
            conn.holed = True
            conn.hole_heals = seconds is not None
            n += 1
            if seconds is not None:
                asyncio.get_running_loop().call_later(seconds, conn.end_hole)
        self.stats["black_holes"] += n
        return n

    def wake(self, partition: Partition) -> None:
        for notify in list(partition.listeners):
            notify()
