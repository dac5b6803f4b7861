"""The SDK's internals the sink uses.

They are a batch filled with already-encoded events, one send made once (no silent second send), every
partition's producer link on one connection, and what the producer knows of the hub's partitions.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from eventhubs_spark.amqp.sdk.opening import bound_connection_opening
from eventhubs_spark.amqp.sdk.receiving import connection_closed

_LOG = logging.getLogger(__name__)


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
