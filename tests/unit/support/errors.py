"""Helpers shared by the unit tests that came from test_errors.py."""

from __future__ import annotations


def _link_error(condition: object, description: str = "") -> Exception:
    from azure.eventhub._pyamqp.error import AMQPLinkError

    return AMQPLinkError(condition=condition, description=description)


def _token_refused(status: int) -> Exception:
    from azure.eventhub._pyamqp.error import TokenAuthFailure

    return TokenAuthFailure(status, b"refused at put-token")


def _as_the_sdk_raises(inner: Exception) -> Exception:
    """The SDK's wrapping of a pyamqp error: its own type, raised while handling the original."""
    from azure.eventhub._transport._pyamqp_transport import PyamqpTransport

    try:
        raise inner
    except Exception as exc:
        try:
            raise PyamqpTransport._create_eventhub_exception(exc)
        except Exception as wrapped:
            return wrapped
    raise AssertionError("unreachable")
