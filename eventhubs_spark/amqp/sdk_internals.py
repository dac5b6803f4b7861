"""Every use of the azure-eventhub SDK's private internals, in one place.

The connector keeps the SDK for connections, sign-in, links and flow control, and leans on a few of
its private attributes where the public API costs too much or cannot do what a pooled receiver
needs. Each function here says which internals it uses and why. :func:`missing_internals` checks
that an installed SDK still has all of them; a contract test runs it against a live consumer and
the management client, so an SDK release that drops one fails CI instead of a user's query.

The receive path needs every one of them (it reads frames itself and moves the SDK's counters as
the SDK would): an SDK that lacks one fails the contract test in CI, naming it, before a query meets it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import io
import logging
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from eventhubs_spark.errors import (
    AuthenticationFailedError,
    EventHubsError,
    HubNotFoundError,
    ReceiverDisconnectedError,
    SinkError,
    TransientError,
)
from eventhubs_spark.positions import geo_segments

_LOG = logging.getLogger(__name__)


# -- consumers ------------------------------------------------------------------------------------------


def create_consumer(
    client: Any,
    consumer_group: str,
    partition: str,
    position: Any,
    on_events: Callable[[Any], None],
    *,
    inclusive: bool,
    owner_level: int | None,
    prefetch: int,
) -> Any:
    """A consumer of one partition (``EventHubConsumerClient._create_consumer``).

    The public ``receive`` runs a whole processor loop on the calling thread; a Spark task needs a
    consumer it can pull a bounded number of events from, keep between tasks and close at will.
    """
    bound_connection_opening()  # its connection opens on the first receive
    if type(position) is int:  # a position with a replication segment filters as '<segment>:<sequence number>'
        position = geo_segments.sdk_position(position)
    return client._create_consumer(
        consumer_group,
        partition,
        position,
        on_events,
        event_position_inclusive=inclusive,
        owner_level=owner_level,
        prefetch=prefetch,
    )


def link_error(consumer: Any) -> BaseException | None:
    """The error the service detached the consumer's link with (``_handler._link._error``, an
    ``AMQPLinkError`` carrying its condition), if any.

    The SDK's ``receive`` retries some attach errors forever without raising; the link is the only
    place the service's answer shows (an epoch conflict, a missing consumer group).
    """
    handler = getattr(consumer, "_handler", None)
    error = getattr(getattr(handler, "_link", None), "_error", None)
    return error if isinstance(error, BaseException) else None


# -- one connection shared by the consumers of a process ---------------------------------------------------


class SharedConnections:
    """Stands in for a consumer client's connection manager and hands every consumer one connection.

    The SDK has a shared-connection mode, but its public clients cannot switch it on (its manager
    needs arguments they never pass). The first consumer opens a connection as usual; :func:`adopt`
    then makes it the one every later consumer of every client given this manager opens its link on.
    """

    def __init__(self) -> None:
        self.connection: Any = None

    def get_connection(self, *, endpoint: str, auth: Any = None) -> Any:
        return self.connection

    def close_connection(self) -> None:
        """The owner of the shared connection closes it (see :func:`close_connection`)."""

    def reset_connection_if_broken(self) -> None:
        """Ditto: a broken connection is replaced by its owner."""


def share_connection(client: Any, manager: SharedConnections) -> None:
    """Make ``client``'s consumers open their links on ``manager``'s connection (``client._conn_manager``), a
    connection whose opening gives up when unanswered (:func:`bound_connection_opening`)."""
    bound_connection_opening()
    client._conn_manager = manager


def new_consumer(
    client: Any,
    consumer_group: str,
    partition: str,
    position: Any,
    on_message: Callable[[Any], None],
    *,
    inclusive: bool = True,
    owner_level: int | None,
    prefetch: int,
) -> Any:
    """A consumer positioned at ``position`` (a sequence number, inclusive; or an offset or enqueued time's
    filter value, with ``inclusive`` as its position says), not opened yet (:func:`open_step`).

    Its link gets no keep-alive thread of its own (``_keep_alive``): the thread that reads the shared
    connection keeps it alive. Messages the SDK decodes itself (anything the tap leaves to it) go to
    ``on_message`` (``_message_received``, read when the handler is created).
    """
    consumer = create_consumer(
        client, consumer_group, partition, position, lambda _: None,
        inclusive=inclusive, owner_level=owner_level, prefetch=prefetch,
    )  # fmt: skip
    consumer._keep_alive = 0
    consumer._message_received = on_message
    return consumer


def open_step(consumer: Any) -> bool:
    """One step of opening (``_open``): connection, session, CBS, link; True once the link is attached.
    Raises what the SDK raises for a refused sign-in or a refused link."""
    return bool(consumer._open())


def adopt(consumer: Any, manager: SharedConnections) -> Any:
    """The connection the first consumer opened becomes the shared one: the consumer no longer closes
    it when it closes (``_handler._external_connection``)."""
    handler = consumer._handler
    handler._external_connection = True
    manager.connection = handler._connection
    return handler._connection


def consumer_link(consumer: Any) -> Any:
    """The consumer's AMQP link (``_handler._link``), or None before its handler made one."""
    return getattr(getattr(consumer, "_handler", None), "_link", None)


def has_connection(consumer: Any) -> bool:
    """True once the consumer's handler has a connection (``_handler._connection``)."""
    return getattr(getattr(consumer, "_handler", None), "_connection", None) is not None


def attach_sink(consumer: Any, sink: Any) -> None:
    """Mark the consumer's link as one whose transfers a frame tap decodes into ``sink`` (an attribute
    of ours on the SDK's link object, read by :class:`~eventhubs_spark.amqp.frame_reader.FrameTap`)."""
    link = consumer_link(consumer)
    if link is not None and getattr(link, "eventhubs_sink", None) is not sink:
        link.eventhubs_sink = sink


class LinkDetached(Exception):
    """A link the service detached without saying why (no error in its detach)."""


