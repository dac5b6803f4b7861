"""The source schema and the conversion of received events into Arrow record batches.

The schema is the azure-event-hubs-spark connector's, so queries migrate unchanged. Batches must
match ``to_arrow_schema(schema)`` exactly (timestamps as ``timestamp('us', tz='UTC')``), which is
what lets Spark take them without a row-by-row conversion.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from .client import sdk

SCHEMA_DDL = (
    "body binary, partition string, offset string, sequenceNumber long, enqueuedTime timestamp, "
    "publisher string, partitionKey string, properties map<string,string>, systemProperties map<string,string>"
)

ARROW_SCHEMA = pa.schema(
    [
        pa.field("body", pa.binary()),
        pa.field("partition", pa.string()),
        pa.field("offset", pa.string()),
        pa.field("sequenceNumber", pa.int64()),
        pa.field("enqueuedTime", pa.timestamp("us", tz="UTC")),
        pa.field("publisher", pa.string()),
        pa.field("partitionKey", pa.string()),
        pa.field("properties", pa.map_(pa.string(), pa.string())),
        pa.field("systemProperties", pa.map_(pa.string(), pa.string())),
    ]
)

Pairs = list[tuple[str, str | None]]  # a map<string,string> value, as key-value pairs

# System properties that have columns of their own, or describe the message body itself.
_COLUMN_ANNOTATIONS = {b"x-opt-sequence-number", b"x-opt-offset", b"x-opt-enqueued-time", b"x-opt-partition-key"}


def spark_schema() -> Any:
    from pyspark.sql.types import StructType

    return StructType.fromDDL(SCHEMA_DDL)


def to_text(value: Any) -> str | None:
    """A property value as text: strings as they are, bytes as UTF-8, anything else as JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value.hex()
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    return json.dumps(_plain(value), default=_json_default, sort_keys=True)


