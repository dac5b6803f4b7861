"""The SDK's connection opening, bounded by time-outs.

Every synchronous connection gives up opening when the service does not answer (SASL on a socket set to block
with no time-out), and the sign-in's time-out is honoured.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

_LOG = logging.getLogger(__name__)


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
