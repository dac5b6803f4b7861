"""Every use of the azure-eventhub SDK's private internals, in one place.

The connector keeps the SDK for connections, sign-in, links and flow control, and leans on a few of
its private attributes where the public API costs too much or cannot do what a pooled receiver
needs. Each function here says which internals it uses and why. :func:`missing_internals` checks
that an installed SDK still has all of them; a contract test runs it against a live consumer and
the management client, so an SDK release that drops one fails CI instead of a user's query.

Where an attribute is missing at run time, the function falls back to the SDK's public behaviour
(slower, never wrong) unless the internal is essential, where it raises at once.
"""

from __future__ import annotations

import io
import logging
import select
from collections.abc import Callable
from typing import Any

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
    return client._create_consumer(
        consumer_group,
        partition,
        position,
        on_events,
        event_position_inclusive=inclusive,
        owner_level=owner_level,
        prefetch=prefetch,
    )


def link_error(consumer: Any) -> str | None:
    """The error the service detached the consumer's link with (``_handler._link._error``), if any.

    The SDK's ``receive`` retries some attach errors forever without raising; the link is the only
    place the service's answer shows (an epoch conflict, a missing consumer group).
    """
    handler = getattr(consumer, "_handler", None)
    error = getattr(getattr(handler, "_link", None), "_error", None)
    return None if error is None else str(error)


def connection_error(consumer: Any) -> str | None:
    """The error the consumer's connection ended with (``_handler._connection._error``), if any."""
    connection = getattr(getattr(consumer, "_handler", None), "_connection", None)
    error = getattr(connection, "_error", None)
    return None if error is None else str(error)


def receive_frames(consumer: Any, frames: int, prefetch: int) -> None:
    """Run one ``receive`` that reads at most ``frames`` transfer frames (``consumer._prefetch``).

    The SDK reads up to ``_prefetch`` frames per call and returns early only when the socket goes
    quiet, so under a steady trickle of new events it would wait for a whole prefetch window (500
    events at 50 events/s: 10 s) although the range needs far fewer. The link credit stays the full
    prefetch (see :func:`bounded_reads`).
    """
    consumer._prefetch = frames
    try:
        consumer.receive(batch=True, max_batch_size=frames, max_wait_time=None)
        buffer_socket_reads(consumer)
    finally:
        consumer._prefetch = prefetch


class _Delivered:
    """What the SDK consumer remembers of the last event handed out: its offset, to reconnect after it.

    The SDK reads ``offset`` only when it reconnects, so it is decoded then, not for every event.
    """

    __slots__ = ("message",)

    def __init__(self) -> None:
        self.message: Any = None

    @property
    def offset(self) -> str | None:
        from ..arrow import offset_text

        return offset_text((self.message.message_annotations or {}).get(b"x-opt-offset"))


def deliver_raw(consumer: Any) -> bool:
    """Make an SDK consumer hand out the received AMQP messages themselves instead of ``EventData``.

    Building an ``EventData`` per event costs more CPU than decoding the AMQP frame; the Arrow batch is
    built straight from the messages instead (:func:`eventhubs_spark.arrow.messages_to_batch`). The
    consumer still needs the last delivered event's offset to reconnect after it, which is kept.
    Only for the SDK's own (pyamqp) transport; with another one, events stay ``EventData``.
    """
    transport = getattr(consumer, "_amqp_transport", None)
    buffer = getattr(consumer, "_message_buffer", None)
    if getattr(transport, "KIND", None) != "pyamqp" or buffer is None:
        return False
    last = _Delivered()

    def next_message() -> Any:
        message = buffer.popleft()
        last.message = message
        consumer._last_received_event = last
        return message

    consumer._next_message_in_buffer = next_message
    return True


_READ_CHUNK = 64 * 1024


def buffer_socket_reads(consumer: Any) -> None:
    """Make the consumer's AMQP transport read the socket in large chunks.

    The SDK's transport reads every frame with two ``recv`` calls of exactly the header's and the
    body's size: two system calls per event, a tenth of a task's read loop. Reading up to 64 KiB at
    a time and serving the frames from that buffer keeps its exact semantics (the transport already
    serves reads from ``_read_buffer`` first, and the socket is only read when that is empty, so a
    timeout or an error never strands buffered bytes). Only the SDK's own socket transport is
    changed, per connection; anything else is left alone.
    """
    handler = getattr(consumer, "_handler", None)
    transport = getattr(getattr(handler, "_connection", None), "_transport", None)
    if transport is None or getattr(transport, "_chunked", False):
        return
    if not any(cls.__name__ == "SSLTransport" for cls in type(transport).__mro__):
        return
    if not all(hasattr(transport, name) for name in ("_read", "_read_buffer", "sock")):
        return  # another SDK version: keep its own reads
    original = transport._read
    chunk = bytearray(_READ_CHUNK)
    chunk_view = memoryview(chunk)

    def read(n: int, initial: bool = False, buffer: Any = None, **kwargs: Any) -> Any:
        view = buffer if buffer is not None else memoryview(bytearray(n))
        got = transport._read_buffer.readinto(view)
        if got == n:
            return view
        if got:  # a partial buffer: let the SDK's own read finish this frame part
            transport._read_buffer = io.BytesIO(bytes(view[:got]))
            return original(n, initial=initial, buffer=buffer, **kwargs)
        try:
            received = transport.sock.recv_into(chunk_view)
        except TimeoutError:
            transport._read_buffer = io.BytesIO()  # as the SDK's read leaves it: nothing read
            raise
        except Exception:
            return original(n, initial=initial, buffer=buffer, **kwargs)  # the SDK's own handling: EINTR, errors
        if not received:
            raise OSError("Server unexpectedly closed connection")
        take = min(received, n)
        view[:take] = chunk_view[:take]
        if take < received:
            transport._read_buffer = io.BytesIO(bytes(chunk_view[take:received]))
            return view
        if take == n:
            return view
        transport._read_buffer = io.BytesIO(bytes(view[:take]))
        return original(n, initial=initial, buffer=buffer, **kwargs)

    transport._read = read
    transport._chunked = True