def _plain(value: Any) -> Any:
    """JSON-ready: AMQP strings and symbols arrive as bytes, map keys included."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(_plain(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _key(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def body_bytes(event: Any) -> bytes:
    """The event body as bytes: data sections joined; a value or sequence body as JSON text."""
    message = sdk.raw_message(event)
    data = sdk.data_body(message)
    if data is not None:
        if isinstance(data, bytes):
            return data
        return b"".join(data)
    body = event.body
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    text = to_text(list(body) if not isinstance(body, dict | list) and hasattr(body, "__iter__") else body)
    return (text or "").encode("utf-8")


# The AMQP properties section's fields, named as the SDKs name them among an event's system properties.
_PROPERTY_KEYS = (
    ("message_id", "message-id"),
    ("user_id", "user-id"),
    ("to", "to"),
    ("subject", "subject"),
    ("reply_to", "reply-to"),
    ("correlation_id", "correlation-id"),
    ("content_type", "content-type"),
    ("content_encoding", "content-encoding"),
    ("absolute_expiry_time", "absolute-expiry-time"),
    ("creation_time", "creation-time"),
    ("group_id", "group-id"),
    ("group_sequence", "group-sequence"),
    ("reply_to_group_id", "reply-to-group-id"),
)


def _message_body(message: Any) -> bytes:
    data = message.data
    if data is not None:
        if isinstance(data, bytes):
            return data
        return data[0] if len(data) == 1 else b"".join(data)
    body = message.value if message.sequence is None else message.sequence
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    return (to_text(body) or "").encode("utf-8")


def _map_array(rows: list[Pairs]) -> pa.Array:
    """A map<string,string> column from per-row pairs, built from flat arrays (no per-row Arrow objects)."""
    offsets = [0]
    keys: list[str] = []
    values: list[str | None] = []
    for pairs in rows:
        for k, v in pairs:
            keys.append(k)
            values.append(v)
        offsets.append(len(keys))
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()), pa.array(keys, pa.string()), pa.array(values, pa.string())
    )


def messages_to_batch(messages: list[Any], partition: str) -> pa.RecordBatch:
    """Build one record batch straight from received AMQP messages (``azure.eventhub._pyamqp`` ``Message``).

    This skips the SDK's ``EventData`` (and its dict views) per event, which cost more than the AMQP
    decoding itself; column by column, the result is what :func:`events_to_batch` makes of the same events.
    """
    if messages and sdk.is_event_data(messages[0]):
        return events_to_batch(messages, partition)  # the SDK's uamqp transport: EventData as delivered
    annotations = [m.message_annotations or {} for m in messages]
    seqs = [a[b"x-opt-sequence-number"] for a in annotations]
    offsets = [offset_text(a.get(b"x-opt-offset")) for a in annotations]
    times = [None if (ms := a.get(b"x-opt-enqueued-time")) is None else int(ms) * 1000 for a in annotations]
    publishers = [None if (v := a.get(b"x-opt-publisher")) is None else _key(v) for a in annotations]
    keys = [None if (v := a.get(b"x-opt-partition-key")) is None else _key(v) for a in annotations]
    props = [
        [(_key(k), to_text(v)) for k, v in app.items()] if (app := m.application_properties) else [] for m in messages
    ]
    sysprops: list[Pairs] = []
    for m, a in zip(messages, annotations, strict=True):
        system = [(_key(k), to_text(v)) for k, v in a.items() if k not in _COLUMN_ANNOTATIONS]
        section = m.properties
        if section is not None:
            system.extend((name, to_text(v)) for field, name in _PROPERTY_KEYS if (v := getattr(section, field)))
        sysprops.append(system)
    bodies = [_message_body(m) for m in messages]
    return _batch(partition, bodies, offsets, seqs, times, publishers, keys, props, sysprops)


def _batch(
    partition: str,
    bodies: list[bytes],
    offsets: list[str | None],
    seqs: list[int],
    times: list[int | None],
    publishers: list[str | None],
    keys: list[str | None],
    props: list[Pairs],
    sysprops: list[Pairs],
) -> pa.RecordBatch:
    """The record batch of one partition's events, column by column, in the source schema."""
    return pa.RecordBatch.from_arrays(
        [
            pa.array(bodies, pa.binary()),
            pa.array([partition] * len(seqs), pa.string()),
            pa.array(offsets, pa.string()),
            pa.array(seqs, pa.int64()),
            pa.array(times, pa.timestamp("us", tz="UTC")),
            pa.array(publishers, pa.string()),
            pa.array(keys, pa.string()),
            _map_array(props),
            _map_array(sysprops),
        ],
        schema=ARROW_SCHEMA,
    )


def offset_text(value: Any) -> str | None:
    """An ``x-opt-offset`` annotation as text (it arrives as bytes)."""
    return value.decode() if isinstance(value, bytes) else None if value is None else str(value)


def events_to_batch(events: Iterable[Any], partition: str) -> pa.RecordBatch:
    """Build one record batch from SDK ``EventData`` objects of one partition."""
    bodies: list[bytes] = []
    offsets: list[str | None] = []
    seqs: list[int] = []
    times: list[int | None] = []
    publishers: list[str | None] = []
    keys: list[str | None] = []
    props: list[Pairs] = []
    sysprops: list[Pairs] = []
    for event in events:
        message = sdk.raw_message(event)
        annotations = message.annotations or {}
        bodies.append(body_bytes(event))
        offsets.append(offset_text(annotations.get(b"x-opt-offset")))
        seqs.append(annotations[b"x-opt-sequence-number"])
        ms = annotations.get(b"x-opt-enqueued-time")
        times.append(None if ms is None else int(ms) * 1000)
        publisher = annotations.get(b"x-opt-publisher")
        publishers.append(None if publisher is None else _key(publisher))
        key = annotations.get(b"x-opt-partition-key")
        keys.append(None if key is None else _key(key))
        app = message.application_properties
        props.append([(_key(k), to_text(v)) for k, v in app.items()] if app else [])
        system = [(_key(k), to_text(v)) for k, v in annotations.items() if k not in _COLUMN_ANNOTATIONS]
        system.extend((_key(k), to_text(v)) for k, v in event.system_properties.items() if k not in annotations)
        sysprops.append(system)
    return _batch(partition, bodies, offsets, seqs, times, publishers, keys, props, sysprops)