def link_detached(consumer: Any) -> BaseException | None:
    """Why the consumer's link ended (the service's error, or a detach without one), or None while attached."""
    error = link_error(consumer)
    if error is not None:
        return error
    link = consumer_link(consumer)
    state = getattr(getattr(link, "state", None), "name", "")
    if state in ("DETACHED", "DETACH_RCVD", "ERROR"):
        return LinkDetached(f"the service detached the link ({state})")
    return None


def close_consumer(consumer: Any) -> None:
    """Close the consumer's link, CBS links and session; a shared connection stays open. Returns at
    once: the consumer has no keep-alive thread to wait for (see :func:`new_consumer`)."""
    consumer.close()


def credit(link: Any) -> int:
    """The credit the link has left (``current_link_credit``)."""
    return int(link.current_link_credit)


def grant(link: Any, credit: int) -> None:
    """Give the service ``credit`` more deliveries on ``link`` (the SDK's flow)."""
    link.flow(link_credit=credit)


def keep_signed_in(consumer: Any) -> None:
    """Renew the consumer's CBS token when it is due (``_handler.client_ready``); raises when refused."""
    handler = consumer._handler
    if handler is not None:
        handler.client_ready()


def transport(connection: Any) -> Any:
    """The connection's socket transport (``_transport``); its ``sock`` is the (TLS) socket."""
    return connection._transport


def take_buffered_bytes(transport: Any) -> bytes:
    """Bytes the SDK's transport read but has not cut into frames yet (``_read_buffer``), taken away."""
    buffered = getattr(transport, "_read_buffer", None)
    if not isinstance(buffered, io.BytesIO):
        return b""
    data = buffered.read()
    transport._read_buffer = io.BytesIO()
    return data


def read_raw_frame(transport: Any) -> tuple[Any, int, Any]:
    """One frame as the transport reads it, undecoded (``read``): its 8-byte header, channel and body
    (None for a protocol header). Raises a time-out when none arrived in the socket's time."""
    return transport.read()


# -- AMQP over WebSockets: websocket-client's WebSocket, the sync transport's socket ---------------------


def websocket_of(transport: Any) -> Any | None:
    """The transport's websocket-client ``WebSocket`` when it carries AMQP over WebSockets, else None (its
    ``sock`` is then the TCP or TLS socket itself)."""
    sock = getattr(transport, "sock", None)
    return sock if hasattr(sock, "frame_buffer") and hasattr(sock, "cont_frame") else None


def websocket_socket(websocket: Any) -> Any:
    """The TCP or TLS socket under a WebSocket (``sock``): the frame tap reads it directly."""
    return websocket.sock


def websocket_between_frames(websocket: Any) -> bool:
    """True when websocket-client holds no part of a frame or fragmented message (``frame_buffer``'s
    header, length and buffer, ``cont_frame.cont_data``): the socket's next byte starts a frame, so a
    reader of the raw socket may take over."""
    frames = websocket.frame_buffer
    return (
        frames.header is None
        and frames.length is None
        and not frames.recv_buffer
        and websocket.cont_frame.cont_data is None
    )


def websocket_pong(websocket: Any, payload: bytes) -> None:
    """Answer a ping (``pong``: written under websocket-client's own lock, as the SDK's writes are)."""
    websocket.pong(payload)


def set_receive_frame(transport: Any, receive_frame: Callable[..., Any]) -> None:
    """Every frame the connection reads comes from ``receive_frame`` (the transport's, replaced)."""
    transport.receive_frame = receive_frame


def decode_frame(body: memoryview) -> Any:
    """The SDK's own decoding of one frame body into (performative, fields)."""
    from azure.eventhub._pyamqp._decode import decode_frame as sdk_decode_frame

    return sdk_decode_frame(body)


def decode_char(buffer: memoryview) -> tuple[memoryview, bytes]:
    """An AMQP char (constructor 0x73: a UTF-32 code point), which the SDK's decoder has no entry for: a Java
    producer's ``Character`` property made the SDK's receive stop at that event (a TypeError inside its
    decoder, retried for ever) and failed every task of the connector that met it. Decoded to its UTF-8, the
    form the SDK gives strings in."""
    return buffer[4:], chr(int.from_bytes(buffer[:4], "big")).encode("utf-8")


def fill_decoder_gaps() -> None:
    """Give the SDK's decoder (``_decode._DECODE_BY_CONSTRUCTOR``, a table by constructor byte) an entry for the
    char type where it has none. Only an empty entry is filled: nothing the SDK decodes today changes, and an SDK
    that learns the type keeps its own. (The decimals, 0x74, 0x84 and 0x94, stay unfilled: no SDK sends them.)"""
    from azure.eventhub._pyamqp import _decode

    global _FILLED
    table = _decode._DECODE_BY_CONSTRUCTOR
    if table[0x73] is None:
        table[0x73] = decode_char
    _FILLED = True


_FILLED = False


def decode_message(payload: bytes) -> Any:
    """The SDK's own decoding of one message's bytes into its ``Message`` (``_decode.decode_payload``):
    the reference the fast decoder agrees with, and its fallback for forms it does not handle."""
    from azure.eventhub._pyamqp._decode import decode_payload

    if not _FILLED:
        fill_decoder_gaps()
    return decode_payload(memoryview(payload))


def link_at(connection: Any, channel: int, handle: int) -> tuple[Any, Any] | None:
    """(session, link) that frames on ``channel`` with ``handle`` are for (``_incoming_endpoints``,
    ``_input_handles``), or None."""
    session = session_at(connection, channel)
    link = None if session is None else session._input_handles.get(handle)
    return None if link is None else (session, link)


def count_transfer(session: Any, link: Any, more: bool) -> int:
    """Move the session's and the link's counters for one transfer frame as the SDK's own handling does
    (``Session._incoming_transfer``, ``ReceiverLink._incoming_transfer``): windows and credit stay right.
    Returns the link's credit left."""
    if _count_incoming(session, link, more):
        session._outgoing_flow()
    return int(link.current_link_credit)