def bounded_reads(consumer: Any, prefetch: int) -> None:
    """Links are always created with the full prefetch as their credit, whatever a read asks for."""
    create = consumer._create_handler

    def create_with_full_credit(auth: Any) -> None:
        asked = consumer._prefetch
        consumer._prefetch = prefetch
        try:
            create(auth)
        finally:
            consumer._prefetch = asked

    consumer._create_handler = create_with_full_credit


def drain_pending_frames(consumer: Any, limit: int) -> None:
    """Process the frames already waiting on an SDK consumer's connection, without blocking.

    Transfers land in the consumer's buffer as they would on its next ``receive``; a detach sets the
    link's error. Reads only while bytes are there (in the transport's buffer, TLS's, or the socket),
    so an idle connection costs one ``select`` with no wait. Anything unexpected is left for the next
    ``receive`` to meet and handle as it always does.
    """
    handler = getattr(consumer, "_handler", None)
    connection: Any = getattr(handler, "_connection", None)
    transport = getattr(connection, "_transport", None)
    sock = getattr(transport, "sock", None)
    link = getattr(handler, "_link", None)
    if sock is None or link is None or not hasattr(connection, "listen"):
        return
    try:
        for _ in range(limit):
            if getattr(link, "_error", None) is not None or not _input_waiting(transport, sock):
                return
            connection.listen(wait=False, batch=1)
    except Exception:
        _LOG.debug("reading pending frames failed; the next receive meets it", exc_info=True)


def _input_waiting(transport: Any, sock: Any) -> bool:
    buffered = getattr(transport, "_read_buffer", None)
    if isinstance(buffered, io.BytesIO) and buffered.tell() < len(buffered.getbuffer()):
        return True
    pending = getattr(sock, "pending", None)  # bytes TLS has decrypted but not handed out
    if callable(pending) and pending() > 0:
        return True
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


# -- messages -------------------------------------------------------------------------------------------


def raw_message(event: Any) -> Any:
    """The AMQP message behind an ``EventData`` (``_raw_amqp_message``: the public
    ``raw_amqp_message`` builds a copy per event)."""
    return event._raw_amqp_message


def data_body(message: Any) -> Any:
    """A received message's data sections (``_data_body``), or None when it has none (value or
    sequence bodies): read without the per-event ``body`` property's conversions."""
    return message._data_body if hasattr(message, "_data_body") else None


def is_event_data(item: Any) -> bool:
    return hasattr(item, "_raw_amqp_message")


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


def management_message(client: Any, properties: dict[str, str]) -> Any:
    """A ``$management`` request message (``_amqp_transport.build_message``)."""
    return client._amqp_transport.build_message(application_properties=dict(properties))


# -- the contract ---------------------------------------------------------------------------------------

# (what, attribute path) the functions above read; checked on live objects by missing_internals().
CONSUMER_INTERNALS = (
    "_prefetch",
    "_last_received_event",  # set by deliver_raw; the SDK reconnects after its offset
    "_create_handler",
    "_message_buffer",
    "_next_message_in_buffer",
    "_amqp_transport.KIND",
    "_handler._link._error",
    "_handler._connection._error",
    "_handler._connection.listen",
    "_handler._connection._transport._read",
    "_handler._connection._transport._read_buffer",
    "_handler._connection._transport.sock",
)
CLIENT_INTERNALS = ("_create_consumer",)  # EventHubConsumerClient
ASYNC_CLIENT_INTERNALS = (  # azure.eventhub.aio.EventHubProducerClient, the management link's transport
    "_create_auth_async",
    "_amqp_transport.create_mgmt_client",
    "_amqp_transport.build_message",
    "_address",
    "_config",
)


def missing_internals(consumer: Any = None, client: Any = None, async_client: Any = None) -> list[str]:
    """The internals this module uses that ``consumer`` (opened: it has received once), ``client`` (an
    ``EventHubConsumerClient``) or ``async_client`` (an async ``EventHubProducerClient``) lack; empty
    when the installed SDK has them all."""
    missing = []
    for obj, paths in (
        (consumer, CONSUMER_INTERNALS),
        (client, CLIENT_INTERNALS),
        (async_client, ASYNC_CLIENT_INTERNALS),
    ):
        if obj is None:
            continue
        for path in paths:
            target = obj
            for name in path.split("."):
                if not hasattr(target, name):
                    missing.append(f"{type(obj).__name__}.{path}")
                    break
                target = getattr(target, name)
    return missing
