"""The SDK's internals the receive path uses.

They are consumers on one shared connection, their links' credit, the frames the connection reads (plain and
over WebSockets), and the messages they hold.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from typing import Any

from eventhubs_spark.amqp.sdk.opening import bound_connection_opening
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
    if count_incoming(session, link, more):
        session._outgoing_flow()
    return int(link.current_link_credit)


def count_incoming(session: Any, link: Any, more: bool) -> bool:
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


# -- messages -------------------------------------------------------------------------------------------


def raw_message(event: Any) -> Any:
    """The AMQP message behind an ``EventData`` (``_raw_amqp_message``: the public
    ``raw_amqp_message`` builds a copy per event)."""
    return event._raw_amqp_message


def data_body(message: Any) -> Any:
    """A received message's data sections (``_data_body``), or None when it has none (value or
    sequence bodies): read without the per-event ``body`` property's conversions."""
    return message._data_body if hasattr(message, "_data_body") else None


def session_at(connection: Any, channel: int) -> Any:
    """The session frames on ``channel`` are for (``_incoming_endpoints``), or None."""
    return connection._incoming_endpoints.get(channel)