def _count_incoming(session: Any, link: Any, more: bool) -> bool:
    """The counter moves of :func:`count_transfer`; True when the session's window was reopened and the caller
    must send the session's flow (``_outgoing_flow``, a coroutine on an async session)."""
    session.next_incoming_id += 1
    session.remote_outgoing_window -= 1
    session.incoming_window -= 1
    reopened = session.incoming_window == 0
    if reopened:
        session.incoming_window = session.target_incoming_window
    if not more:
        link.current_link_credit -= 1
        link.delivery_count += 1
    return reopened


def count_transfers(session: Any, link: Any, count: int) -> int:
    """:func:`count_transfer` for ``count`` single-frame deliveries at once (a run the frame tap took in one
    pass): the session's window is reopened (``_outgoing_flow``) at the same transfers as one by one would.
    Returns the link's credit left."""
    left = count
    while left:
        step = min(left, session.incoming_window) if session.incoming_window > 0 else 1
        session.next_incoming_id += step
        session.remote_outgoing_window -= step
        session.incoming_window -= step
        if session.incoming_window <= 0:
            session.incoming_window = session.target_incoming_window
            session._outgoing_flow()
        left -= step
    link.current_link_credit -= count
    link.delivery_count += count
    return int(link.current_link_credit)


def listen(connection: Any, wait: float, batch: int) -> None:
    """Read and process frames for up to ``wait`` seconds (``listen``); raises a failed connection's error."""
    connection.listen(wait=wait, batch=batch)


class ConnectionEnded(Exception):
    """A connection that ended without an error of its own (closed by the service or by us)."""


def connection_closed(connection: Any) -> BaseException | None:
    """Why the connection ended (its error, carrying its condition, or its state), or None while usable."""
    error = getattr(connection, "_error", None)
    if isinstance(error, BaseException):
        return error
    state = getattr(connection, "state", None)
    name = getattr(state, "name", "")
    if name in ("END", "CLOSE_RCVD", "CLOSE_SENT", "DISCARDING", "CLOSE_PIPE", "OC_PIPE"):
        return ConnectionEnded(f"the connection was closed ({name})")
    return None


def close_connection(connection: Any) -> None:
    connection.close()


# -- what an error means: its AMQP condition ----------------------------------------------------------------

# The conditions the service answers with (AMQP 1.0's own, and the service's com.microsoft ones).
STOLEN = "amqp:link:stolen"  # a receiver with an equal or higher owner level (epoch) took the partition
UNAUTHORIZED = "amqp:unauthorized-access"  # a refused token, or missing rights
NOT_FOUND = "amqp:not-found"  # no such hub or consumer group
OUT_OF_RANGE = "com.microsoft:argument-out-of-range"  # e.g. a partition the hub does not have
TOO_LARGE = "amqp:link:message-size-exceeded"  # a message or batch over the hub's maximum size
RESOURCE_LIMIT = "amqp:resource-limit-exceeded"  # e.g. more than 5 non-epoch receivers on a partition
SERVER_BUSY = "com.microsoft:server-busy"
TIMEOUT = "com.microsoft:timeout"
DETACH_FORCED = "amqp:link:detach-forced"  # the service let an idle (or moved) link go
CONNECTION_FORCED = "amqp:connection:forced"  # the service closed an idle connection
INTERNAL = "amqp:internal-error"

# The put-token reply ($cbs) has a status code instead of a condition: the same meanings.
_TOKEN_STATUS = {401: UNAUTHORIZED, 403: UNAUTHORIZED, 404: NOT_FOUND}


def condition(error: object) -> str | None:
    """The AMQP condition an SDK error carries, as a symbol such as ``amqp:link:stolen``, found on the error
    or on what it wraps (pyamqp's ``condition``; the SDK's errors keep pyamqp's in ``details``; a refused
    put-token's status code counts as its condition), outermost first; None when there is none."""
    seen: list[object] = []
    todo: list[object] = [error]
    while todo:
        current = todo.pop(0)
        if current is None or isinstance(current, str | bytes) or any(current is s for s in seen):
            continue
        seen.append(current)
        status = getattr(current, "status_code", None)
        if isinstance(status, int) and status in _TOKEN_STATUS and type(current).__name__ == "TokenAuthFailure":
            return _TOKEN_STATUS[status]
        found = getattr(current, "condition", None)
        if found is not None:
            value = getattr(found, "value", found)
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            if text and text not in ("amqp:client-error", "amqp:unknown-error"):  # said nothing: look inside
                return text
        # the SDK's own errors keep only what follows the condition's first colon ("link:stolen") in ``error``
        kept = getattr(current, "error", None)
        if isinstance(kept, str) and type(current).__module__.startswith("azure.eventhub"):
            for known in _BY_CONDITION:
                if known.split(":", 1)[1] == kept:
                    return known
        todo += [getattr(current, "details", None), getattr(current, "__cause__", None),
                 getattr(current, "__context__", None)]  # fmt: skip
    return None


def error_type(error: object) -> type[EventHubsError] | None:
    """The connector's error type for an SDK error, by its AMQP condition (:func:`condition`); each type
    says whether trying again can help (``retriable``). None for an error without a known condition."""
    return _BY_CONDITION.get(condition(error) or "")


def is_timeout(error: BaseException) -> bool:
    """A socket read that waited its time and got nothing: Python 3.10+ raises ``TimeoutError`` for plain
    and TLS sockets alike (a non-blocking TLS socket, ``SSLWantReadError``), never text to look for."""
    return isinstance(error, TimeoutError | ssl.SSLWantReadError)


def is_stolen(error: object) -> bool:
    """True when a link was detached, or refused, because another receiver with an equal or higher owner
    level (epoch) holds the partition."""
    return condition(error) == STOLEN


_BY_CONDITION: dict[str, type[EventHubsError]] = {
    STOLEN: ReceiverDisconnectedError,
    UNAUTHORIZED: AuthenticationFailedError,
    NOT_FOUND: HubNotFoundError,
    OUT_OF_RANGE: EventHubsError,
    TOO_LARGE: SinkError,
    RESOURCE_LIMIT: TransientError,
    SERVER_BUSY: TransientError,
    TIMEOUT: TransientError,
    DETACH_FORCED: TransientError,
    CONNECTION_FORCED: TransientError,
    INTERNAL: TransientError,
}


# -- messages -------------------------------------------------------------------------------------------


