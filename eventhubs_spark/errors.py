"""The connector's exception types. Each says whether trying again can help (``retriable``).

A retry loop (see :func:`eventhubs_spark.client.retry.call_with_retries`) retries only retriable
errors, under a deadline, and ends in :class:`EventHubsTimeoutError` raised ``from`` the last cause.
"""

from __future__ import annotations


class EventHubsError(Exception):
    """Base class; ``retriable`` tells a retry loop whether another attempt may succeed."""

    retriable = False


class OptionError(EventHubsError, ValueError):
    """A bad option: the message names the option and shows a valid example."""


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
