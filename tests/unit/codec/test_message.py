"""Unit tests of :mod:`eventhubs_spark.codec.message`."""

from __future__ import annotations

import uuid

import pytest

from eventhubs_emulator import amqp
from eventhubs_emulator.amqp import Symbol, Timestamp
from eventhubs_spark.codec.columns import Columns
from eventhubs_spark.codec.message import decode_message
from tests.unit.support.decode import both_ways, section


def test_a_typical_event_is_decoded_without_the_sdk_and_reads_as_the_sdk_reads_it() -> None:
    payload = section(
        amqp.MESSAGE_ANNOTATIONS,
        {
            Symbol("x-opt-sequence-number"): 42,
            Symbol("x-opt-offset"): "8192",
            Symbol("x-opt-enqueued-time"): Timestamp(1_700_000_000_123),
            Symbol("x-opt-partition-key"): "device-7",
        },
    ) + section(amqp.APPLICATION_PROPERTIES, {"n": 7, "ok": True, "raw": b"\xff", "id": uuid.UUID(int=5)})
    payload += section(amqp.DATA, b"hello")
    reference, fast, cols = both_ways(payload)
    assert fast == reference and cols.fallbacks == 0
    row = fast[0]
    assert (row["sequenceNumber"], row["offset"], row["partitionKey"]) == (42, "8192", "device-7")
    assert row["body"] == b"hello"
    assert row["enqueuedTime"].timestamp() == pytest.approx(1_700_000_000.123)
    assert dict(row["properties"]) == {"n": "7", "ok": "true", "raw": "ff", "id": str(uuid.UUID(int=5))}


def test_a_value_body_falls_back_to_the_sdk_and_is_counted() -> None:
    payload = section(amqp.MESSAGE_ANNOTATIONS, {Symbol("x-opt-sequence-number"): 1}) + section(
        amqp.AMQP_VALUE, {"a": [1, 2]}
    )
    reference, fast, cols = both_ways(payload)
    assert fast == reference and cols.fallbacks == 1
    assert fast[0]["body"] == b'{"a": [1, 2]}'


def test_a_message_without_a_sequence_number_is_an_error_naming_what_is_missing() -> None:
    from eventhubs_spark.errors import DecodeError

    payload = section(amqp.MESSAGE_ANNOTATIONS, {Symbol("x-opt-offset"): "1"}) + section(amqp.DATA, b"x")
    with pytest.raises(DecodeError, match="x-opt-sequence-number"):
        decode_message(Columns(), payload)