def raw_message(event: Any) -> Any:
    """The AMQP message behind an ``EventData`` (``_raw_amqp_message``: the public
    ``raw_amqp_message`` builds a copy per event)."""
    return event._raw_amqp_message


def data_body(message: Any) -> Any:
    """A received message's data sections (``_data_body``), or None when it has none (value or
    sequence bodies): read without the per-event ``body`` property's conversions."""
    return message._data_body if hasattr(message, "_data_body") else None


# -- sending ---------------------------------------------------------------------------------------------

_BATCH_OVERHEAD = (5, 8)  # what the SDK adds per event inside a batch message (under / from 256 bytes)


def add_encoded(batch: Any, message: bytes) -> bool:
    """Add one already-encoded event message to an ``EventDataBatch`` as ``add()`` would (its data list
    ``_message[5]``, ``_size``, ``_count``, the same size rule); False when it does not fit.

    ``add()`` builds an outgoing message from an ``EventData`` and encodes it twice (for its size, then
    for the batch); the sink encodes its simple events once itself (client.encode).
    """
    size = len(message)
    after = batch._size + size + _BATCH_OVERHEAD[0 if size < 256 else 1]
    if after > batch.max_size_in_bytes:
        return False
    batch._message[5].append(message)
    batch._size = after
    batch._count += 1
    return True


def send_once(client: Any, batch: Any, timeout: float, shared: SendConnection | None = None) -> None:
    """Send ``batch`` (made by ``client.create_batch``) over ``client``'s producer for its partition, once.

    Why not ``send_batch``: after any failure it builds its producer again and sends the batch a second time,
    silently (retry_total=0 does not stop it). When the failure was a send that timed out, the first copy may
    have been stored all the same, so the hub would hold it twice and nobody would know; the sink retries
    itself, counts the events it sends again after an unanswered attempt, and says so. Uses
    ``_producers`` (a dict of partition id to producer, None until started), ``_start_producer`` and each
    producer's ``closed``; as ``send_batch`` does, the batch carries its own partition id or key.

    With ``shared`` (the client's connection manager, :func:`share_send_connection`), the producer's link is
    opened on the client's one connection first (again if the connection it was on ended), and the connection
    it opened becomes that one if there was none (``running``, ``_handler``, ``_do_retryable_operation``,
    ``_close_handler``).
    """
    from azure.eventhub._constants import ALL_PARTITIONS

    partition = batch._partition_id or ALL_PARTITIONS
    try:
        producer = client._producers.get(partition)
        if producer is None or producer.closed:
            client._start_producer(partition, timeout)
            producer = client._producers[partition]
        if shared is not None:
            if getattr(producer, "running", False):
                connection = getattr(producer._handler, "_connection", None)
                if connection is None or connection_closed(connection) is not None:
                    producer._close_handler()  # its link was on a connection that ended: open it on the live one
            if not getattr(producer, "running", False):
                _open_producer_once(producer, timeout)
                shared.adopt(producer)
    except Exception as exc:
        mark_unsent(exc)
        raise
    producer.send(batch, partition_key=None, timeout=timeout)


_UNSENT = "_eventhubs_unsent"


def mark_unsent(error: BaseException) -> None:
    """Say on ``error`` that it was raised before any byte of the send it failed was written (while its link or
    connection opened, or before): the service cannot have stored that send (see :func:`unsent`)."""
    with contextlib.suppress(AttributeError):  # an exception type with __slots__: taken as maybe sent
        setattr(error, _UNSENT, True)


def unsent(error: BaseException) -> bool:
    """Whether ``error`` failed its send before anything was written (:func:`mark_unsent`). Any other failure of a
    send may have been stored (its answer lost with the link or the connection), whatever its type says."""
    return bool(getattr(error, _UNSENT, False))


def _open_producer_once(producer: Any, timeout: float) -> None:
    """:func:`_open_producer` through the producer's ``_do_retryable_operation`` (as the SDK's ``_open_with_retry``
    calls ``_open``), so a failure comes out as the SDK's own error for it; the clients here make no retries."""
    producer._do_retryable_operation(lambda: _open_producer(producer, timeout), operation_need_param=False)


def _open_producer(producer: Any, timeout: float) -> None:
    """A producer's ``_open`` without its 50 ms sleep between steps: each step (the token, the session, the link)
    already waits on the socket for the service's answer (``client_ready`` listens), and a process opening a link
    for each of 1,024 partitions paid the sleeps 1,024 times over (about 0.15 s a link). Uses ``_client``
    (``_create_auth``, ``_auth_uri``, ``_conn_manager``), ``_create_handler``, ``_handler``,
    ``_amqp_transport``, ``_max_message_size_on_link`` and ``running``, as ``_open`` does. Unlike ``_open``, it
    gives up after ``timeout``: a link opened on a shared connection that went silent would wait for ever."""
    client = producer._client
    if producer._handler:
        producer._handler.close()
    auth = client._create_auth(auth_uri=client._auth_uri)
    producer._create_handler(auth)
    manager = client._conn_manager
    connection = manager.live() if isinstance(manager, SendConnection) else None
    producer._handler.open(connection=connection)
    deadline = time.monotonic() + timeout
    while not producer._handler.client_ready():
        if time.monotonic() > deadline:  # a shared connection gone silent (a black hole) never answers the link
            raise ConnectionError(f"a producer link was not opened within {timeout:.0f} s: the connection is silent")
    transport = producer._amqp_transport
    producer._max_message_size_on_link = (
        transport.get_remote_max_message_size(producer._handler) or transport.MAX_MESSAGE_LENGTH_BYTES
    )
    producer.running = True


