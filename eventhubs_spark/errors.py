"""The connector's exception types, and what counts as worth another attempt.

Each type says whether trying again can help (``retriable``). The one retry policy
(:mod:`eventhubs_spark.common.retry`) retries only what may heal, under a deadline, and ends in
:class:`EventHubsTimeoutError` raised ``from`` the last cause. What an SDK error means is decided by its
AMQP condition, in the SDK seam (:func:`eventhubs_spark.amqp.conditions.error_type`).
"""

from __future__ import annotations

import copy
import sys
from typing import Any


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


class ConsumerGroupNotFoundError(HubNotFoundError):
    """The hub has no consumer group of that name: the message names the group, the hub, the option that sets
    it and how to create one. A :class:`HubNotFoundError` too (code that caught that keeps working)."""


class NetworkError(EventHubsError, ConnectionError):
    """The namespace (or the proxy on the way) could not be reached: the message says where, over which
    transport, and which option to change. ``retriable`` when it may heal (a refused or unreachable
    port, a name that did not resolve); an untrusted certificate or a proxy that refuses does not."""

    def __init__(
        self, message: str, example: str | None = None, *, retriable: bool = False, wrong_address: bool = False
    ) -> None:
        super().__init__(message)
        self.example = example
        self.retriable = retriable
        # the port refused, or the host has no address: may heal for a namespace once reached, but for one never
        # reached it is most likely a wrong host or port (see amqp.failures.FIRST_CONNECT_GRACE)
        self.wrong_address = wrong_address

    def __reduce__(self) -> tuple[Any, ...]:
        return (_network_error, (str(self), self.example, self.retriable, self.wrong_address))


class SchemaEvolved(EventHubsError):
    """JSON bodies carry fields (or types) the read's schema lacks; a new version was recorded: define the read again
    (eventhubs.json.schemaEvolutionMode addNewColumns)."""


class DoesNotFit(EventHubsError):
    """A JSON body that does not fit the read's schema (eventhubs.json.schemaEvolutionMode failOnNewColumns)."""


class CaptureFileError(EventHubsError):
    """A Capture file that cannot be read as one: says which file, where, and why."""


class RegistryError(EventHubsError):
    """The Schema Registry could not be used: unknown schema id, unreachable, refused sign-in. Says which."""

    def __init__(self, message: str, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.retriable))


class SchemaError(OptionError):
    """A schema (Avro, or JSON Schema from the registry) the connector cannot use, naming the field and why."""


class AvroDecodeError(EventHubsError):
    """An Avro record the reader schema cannot be read from (FAILFAST): names the partition, sequence number and
    schema id."""


class DecodeError(ValueError):
    """A received message the connector cannot turn into a row (it lacks what every event has). Here, on the
    floor below both, because the frame reader (``amqp/``) and the decoders (``codec/``) both raise it."""


def _network_error(message: str, example: str | None, retriable: bool, wrong_address: bool = False) -> NetworkError:
    return NetworkError(message, example, retriable=retriable, wrong_address=wrong_address)


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
        ConsumerGroupNotFoundError,
        NetworkError,
        SchemaEvolved,
        DoesNotFit,
        CaptureFileError,
        RegistryError,
        SchemaError,
        AvroDecodeError,
    )
}


# -- what a user reads first --------------------------------------------------------------------------------


def said_first(error: EventHubsError, spark_called: bool) -> EventHubsError:
    """``error`` as it is raised to Spark: Spark puts the Python traceback's text into the exception a user reads,
    frames first and the message last, so a failure of ours read as Spark's header, pyspark's frames, ours, and only
    then what went wrong. Raised to Spark (``spark_called``), the error goes as the cause, without frames, of an
    error of the same type that says where: Python prints a cause first, so the text opens with our message, right
    after Spark's header, and holds it once. Raised to our own callers (tests, the CLI), it is ``error`` without its
    inner frames."""
    bare = error.with_traceback(None)
    bare.__suppress_context__ = True  # the chain behind it is in the log (debug): it adds nothing the message lacks
    if not spark_called:
        return bare
    outer = copy.copy(error)  # its type and fields (example, retriable), with another message
    outer.args = ("(the connector's error above)",)
    outer.__cause__ = bare
    return outer


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


# Python 3.10 still has time-outs of their own in asyncio and concurrent.futures (3.11 made them one); asyncio is
# imported only there (it is a tenth of what answering a fresh .load() imports: bench load)
_TIMEOUTS: tuple[type[BaseException], ...] = (TimeoutError,)
if sys.version_info < (3, 11):
    import asyncio
    import concurrent.futures

    _TIMEOUTS = (TimeoutError, asyncio.TimeoutError, concurrent.futures.TimeoutError)


def retriable(error: BaseException) -> bool:
    """What :meth:`eventhubs_spark.common.retry.RetryPolicy.call` tries again by default: connector errors that say so,
    and time-outs."""
    if isinstance(error, EventHubsError):
        return error.retriable
    return isinstance(error, _TIMEOUTS)


def describe_error(exc: BaseException) -> str:
    """One line for an error in a message: its text, or its type when it has none (a time-out)."""
    text = " ".join(str(exc).split())
    if not text:
        return "the attempt timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
    return text
