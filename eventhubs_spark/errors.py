"""The connector's exception types, what an SDK error means, and the one retry loop.

Each type says whether trying again can help (``retriable``). :func:`call_with_retries` retries only
what may heal, under a deadline, and ends in :class:`EventHubsTimeoutError` raised ``from`` the last
cause; management requests and sends both use it. What an SDK error means is decided by its AMQP
condition, in the SDK seam (:func:`eventhubs_spark.amqp.sdk.error_type`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class EventHubsError(Exception):
    """Base class; ``retriable`` tells a retry loop whether another attempt may succeed."""

    retriable = False


class OptionError(EventHubsError, ValueError):
    """A bad option: the message names the option and shows a valid value, which ``example`` holds too
    (None only while the option's own example is still to be added: see ``options.parse_options``)."""

    def __init__(self, message: str, example: str | None = None) -> None:
        super().__init__(message)
        self.example = example

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.example))


class DataLossError(EventHubsError):
    """Events the query had not read are gone (retention, or a trimmed partition)."""


class ReceiverDisconnectedError(EventHubsError):
    """Another reader with a higher owner level (epoch) took the partition."""


class EventHubsTimeoutError(EventHubsError, TimeoutError):
    """An operation did not finish within its timeout; the cause is chained."""


class TransientError(EventHubsError):
    """A failure that another attempt may not see (server busy, dropped connection)."""

    retriable = True


class SinkError(EventHubsError, ValueError):
    """Rows the sink cannot send: the message names the column or the event and what is expected."""


class AuthenticationFailedError(EventHubsError, PermissionError):
    """Signing in failed: the message names ``eventhubs.auth`` and the options to check, never a secret.

    Not retriable: a wrong key or a missing role assignment does not heal by itself, and retrying
    until ``eventhubs.operationTimeout`` would only hide the cause for minutes.
    """


class HubNotFoundError(EventHubsError, LookupError):
    """The namespace has no event hub of that name: the message names the hub, the namespace and the
    options that set them. Not retriable: a misspelt name does not appear by itself."""


class NetworkError(EventHubsError, ConnectionError):
    """The namespace (or the proxy on the way) could not be reached: the message says where, over which
    transport, and which option to change. ``retriable`` when it may heal (a refused or unreachable
    port, a name that did not resolve); an untrusted certificate or a proxy that refuses does not."""

    def __init__(self, message: str, example: str | None = None, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.example = example
        self.retriable = retriable

    def __reduce__(self) -> tuple[Any, ...]:
        return (_network_error, (str(self), self.example, self.retriable))


def _network_error(message: str, example: str | None, retriable: bool) -> NetworkError:
    return NetworkError(message, example, retriable=retriable)


# Every type above by name: an error raised in another process (the executor's receiver service) is
# raised again in the task as the same type.
ERROR_TYPES: dict[str, type[EventHubsError]] = {
    cls.__name__: cls
    for cls in (
        EventHubsError,
        OptionError,
        DataLossError,
        ReceiverDisconnectedError,
        EventHubsTimeoutError,
        TransientError,
        SinkError,
        AuthenticationFailedError,
        HubNotFoundError,
        NetworkError,
    )
}


# -- data loss -----------------------------------------------------------------------------------------


def data_loss_error(hub: str, partition: str, start: int, end: int, begins_at: int | None = None) -> DataLossError:
    """Events ``[start, end)`` are no longer in the hub; ``begins_at``: where the partition begins now."""
    now = f"; the partition now begins at {begins_at}" if begins_at is not None else ""
    return DataLossError(
        f"hub {hub!r} partition {partition}: sequence numbers [{start}, {end}) are no longer in the hub "
        f"({end - start} events, removed by retention before this query read them{now}). Set failOnDataLoss=false "
        "to skip them and continue."
    )


# -- the retry loop ----------------------------------------------------------------------------------


# Python 3.10 still has time-outs of their own in asyncio and concurrent.futures (3.11 made them one).
_TIMEOUTS = (TimeoutError, asyncio.TimeoutError, concurrent.futures.TimeoutError)


def retriable(error: BaseException) -> bool:
    """What :func:`call_with_retries` tries again by default: connector errors that say so, and time-outs."""
    if isinstance(error, EventHubsError):
        return error.retriable
    return isinstance(error, _TIMEOUTS)


def describe_error(exc: BaseException) -> str:
    """One line for an error in a message: its text, or its type when it has none (a time-out)."""
    text = " ".join(str(exc).split())
    if not text:
        return "the attempt timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
    return text


def call_with_retries(
    attempt: Callable[[float], T],
    *,
    timeout: float,
    what: str,
    is_retriable: Callable[[BaseException], bool] = retriable,
    on_retry: Callable[[int, BaseException], None] | None = None,
    attempt_share: float = 1.0,
    max_attempt: float | None = None,
    first_delay: float = 0.1,
    max_delay: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``attempt(seconds_it_may_take)`` until it succeeds, a failure is not retriable, or
    ``timeout`` (eventhubs.operationTimeout) has passed.

    Each attempt may take ``attempt_share`` of the timeout (at most ``max_attempt`` seconds, at least
    one second), so an attempt that never returns is tried again in time. Between attempts the
    delay doubles from ``first_delay`` up to ``max_delay``; ``on_retry(attempt number, error)`` runs
    before each wait (e.g. to drop a connection). The end is an :class:`EventHubsTimeoutError` naming
    ``what``, the option and the last error, raised from it.
    """
    deadline = clock() + timeout
    delay = first_delay
    tries = 0
    said: BaseException | None = None  # the last error that was more than "the attempt took too long"
    per_attempt = max(1.0, timeout * attempt_share)
    if max_attempt is not None:
        per_attempt = min(per_attempt, max_attempt)
    while True:
        tries += 1
        try:
            return attempt(max(0.1, min(deadline - clock(), per_attempt)))
        except Exception as exc:
            if not is_retriable(exc):
                raise
            last: BaseException = exc
            if not isinstance(exc, TimeoutError):
                said = exc
        if on_retry is not None:
            on_retry(tries, last)
        if clock() + delay >= deadline:
            # An attempt cut short by the deadline says only that it timed out; what the service
            # answered before (throttled, busy, refused) is what the reader needs, so both are shown.
            cause = describe_error(last)
            if said is not None and said is not last:
                cause += f" (before it: {describe_error(said)})"
            raise EventHubsTimeoutError(
                f"{what} did not succeed within eventhubs.operationTimeout ({timeout:g} s, {tries} attempts); "
                f"last error: {cause}"
            ) from last
        sleep(delay)
        delay = min(delay * 2, max_delay)