class SendConnection:
    """A producer client's connection manager that puts every one of its producers' links on one connection.

    The SDK gives each partition's producer a connection of its own (its default connection manager), so a
    process sending to 1,024 partitions held 1,024 connections (and descriptors), and a namespace limits
    connections long before that. The SDK's own shared mode cannot be switched on from its public clients (its
    manager needs arguments they never pass), so: the first producer opens a connection as usual, :meth:`adopt`
    makes it the client's, and every later producer (each link with its own session, as the SDK makes them)
    opens on it. A connection that ended is dropped, and the next producer opens a new one. Uses the handler's
    ``_connection`` and ``_external_connection`` (an adopted connection is not closed with its first link) and
    the client's ``_conn_manager``.

    The SDK's synchronous connection is read by whichever thread sends: the caller lets one thread at a time
    use a client made with this manager.
    """

    def __init__(self) -> None:
        self.connection: Any = None

    def get_connection(self, *, endpoint: str, auth: Any = None) -> Any:
        """What the SDK's own calls get (its management requests, its ``_open``): no connection, so each opens one
        of its own as in the SDK's default mode. On the shared connection they would wait with no time-out if it
        went silent (a black hole), holding the client's lock: a partition lookup inside ``_start_producer`` did,
        and the sink stalled. Links the sink opens itself (:func:`_open_producer`) use :meth:`live`."""
        return None

    def live(self) -> Any:
        """The shared connection, if there is one that has not ended."""
        self.reset_connection_if_broken()
        return self.connection

    def adopt(self, producer: Any) -> None:
        """The connection ``producer`` opened becomes the client's, if the client has none that works."""
        handler: Any = getattr(producer, "_handler", None)
        connection = getattr(handler, "_connection", None)
        self.reset_connection_if_broken()
        if connection is None or connection is self.connection or self.connection is not None:
            return
        handler._external_connection = True
        self.connection = connection

    def close_connection(self) -> None:
        """The client closes (its links first): the connection goes with it."""
        connection, self.connection = self.connection, None
        if connection is not None:
            try:
                connection.close()
            except Exception:
                _LOG.debug("closing a shared send connection failed", exc_info=True)

    def reset_connection_if_broken(self) -> None:
        if self.connection is not None and connection_closed(self.connection) is not None:
            self.connection = None


OPENING_ANSWER_TIMEOUT = 60.0  # seconds: a connection opened with no bound of its own must be answered within this
_OPENING = threading.local()  # .bound: what connections opened on this thread wait at most (opening_bound)


@contextlib.contextmanager
def opening_bound(seconds: float) -> Iterator[None]:
    """Connections the SDK opens on this thread meanwhile give up opening after ``seconds`` unanswered (see
    :func:`bound_connection_opening`). For the sink's producers, which the SDK gives no idle time-out (nothing
    reads their connection between sends): they are bounded by ``eventhubs.connectionIdleTimeout`` all the same."""
    previous = getattr(_OPENING, "bound", None)
    _OPENING.bound = seconds if seconds > 0 else None
    try:
        yield
    finally:
        _OPENING.bound = previous


def bound_connection_opening() -> None:
    """Make every synchronous SDK connection in this process give up opening when the service does not answer.

    Why: the SDK's ``Connection._connect`` negotiates SASL on a socket it sets to block with no time-out
    (``SASLTransport.negotiate`` under ``block()``), and before the first frame arrives its idle time-out does not
    apply either: a connection accepted by something that then never answers (a connection that fell into a black
    hole as it opened, a proxy or load balancer that accepts and drops) held the sink's task in ``recv`` for ever,
    whatever ``eventhubs.operationTimeout`` said (a lane's first batch opens its connection). Here the opening
    (TCP, TLS, SASL and the protocol header) is watched: when it has not finished within the connection's idle
    time-out (the time in which a live service always shows a frame), or the thread's :func:`opening_bound`, or
    :data:`OPENING_ANSWER_TIMEOUT`, its socket is shut, the SDK's read ends, and the opening fails as a socket
    error, which the caller retries on a new connection. Idempotent; wraps
    ``azure.eventhub._pyamqp._connection.Connection._connect`` and reads its ``_idle_timeout`` and
    ``_transport.sock``."""
    from azure.eventhub._pyamqp import _connection
    from azure.eventhub._pyamqp.error import AMQPConnectionError, ErrorCondition

    cls: Any = _connection.Connection
    original = cls._connect
    if getattr(original, "_eventhubs_bounded", False):
        return

    def _connect(self: Any) -> None:
        own = getattr(self, "_idle_timeout", None)
        bound = float(own or getattr(_OPENING, "bound", None) or OPENING_ANSWER_TIMEOUT)
        cut = threading.Event()

        def shut() -> None:
            sock = getattr(getattr(self, "_transport", None), "sock", None)
            if sock is None:
                return
            cut.set()
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # the blocked recv returns, and the SDK's read fails

        timer = threading.Timer(bound, shut)
        timer.daemon = True
        timer.start()
        failure: Exception | None = None
        try:
            original(self)
        except Exception as exc:
            if not cut.is_set():
                raise
            failure = exc
        finally:
            timer.cancel()
        if cut.is_set():  # unanswered in time, or cut just as it finished: either way its socket is shut
            raise AMQPConnectionError(
                ErrorCondition.SocketError,
                description=f"the service did not answer the opening of a connection (TLS, sign-in, protocol "
                f"header) within {bound:g} s; the connection was closed (it is made again)",
            ) from failure

    _connect._eventhubs_bounded = True  # type: ignore[attr-defined]
    cls._connect = _connect
    honour_auth_timeout()


def honour_auth_timeout() -> None:
    """Make the SDK's send and receive clients wait for their sign-in only as long as their client was told.

    Why: ``EventHubProducerClient(auth_timeout=...)`` and the consumer's keep it in their configuration and give
    it to the token (``JWTTokenAuth``), but the pyamqp transport does not pass it to the ``SendClient`` or
    ``ReceiveClient`` that waits for the put-token's answer, which therefore always waits its default, 60 s. A
    connection that fell into a black hole after it opened and before the answer came held a sink's send (and,
    exactly once, each read back that settles one) 60 s, one after another. Wraps the synchronous and asyncio
    transports' ``create_send_client`` and ``create_receive_client`` (static methods) to pass the configuration's
    ``auth_timeout`` on, unless told otherwise; idempotent. The connector sets it from
    ``eventhubs.connectionIdleTimeout`` (:meth:`~eventhubs_spark.auth.network.NetworkSettings.sdk_kwargs`)."""
    from azure.eventhub._transport._pyamqp_transport import PyamqpTransport
    from azure.eventhub.aio._transport._pyamqp_transport_async import PyamqpTransportAsync

    for transport in (PyamqpTransport, PyamqpTransportAsync):
        for name in ("create_send_client", "create_receive_client"):
            original = transport.__dict__.get(name)
            if original is None:  # inherited: wrapped on the class that defines it
                continue
            function = original.__func__ if isinstance(original, staticmethod) else original
            if getattr(function, "_eventhubs_auth_timeout", False):
                continue
            setattr(transport, name, staticmethod(_passing_auth_timeout(function)))


