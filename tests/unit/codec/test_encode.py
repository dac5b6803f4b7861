"""Unit tests of :mod:`eventhubs_spark.codec.encode`."""

from __future__ import annotations

from typing import Any

from azure.eventhub import EventData
from azure.eventhub._pyamqp._encode import encode_payload
from azure.eventhub._transport._pyamqp_transport import PyamqpTransport
from hypothesis import given, settings
from hypothesis import strategies as st

from eventhubs_spark.codec.encode import encode_event, encode_with_property
from tests.unit.support.encode import bodies, keys, properties

# the Schema Registry encoders' content type (ids are 32 hex digits on the service; any short token here)
content_types = st.one_of(st.none(), st.from_regex(r"avro/binary\+[0-9a-f]{1,128}", fullmatch=True))


def sdk_bytes(body: Any, props: dict[str, Any] | None, key: str | None, content_type: str | None = None) -> bytes:
    event = EventData(body)
    if props:
        event.properties = props
    if content_type:
        event.content_type = content_type
    message = PyamqpTransport.to_outgoing_amqp_message(event._raw_amqp_message)
    if key:
        message = PyamqpTransport.set_message_partition_key(message, key)
    out = bytearray()
    encode_payload(out, message)
    return bytes(out)


@settings(max_examples=400, deadline=None)
@given(bodies, properties, keys, content_types)
def test_an_event_encodes_to_the_sdks_bytes(
    body: Any, props: dict[str, Any] | None, key: str | None, content_type: str | None
) -> None:
    assert encode_event(body, props, key, content_type) == sdk_bytes(body, props, key, content_type)


def test_the_small_and_large_forms_switch_where_the_sdks_do() -> None:
    """Maps and strings at the edges of their one-byte forms (hypothesis rarely lands exactly there)."""
    for size in range(245, 260):
        props = {"k": "v" * size}
        assert encode_event(b"x", props, None) == sdk_bytes(b"x", props, None), size
        assert encode_event("b" * size, None, "k" * (size - 230)) == sdk_bytes("b" * size, None, "k" * (size - 230))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), properties, keys, content_types, st.text(max_size=260))
def test_an_event_with_one_more_property_encodes_as_with_it_in_its_properties(
    body: bytes, props: dict[str, Any] | None, key: str | None, content_type: str | None, value: str
) -> None:
    """The exactly-once sink's stamp: its one-format fast path (no other property, key or content type, short body
    and value) and the general path give the bytes encode_event gives with the property set last."""
    name = "eventhubs-spark-stamp"
    merged = {**(props or {}), name: value}
    expected = encode_event(body, merged, key, content_type)
    assert encode_with_property(body, props, key, content_type, name, value.encode("utf-8")) == expected
    assert encode_with_property(body, None, None, None, name, value.encode("utf-8")) == encode_event(
        body, {name: value}, None
    )
