"""What an SDK error means, by its AMQP condition: the table the connector reads errors by.

The condition (``amqp:link:stolen``...) is found wherever the SDK keeps it, and mapped to the connector's error
type for it. Touches no SDK internals.
"""

from __future__ import annotations

import logging
import ssl

from eventhubs_spark.errors import (
    AuthenticationFailedError,
    EventHubsError,
    HubNotFoundError,
    ReceiverDisconnectedError,
    SinkError,
    TransientError,
)

_LOG = logging.getLogger(__name__)


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