def _passing_auth_timeout(create: Callable[..., Any]) -> Callable[..., Any]:
    def created(*args: Any, **kwargs: Any) -> Any:
        config = kwargs.get("config")
        seconds = getattr(config, "auth_timeout", None)
        if seconds:
            kwargs.setdefault("auth_timeout", seconds)
        return create(*args, **kwargs)

    created._eventhubs_auth_timeout = True  # type: ignore[attr-defined]
    return created


def share_send_connection(client: Any) -> SendConnection:
    """Make every producer of ``client`` (an ``EventHubProducerClient``) open its link on one connection (and
    every connection of the process's SDK give up opening when unanswered: :func:`bound_connection_opening`)."""
    bound_connection_opening()
    manager = SendConnection()
    client._conn_manager = manager
    return manager


def create_batch(client: Any, shared: SendConnection | None, timeout: float = 60.0, **kwargs: Any) -> Any:
    """``client.create_batch``; the first call opens the client's partition-less producer to learn the hub's
    maximum message size, and with ``shared`` its connection becomes the client's too.

    That producer is opened here (:func:`_open_producer`, giving up after ``timeout``) before the SDK would open
    it with its own ``_open``, which sleeps 50 ms between the steps of opening (the connection, the sign-in, the
    session, the link): 0.46 s a client on the emulator, nine sleeps, paid by the first write of every process
    for each of the sink's lanes, one after another. Uses ``_max_message_size_on_link`` and ``_producers``."""
    from azure.eventhub._constants import ALL_PARTITIONS

    producer = client._producers.get(ALL_PARTITIONS)
    if not client._max_message_size_on_link and producer is not None and not getattr(producer, "running", False):
        _open_producer_once(producer, timeout)
    batch = client.create_batch(**kwargs)
    if shared is not None:
        producer = client._producers.get(ALL_PARTITIONS)
        if producer is not None:
            shared.adopt(producer)
    return batch


def knows_partition(client: Any, partition_id: str | None) -> bool:
    """Whether ``client`` (a producer client) has its hub's partition ids, and ``partition_id`` among them (None:
    any partition). Uses ``_partition_ids``."""
    ids = client._partition_ids
    return bool(ids) and (partition_id is None or partition_id in ids)


def know_partitions(client: Any, partition_ids: list[str]) -> None:
    """Tell ``client`` its hub's partition ids, so its first producer for a partition does not ask the hub itself:
    the SDK's ``_get_partitions`` opens a management connection of its own for that (0.36 s on the emulator, once
    a client: every lane of every process), where the process keeps one open. Partitions added since the client
    last knew are added. Uses ``_partition_ids`` and ``_producers`` (a partition's entry None until started),
    as ``_get_partitions`` sets them."""
    known = list(client._partition_ids or [])
    for pid in partition_ids:
        if pid not in known:
            known.append(pid)
            client._producers.setdefault(pid, None)
    client._partition_ids = known


# -- management -------------------------------------------------------------------------------------------


async def open_management(client: Any) -> tuple[Any, Any]:
    """(auth, management link) on one kept-open connection of an async producer client.

    The public ``get_partition_properties`` opens a connection, a session and a CBS exchange per
    call (0.1-0.5 s each); planning asks for every partition on every trigger. Uses
    ``_create_auth_async``, ``_amqp_transport.create_mgmt_client``, ``_address`` and ``_config``.
    """
    auth = await client._create_auth_async()
    mgmt = client._amqp_transport.create_mgmt_client(client._address, mgmt_auth=auth, config=client._config)
    await mgmt.open_async()
    return auth, mgmt


def management_credit(mgmt: Any) -> int | None:
    """The credit the ``$management`` request link has now (``_mgmt_links``, ``_mgmt_link``, ``_request_link``,
    ``current_link_credit``), None before the first request made the link. Read when no request is unanswered,
    it is what the service granted and has not used up: the SDK's link does not wait for credit when it runs out
    (it resets its count to its own default and sends on), so the caller must not send more than this at once."""
    credit = getattr(_management_link(mgmt, "_request_link"), "current_link_credit", None)
    return int(credit) if isinstance(credit, int) else None


def _management_link(mgmt: Any, side: str) -> Any:
    """The ``$management`` node's request or response link (``side``: ``_request_link``, ``_response_link``) of an
    open management client (``_mgmt_links``, ``_mgmt_link``); None before the first request made them."""
    operation = getattr(mgmt, "_mgmt_links", {}).get(b"$management")
    return getattr(getattr(operation, "_mgmt_link", None), side, None)


async def keep_management_answers_coming(mgmt: Any, wanted: int) -> bool:
    """Give the ``$management`` response link credit again when fewer than ``wanted`` answers are left of it; True
    when it did. Why: the SDK's response link is granted its credit (10,000) once, when it attaches, and never
    again (``ReceiverLink`` counts it down and sends no flow), because the SDK opens a new link for every call. On
    the connector's kept link the 10,001st answer had no credit, the service held it (as AMQP says it must), and
    every ~10th trigger at 1,024 partitions (every ~300th at 32) waited for its attempt's time-out (30 s) and
    reconnected. Uses ``_mgmt_links``, ``_mgmt_link``, ``_response_link``, ``current_link_credit``, ``link_credit``
    and ``flow``."""
    response = _management_link(mgmt, "_response_link")
    return response is not None and await keep_answers_coming(response, wanted)


