"""The SDK's internals the pipelined management requests use.

They are the ``$management`` links, their session's windows and the frames the connection reads.
"""

from __future__ import annotations

import asyncio
import io
import logging
import struct
import time
from dataclasses import dataclass
from typing import Any

from eventhubs_spark.amqp.sdk.contract import MANAGEMENT_INTERNALS, missing_attributes
from eventhubs_spark.amqp.sdk.receiving import connection_closed, count_incoming, decode_frame, take_buffered_bytes

_LOG = logging.getLogger(__name__)


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
    if request is None or response is None or missing_attributes(request, MANAGEMENT_INTERNALS):
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
    if count_incoming(session, link, more):
        await session._outgoing_flow()


def management_message(client: Any, properties: dict[str, str]) -> Any:
    """A ``$management`` request message (``_amqp_transport.build_message``)."""
    return client._amqp_transport.build_message(application_properties=dict(properties))
