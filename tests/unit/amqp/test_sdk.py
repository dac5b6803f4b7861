"""Unit tests of :mod:`eventhubs_spark.amqp.sdk` and :mod:`eventhubs_spark.amqp.conditions`."""

from __future__ import annotations

import pytest
from azure.eventhub import EventData, EventDataBatch
from azure.eventhub._pyamqp._decode import decode_payload
from hypothesis import given, settings
from hypothesis import strategies as st

from eventhubs_spark.amqp import conditions, sdk
from eventhubs_spark.codec.encode import encode_event
from eventhubs_spark.errors import (
    AuthenticationFailedError,
    EventHubsError,
    HubNotFoundError,
    ReceiverDisconnectedError,
    SinkError,
    TransientError,
)
from tests.unit.support.encode import bodies, keys, properties
from tests.unit.support.errors import _as_the_sdk_raises, _link_error, _token_refused


def test_an_amqp_char_decodes_as_its_utf8_on_both_paths():
    """A Java producer's Character property is an AMQP char (0x73), which the SDK's decoder had no entry for:
    the fast path and the SDK path (its gap filled) both give its UTF-8, as they give strings."""

    from eventhubs_spark.amqp import sdk
    from eventhubs_spark.amqp.messages import scalar

    for char in ("z", "é", "\U0001f600"):
        raw = b"\x73" + ord(char).to_bytes(4, "big")
        assert scalar(raw + b"\x40", 0) == (char.encode("utf-8"), 5)
        sdk.fill_decoder_gaps()
        # an application-properties section {"c": char} and a data body, as the SDK decodes a whole message
        props = b"\x00\x53\x74\xc1" + bytes([3 + len(raw), 2]) + b"\xa1\x01c" + raw
        message = decode_payload(memoryview(props + b"\x00\x53\x75\xa0\x01x"))
        assert message.application_properties == {b"c": char.encode("utf-8")}


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(bodies, properties), min_size=1, max_size=40), keys, st.integers(300, 200_000))
def test_adding_encoded_events_fills_a_batch_as_add_does(events, key, limit) -> None:
    ours = EventDataBatch(max_size_in_bytes=limit, partition_key=key)
    theirs = EventDataBatch(max_size_in_bytes=limit, partition_key=key)
    for body, props in events:
        event = EventData(body)
        if props:
            event.properties = props
        try:
            theirs.add(event)
            fits = True
        except ValueError:
            fits = False
        assert sdk.add_encoded(ours, encode_event(body, props, key)) is fits
        if not fits:
            break
    assert (ours._size, len(ours)) == (theirs._size, len(theirs))
    assert [bytes(m) for m in ours._message[5]] == [bytes(m) for m in theirs._message[5]]
    assert sdk.missing_internals(batch=ours) == []


def _connection_error(condition: object) -> Exception:
    from azure.eventhub._pyamqp.error import AMQPConnectionError

    return AMQPConnectionError(condition=condition, description="closed")


CONDITIONS = [  # (the error as pyamqp reports it, its condition, the connector's type, does a retry help)
    (lambda: _link_error(b"amqp:link:stolen", "epoch '0'"), conditions.STOLEN, ReceiverDisconnectedError, False),
    (lambda: _link_error(b"amqp:unauthorized-access"), conditions.UNAUTHORIZED, AuthenticationFailedError, False),
    (lambda: _link_error(b"amqp:not-found"), conditions.NOT_FOUND, HubNotFoundError, False),
    (lambda: _link_error(b"com.microsoft:argument-out-of-range"), conditions.OUT_OF_RANGE, EventHubsError, False),
    (lambda: _link_error(b"amqp:link:message-size-exceeded"), conditions.TOO_LARGE, SinkError, False),
    (lambda: _link_error(b"amqp:resource-limit-exceeded"), conditions.RESOURCE_LIMIT, TransientError, True),
    (lambda: _connection_error(b"com.microsoft:server-busy"), conditions.SERVER_BUSY, TransientError, True),
    (lambda: _link_error(b"com.microsoft:timeout"), conditions.TIMEOUT, TransientError, True),
    (lambda: _link_error(b"amqp:link:detach-forced", "idle; an epoch receiver"), conditions.DETACH_FORCED,
     TransientError, True),
    (lambda: _connection_error(b"amqp:connection:forced"), conditions.CONNECTION_FORCED, TransientError, True),
    (lambda: _connection_error(b"amqp:internal-error"), conditions.INTERNAL, TransientError, True),
    (lambda: _token_refused(401), conditions.UNAUTHORIZED, AuthenticationFailedError, False),
    (lambda: _token_refused(404), conditions.NOT_FOUND, HubNotFoundError, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("make", "condition", "kind", "retriable"), CONDITIONS, ids=[f"{c[1]}-{i}" for i, c in enumerate(CONDITIONS)]
)
def test_an_error_means_what_its_amqp_condition_says(make, condition, kind, retriable):
    """By condition (or a put-token's status), never by text: a forced detach that mentions an epoch is not
    a stolen link; and the SDK's wrapping of the error says the same."""
    for error in (make(), _as_the_sdk_raises(make())):
        assert conditions.condition(error) == condition, error
        assert conditions.error_type(error) is kind and kind.retriable is retriable
        assert conditions.is_stolen(error) is (condition == conditions.STOLEN)


def test_an_error_without_a_condition_means_nothing_by_its_text():
    assert conditions.condition(RuntimeError("amqp:link:stolen epoch")) is None
    assert conditions.error_type(ValueError("x")) is None and not conditions.is_stolen("amqp:link:stolen")


def test_timeouts_are_told_by_type():
    import ssl

    assert conditions.is_timeout(TimeoutError("The read operation timed out")) and conditions.is_timeout(
        ssl.SSLWantReadError()
    )
    assert not conditions.is_timeout(OSError("timed out"))  # text is no evidence