async def keep_answers_coming(response: Any, wanted: int) -> bool:
    """:func:`keep_management_answers_coming` on the response link itself."""
    credit = getattr(response, "current_link_credit", None)
    if not isinstance(credit, int) or credit >= wanted:
        return False
    await response.flow(link_credit=max(int(getattr(response, "link_credit", 0) or 0), 2 * wanted))
    return True


@dataclass
class ManagementWire:
    """What :class:`~eventhubs_spark.amqp.management_pipe.ManagementPipe` writes and reads on: the management
    client's connection, its transport, the session and the ``$management`` request and response links."""

    connection: Any
    transport: Any
    session: Any
    request: Any
    response: Any


def management_wire(mgmt: Any) -> ManagementWire | None:
    """The open ``$management`` links of an async management client and what carries them, or None before a
    request through the SDK made them or when one of the internals is missing (MANAGEMENT_INTERNALS)."""
    request, response = _management_link(mgmt, "_request_link"), _management_link(mgmt, "_response_link")
    if request is None or response is None or _missing(request, MANAGEMENT_INTERNALS):
        return None
    session = request._session
    if response._session is not session or not _attached(request) or not _attached(response):
        return None
    connection = session._connection
    return ManagementWire(connection, connection._transport, session, request, response)


def _attached(link: Any) -> bool:
    return getattr(getattr(link, "state", None), "name", "") == "ATTACHED"


def management_broken(wire: ManagementWire) -> str | None:
    """Why the pipe's connection or links can no longer carry requests, or None while they can."""
    closed = connection_closed(wire.connection)
    if closed is not None:
        return str(closed) or type(closed).__name__
    for name, link in (("request", wire.request), ("response", wire.response)):
        if not _attached(link):
            return f"the {name} link is {getattr(getattr(link, 'state', None), 'name', '?')}"
    return None


def remote_max_frame_size(connection: Any) -> int:
    """The largest frame the peer takes (``_remote_max_frame_size``)."""
    return int(getattr(connection, "_remote_max_frame_size", 0) or 512)


def session_at(connection: Any, channel: int) -> Any:
    """The session frames on ``channel`` are for (``_incoming_endpoints``), or None."""
    return connection._incoming_endpoints.get(channel)


class FrameSource:
    """Frames off an async transport for a while, undecoded: over TCP and TLS read in bulk from its stream reader
    (``reader``, after the bytes its own reader had buffered, ``_read_buffer``) and cut here, one ``recv`` for many
    frames; elsewhere (WebSockets) one by one through the transport's ``read``. :meth:`stop` gives the bytes of a
    frame not yet whole back to the transport, so its own reader goes on from there."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        reader = getattr(transport, "reader", None)
        self.reader = reader if isinstance(reader, asyncio.StreamReader) else None
        self.data = take_buffered_bytes(transport) if self.reader is not None else b""
        self.pos = 0

    async def next(self) -> tuple[int, memoryview | None]:
        """The next frame's channel and its body from the performative on (None for an empty frame)."""
        if self.reader is None:
            _header, channel, body = await self.transport.read()
            return channel, (body if body is not None and len(body) else None)
        while True:
            data, pos = self.data, self.pos
            if len(data) - pos >= 8:
                size, doff, _type, channel = _FRAME_HEADER(data, pos)
                if len(data) - pos >= size:
                    self.pos = pos + size
                    return channel, (memoryview(data)[pos + 4 * doff : pos + size] if size > 4 * doff else None)
            chunk = await self.reader.read(1 << 16)
            if not chunk:
                raise ConnectionError("the service closed the connection")
            self.data, self.pos = data[pos:] + chunk, 0

    def stop(self) -> None:
        if self.reader is not None:
            self.transport._read_buffer = io.BytesIO(self.data[self.pos :])
            self.data, self.pos = b"", 0


_FRAME_HEADER = struct.Struct(">IBBH").unpack_from


def note_frame_received(connection: Any) -> None:
    """The connection heard from its peer (``_last_frame_received_time``: its idle time-out counts from it)."""
    connection._last_frame_received_time = time.time()


async def process_frame(connection: Any, channel: int, body: memoryview) -> None:
    """Hand a frame read by the connector to the SDK, decoded, as its own reader would (``_process_incoming_frame``)."""
    await connection._process_incoming_frame(channel, decode_frame(body))


async def write(wire: ManagementWire, data: bytes) -> None:
    """Frames written by the connector on the SDK's transport (``write``, ``_last_frame_sent_time``)."""
    await wire.transport.write(data)
    wire.connection._last_frame_sent_time = time.time()


def count_sent(session: Any, link: Any) -> None:
    """Move the counters for one transfer the connector wrote as the SDK's own sending does
    (``Session._outgoing_transfer``, ``SenderLink._outgoing_transfer``)."""
    session.next_outgoing_id += 1
    session.remote_incoming_window -= 1
    session.outgoing_window -= 1
    link.delivery_count += 1
    link.current_link_credit -= 1


async def count_received(session: Any, link: Any, more: bool) -> None:
    """:func:`count_transfer` on an async session (its ``_outgoing_flow`` is a coroutine)."""
    if _count_incoming(session, link, more):
        await session._outgoing_flow()


def management_message(client: Any, properties: dict[str, str]) -> Any:
    """A ``$management`` request message (``_amqp_transport.build_message``)."""
    return client._amqp_transport.build_message(application_properties=dict(properties))


# -- the contract ---------------------------------------------------------------------------------------

