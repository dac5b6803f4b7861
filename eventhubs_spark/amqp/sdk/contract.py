"""The contract with the installed SDK: every internal the seam reads, checked on live objects.

The seam is the functions of :mod:`eventhubs_spark.amqp.sdk`; a contract test runs the check, so an SDK release
that drops an attribute fails CI, not a query.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from eventhubs_spark.amqp.sdk.receiving import websocket_of

_LOG = logging.getLogger(__name__)


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
        missing.extend(missing_attributes(consumer, WEBSOCKET_INTERNALS))
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
            missing.extend(missing_attributes(obj, paths))
    return missing


def missing_attributes(obj: Any, paths: tuple[str, ...]) -> list[str]:
    out = []
    for path in paths:
        target = obj
        for name in path.split("."):
            if not hasattr(target, name):
                out.append(f"{type(obj).__name__}.{path}")
                break
            target = getattr(target, name)
    return out
