"""The management pipe's own AMQP: the requests it writes read back by the SDK's decoder as the SDK's own requests
would, and the answers it reads (as the service and the emulator encode them) read as the SDK reads them."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from azure.eventhub._pyamqp._decode import decode_frame, decode_payload
from azure.eventhub._pyamqp._encode import encode_payload
from azure.eventhub._pyamqp.message import Message, Properties
from hypothesis import given, settings
from hypothesis import strategies as st

from eventhubs_emulator import amqp as emulator_amqp
from eventhubs_spark.amqp import management_pipe as pipe
from eventhubs_spark.amqp.management import _partition_info

_TOKEN = "SharedAccessSignature sr=sb%3A%2F%2Fns%2Fhub&sig=" + "x" * 300 + "&se=1&skn=RootManageSharedAccessKey"
_SHARED = {"name": "hub", "security_token": _TOKEN, "operation": "READ", "type": "com.microsoft:partition"}


def test_a_request_frame_reads_back_as_the_sdk_reads_a_request() -> None:
    message_id = bytes(range(16))
    payload = pipe.request_payload(pipe.fixed_pairs(_SHARED), len(_SHARED), "1023", message_id)
    frame = pipe.transfer_frame(7, 3, 2**32 + 5, 9, payload)
    size, doff, kind, channel = int.from_bytes(frame[:4], "big"), frame[4], frame[5], int.from_bytes(frame[6:8], "big")
    assert (size, doff, kind, channel) == (len(frame), 2, 0, 7)
    performative, fields = decode_frame(memoryview(frame[8:]))
    assert performative == 0x14
    # handle, delivery id (wrapped to 32 bits), tag, message format, settled; the rest left out (more: false), then
    # the SDK's decoder puts the payload
    assert fields[0] == 3 and fields[1] == 5 and fields[2] == (9).to_bytes(4, "big") and fields[3] == 0
    assert fields[4] is False and len(fields) == 6
    message = decode_payload(fields[5])
    assert message.properties.message_id == uuid.UUID(bytes=message_id)
    assert {k.decode(): v.decode() for k, v in message.application_properties.items()} == {
        **_SHARED,
        "partition": "1023",
    }
    assert message.value is None and message.data is None, "no body, as the SDK sends it"


def test_a_disposition_frame_settles_a_range_as_accepted() -> None:
    performative, fields = decode_frame(memoryview(pipe.disposition_frame(1, 10, 17)[8:]))
    assert performative == 0x15
    assert fields[0] is True and fields[1] == 10 and fields[2] == 17 and fields[3] is True
    assert fields[4] == {"accepted": []}


def _sdk_answer(correlation: uuid.UUID, body: dict, status: int = 200) -> bytes:
    out = bytearray()
    encode_payload(
        out,
        Message(
            properties=Properties(correlation_id=correlation),
            application_properties={"status-code": status, "status-description": "OK"},
            value=body,
        ),
    )
    return bytes(out)


def _emulator_answer(correlation: uuid.UUID, body: dict) -> bytes:
    properties = emulator_amqp.encode_section(emulator_amqp.PROPERTIES, [None, None, None, None, None, correlation])
    application = emulator_amqp.encode_section(
        emulator_amqp.APPLICATION_PROPERTIES,
        {"status-code": emulator_amqp.Int(200), "status-description": "OK", "statusDescription": "OK"},
    )
    return properties + application + emulator_amqp.encode_section(emulator_amqp.AMQP_VALUE, body)


def _partition_body(enqueued_ms: int) -> dict:
    """A partition's answer, worded as the service words it."""
    return {
        "name": "hub",
        "partition": "7",
        "begin_sequence_number": 3,
        "last_enqueued_sequence_number": 2**40,
        "last_enqueued_offset": "4294967296",
        "is_partition_empty": False,
        "last_enqueued_time_utc": emulator_amqp.Timestamp(enqueued_ms),
        "type": "com.microsoft:partition",
    }


def test_an_answer_reads_as_the_sdk_reads_it_from_either_encoder() -> None:
    correlation = uuid.uuid4()
    when = dt.datetime(2026, 11, 29, tzinfo=dt.timezone.utc)
    body = _partition_body(int(when.timestamp() * 1000))
    for encoded in (
        _emulator_answer(correlation, body),
        _sdk_answer(correlation, {**body, "last_enqueued_time_utc": 0, "last_enqueued_sequence_number": 5}),
    ):
        reply = pipe.decode_reply(encoded)
        sdk = decode_payload(memoryview(encoded))
        assert reply.correlation == sdk.properties.correlation_id == correlation
        assert (reply.status, reply.description) == (200, "OK")
        assert reply.body == sdk.value
    info = _partition_info("7", pipe.decode_reply(_emulator_answer(correlation, body)).body)
    assert info.last_enqueued_sequence_number == 2**40 and info.last_enqueued_time == when and not info.is_empty


def test_an_answer_the_small_reader_does_not_take_is_read_by_the_sdk() -> None:
    correlation = uuid.uuid4()
    # a list of strings goes out as an AMQP array (0xe0), which the small reader leaves to the SDK's decoder
    encoded = _sdk_answer(correlation, {"partition_ids": ["0", "1"]}, status=404)
    reply = pipe.decode_reply(encoded)
    assert reply.correlation == correlation and reply.status == 404
    assert reply.body == decode_payload(memoryview(encoded)).value


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(max_size=300)
    | st.binary(max_size=300)
    | st.uuids()
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=20), inner, max_size=5),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(body=_VALUES)
def test_the_small_reader_agrees_with_the_sdk_on_any_body(body: object) -> None:
    encoded = _emulator_answer(uuid.uuid4(), {"value": body})  # the emulator's encoder takes 64-bit integers
    reply = pipe.decode_reply(encoded)
    assert reply.body == decode_payload(memoryview(encoded)).value


def test_a_partition_answer_is_read_in_one_pass(monkeypatch) -> None:
    """A partition's answer as the emulator and the SDK's encoder lay it out is read by the one-pass reader (a
    1,024-partition trigger reads 1,024 of them), with what reading every value gives."""
    correlation = uuid.uuid4()
    body = _partition_body(1_700_000_000_000)
    for encoded in (
        _emulator_answer(correlation, body),
        _sdk_answer(correlation, {**body, "last_enqueued_time_utc": 0, "last_enqueued_sequence_number": 5}),
    ):
        expected = pipe._any_reply_sections(encoded)
        with monkeypatch.context() as patched:
            patched.setattr(pipe, "_any_reply_sections", lambda _m: pytest.fail("read by the general reader"))
            reply = pipe.decode_reply(encoded)
        assert (reply.correlation, reply.body) == (expected[0], expected[2]) and reply.correlation == correlation
        assert (reply.status, reply.description) == (200, "OK")


@settings(max_examples=200, deadline=None)
@given(body=st.dictionaries(st.text(max_size=20), _SCALARS, max_size=20) | _SCALARS)
def test_the_one_pass_reader_agrees_with_the_sdk_on_flat_bodies(body: object) -> None:
    encoded = _emulator_answer(uuid.uuid4(), body)
    assert pipe.decode_reply(encoded).body == decode_payload(memoryview(encoded)).value