# (what, attribute path) the functions above read; checked on live objects by missing_internals().
# A consumer opened on a shared connection, with the frame reader on it (amqp.receive_connections,
# amqp.frame_reader).
CONSUMER_INTERNALS = (
    "_keep_alive",
    "_message_received",
    "_open",
    "_handler._external_connection",
    "_handler._connection",
    "_handler._connection._transport.receive_frame",
    "_handler._connection._transport._read_buffer",
    "_handler._connection._transport.sock",
    "_handler._connection._transport.read",
    "_handler._connection._incoming_endpoints",
    "_handler._connection.listen",
    "_handler._connection._error",
    "_handler._connection.state",
    "_handler._link._error",
    "_handler._link.state",
    "_handler._link.current_link_credit",
    "_handler._link.delivery_count",
    "_handler._link.flow",
    "_handler._link._session.next_incoming_id",
    "_handler._link._session.remote_outgoing_window",
    "_handler._link._session.incoming_window",
    "_handler._link._session.target_incoming_window",
    "_handler._link._session._outgoing_flow",
    "_handler._link._session._input_handles",
    "_handler.client_ready",
)
# A consumer's WebSocket (websocket-client), when it reads AMQP over WebSockets (websocket_* above).
WEBSOCKET_INTERNALS = (
    "_handler._connection._transport.sock.sock",
    "_handler._connection._transport.sock.frame_buffer.header",
    "_handler._connection._transport.sock.frame_buffer.length",
    "_handler._connection._transport.sock.frame_buffer.recv_buffer",
    "_handler._connection._transport.sock.cont_frame.cont_data",
    "_handler._connection._transport.sock.pong",
)
CLIENT_INTERNALS = ("_create_consumer", "_conn_manager")  # EventHubConsumerClient
MODULE_INTERNALS = (  # module-level functions (decode_frame, decode_message)
    "azure.eventhub._pyamqp._decode.decode_frame",
    "azure.eventhub._pyamqp._decode.decode_payload",
    "azure.eventhub._pyamqp._decode._DECODE_BY_CONSTRUCTOR",  # fill_decoder_gaps
    "azure.eventhub._pyamqp.error.AuthenticationException",  # sign_in_wrappers
    "azure.eventhub._constants.ALL_PARTITIONS",  # send_once
    "azure.eventhub._pyamqp._connection.Connection",  # bound_connection_opening (its _connect, _idle_timeout)
    "azure.eventhub._transport._pyamqp_transport.PyamqpTransport",  # honour_auth_timeout (create_*_client)
)
BATCH_INTERNALS = ("_message", "_size", "_count", "max_size_in_bytes", "_partition_id")  # EventDataBatch
PRODUCER_INTERNALS = ("_producers", "_start_producer", "_conn_manager")  # EventHubProducerClient (send_once)
PARTITION_PRODUCER_INTERNALS = (  # EventHubProducer on a shared connection (send_once, _open_producer, SendConnection)
    "running",
    "_client._create_auth",
    "_client._auth_uri",
    "_client._address",
    "_create_handler",
    "_handler._connection",
    "_handler._external_connection",
    "_handler.client_ready",
    "_amqp_transport.get_remote_max_message_size",
    "_amqp_transport.MAX_MESSAGE_LENGTH_BYTES",
    "_max_message_size_on_link",
    "_do_retryable_operation",
    "_close_handler",
)
# A $management link (either side) of an open async management client (management_wire and what the pipe reads).
MANAGEMENT_INTERNALS = (
    "_session.channel",
    "_session.next_outgoing_id",
    "_session.remote_incoming_window",
    "_session.outgoing_window",
    "_session.next_incoming_id",
    "_session.remote_outgoing_window",
    "_session.incoming_window",
    "_session.target_incoming_window",
    "_session._outgoing_flow",
    "_session._connection._transport.read",
    "_session._connection._transport._read_buffer",
    "_session._connection._transport.write",
    "_session._connection._incoming_endpoints",
    "_session._connection._process_incoming_frame",
    "_session._connection._remote_max_frame_size",
    "_session._connection._last_frame_received_time",
    "_session._connection._last_frame_sent_time",
    "handle",
    "remote_handle",
    "state",
    "delivery_count",
    "current_link_credit",
    "link_credit",
    "flow",
)
ASYNC_CLIENT_INTERNALS = (  # azure.eventhub.aio.EventHubProducerClient, the management link's transport
    "_create_auth_async",
    "_amqp_transport.create_mgmt_client",
    "_amqp_transport.build_message",
    "_address",
    "_config",
)


def sign_in_wrappers() -> tuple[type[BaseException], ...]:
    """The SDK's exceptions for a failed sign-in whose AMQP condition says nothing: what they wrap decides
    (the SDK reports some failures to connect this way: a host name that does not resolve over WebSockets,
    a custom endpoint that refuses)."""
    from azure.eventhub._pyamqp.error import AuthenticationException  # TokenAuthFailure is one too
    from azure.eventhub.exceptions import AuthenticationError

    return (AuthenticationError, AuthenticationException)


def missing_internals(
    consumer: Any = None,
    client: Any = None,
    async_client: Any = None,
    batch: Any = None,
    producer: Any = None,
    partition_producer: Any = None,
) -> list[str]:
    """The internals this module uses that ``consumer`` (opened by the engine), ``client`` (an
    ``EventHubConsumerClient``), ``async_client`` (an async ``EventHubProducerClient``), ``batch`` (an
    ``EventDataBatch``), ``producer`` (an ``EventHubProducerClient``) or ``partition_producer`` (one of its
    partitions' ``EventHubProducer``, opened) lack; empty when the installed SDK has them all."""
    missing = []
    consumer_transport = getattr(getattr(getattr(consumer, "_handler", None), "_connection", None), "_transport", None)
    if websocket_of(consumer_transport) is not None:
        missing.extend(_missing(consumer, WEBSOCKET_INTERNALS))
    for path in MODULE_INTERNALS:
        module, _, name = path.rpartition(".")
        try:
            found = hasattr(importlib.import_module(module), name)
        except ImportError:
            found = False
        if not found:
            missing.append(path)
    for obj, paths in (
        (consumer, CONSUMER_INTERNALS),
        (client, CLIENT_INTERNALS),
        (async_client, ASYNC_CLIENT_INTERNALS),
        (batch, BATCH_INTERNALS),
        (producer, PRODUCER_INTERNALS),
        (partition_producer, PARTITION_PRODUCER_INTERNALS),
    ):
        if obj is not None:
            missing.extend(_missing(obj, paths))
    return missing


def _missing(obj: Any, paths: tuple[str, ...]) -> list[str]:
    out = []
    for path in paths:
        target = obj
        for name in path.split("."):
            if not hasattr(target, name):
                out.append(f"{type(obj).__name__}.{path}")
                break
            target = getattr(target, name)
    return out
