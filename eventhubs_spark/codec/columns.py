"""Events column by column: the containers decoded events are gathered in, and the SDK's mapping to columns.

The mapping of an SDK-decoded message (or ``EventData``) to the source's columns is the reference the fast
decoders agree with.

Values are kept as the SDK's decoder gives them (AMQP strings, symbols and binaries as ``bytes``,
timestamps as milliseconds, property maps as lists of pairs); the text every map value, offset and key
becomes is made once per batch (:meth:`Columns.to_batch`), the same for every way of filling the lists.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from eventhubs_spark.codec import arrays
from eventhubs_spark.codec.schema import ARROW_SCHEMA, COLUMN_ANNOTATIONS
from eventhubs_spark.errors import DecodeError


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
    from eventhubs_spark.amqp import sdk  # the SDK's objects only: a worker decoding raw frames never loads it

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


def _event_columns(message: Any) -> tuple[Any, ...]:
    """The column values of one SDK-decoded message, in the raw forms :meth:`Columns.append` takes:
    the reference the fast decoder (:mod:`eventhubs_spark.codec.message`) must agree with."""
    annotations = message.message_annotations or {}
    try:
        seq = annotations[b"x-opt-sequence-number"]
    except KeyError:
        raise DecodeError("a received message has no x-opt-sequence-number annotation") from None
    system = [(k, v) for k, v in annotations.items() if k not in COLUMN_ANNOTATIONS]
    section = message.properties
    if section is not None:
        system.extend((name, v) for field, name in _PROPERTY_KEYS if (v := getattr(section, field)))
    return _columns(_message_body(message), seq, annotations, message.application_properties, system)


def _columns(body: bytes, seq: int, annotations: Any, app: Any, system: list[Any]) -> tuple[Any, ...]:
    """The values :meth:`Columns.append` takes, from a message's parts (SDK message or EventData)."""
    return (
        body,
        seq,
        annotations.get(b"x-opt-offset"),
        annotations.get(b"x-opt-enqueued-time"),
        annotations.get(b"x-opt-publisher"),
        annotations.get(b"x-opt-partition-key"),
        list(app.items()) if app else None,
        system or None,
    )


# Per event, besides the body: a rough count of the bytes its row holds in the lists below, for the
# bounds on events read ahead (the exact figure matters less than counting the same way every time).
_ROW_OVERHEAD = 160


class Columns:
    """Events of one partition, column by column, in the order they were decoded: plain lists that become
    one record batch (:meth:`to_batch`) without a Python object per event (the message-by-message
    decoder's output, :mod:`eventhubs_spark.codec.message`).

    Values are kept as the SDK's decoder gives them (AMQP strings, symbols and binaries as ``bytes``,
    timestamps as milliseconds, property maps as lists of pairs); the text every map value, offset
    and key becomes is made once per batch, the same for both ways of filling the lists: the fast
    decoder's :meth:`append` and the SDK's :meth:`append_sdk_message`.
    """

    __slots__ = (
        "bodies",
        "fallbacks",
        "keys",
        "nbytes",
        "offsets",
        "props",
        "publishers",
        "seqs",
        "system",
        "times",
    )

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.seqs: list[int] = []
        self.offsets: list[Any] = []
        self.times: list[Any] = []
        self.publishers: list[Any] = []
        self.keys: list[Any] = []
        self.props: list[list[tuple[Any, Any]] | None] = []
        self.system: list[list[tuple[Any, Any]] | None] = []
        self.fallbacks = 0  # messages the SDK's decoder made (the fast decoder did not handle them)
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.seqs)

    def append(
        self,
        body: bytes,
        seq: int,
        offset: Any,
        when: Any,
        publisher: Any,
        key: Any,
        props: list[tuple[Any, Any]] | None,
        system: list[tuple[Any, Any]] | None,
    ) -> None:
        self.bodies.append(body)
        self.seqs.append(seq)
        self.offsets.append(offset)
        self.times.append(when)
        self.publishers.append(publisher)
        self.keys.append(key)
        self.props.append(props)
        self.system.append(system)
        self.nbytes += len(body) + _ROW_OVERHEAD

    def append_sdk_message(self, message: Any) -> None:
        """Append a message the SDK decoded (``azure.eventhub._pyamqp.message.Message``)."""
        self.append(*_event_columns(message))

    def append_sdk_payload(self, payload: bytes) -> None:
        """Decode one message's bytes with the SDK's decoder and append it (the fast path's fallback)."""
        from eventhubs_spark.amqp import sdk

        self.append_sdk_message(sdk.decode_message(payload))
        self.fallbacks += 1

    def to_batch(self, partition: str, needed: frozenset[int] | None = None) -> pa.RecordBatch:
        """The record batch of these events, in the source schema; ``needed``: the only columns (by index) a task
        hands on (its query's schema names them), the others left null: a small range's maps and optional texts
        were a third of its decoding (issue 87)."""
        n = len(self.seqs)
        makers = (
            lambda: arrays.binaries(self.bodies),
            lambda: arrays.repeated_text(partition, n),
            lambda: _texts(self.offsets, offset_text),
            lambda: arrays.ints(self.seqs),
            lambda: _timestamps(self.times),
            lambda: _texts(self.publishers, _optional_key),
            lambda: _texts(self.keys, _optional_key),
            lambda: _pairs(self.props),
            lambda: _pairs(self.system),
        )
        return pa.RecordBatch.from_arrays(
            [make() if needed is None or i in needed else pa.nulls(n, _TYPES[i]) for i, make in enumerate(makers)],
            schema=ARROW_SCHEMA,
        )


_TYPES = ARROW_SCHEMA.types


def _optional_key(value: Any) -> str | None:
    return None if value is None else _key(value)


def _texts(values: list[Any], one: Any) -> pa.Array:
    """A string column from raw values: ``bytes`` checked as UTF-8 in one pass, the rest (and any
    bytes that are not UTF-8) through ``one``, the per-value rule."""
    kinds = set(map(type, values))
    if kinds <= _RAW_TEXT:
        try:
            if len(values) < _SMALL:  # a cast costs tens of microseconds however few the values
                return arrays.texts([v.decode() if type(v) is bytes else v for v in values])
            if str in kinds:  # text already: encoded as UTF-8 (bytes are checked as UTF-8 by the cast)
                values = [v.encode() if type(v) is str else v for v in values]
            return arrays.binaries(values).cast(pa.string())
        except (pa.ArrowInvalid, UnicodeDecodeError, UnicodeEncodeError):
            pass
    return arrays.texts([one(v) for v in values])


# Columns of fewer values than this are made in Python: Arrow's compute calls (casts) have a fixed cost of
# their own that a small range (a quiet stream's task) would pay several times per batch.
_SMALL = 64
_RAW_TEXT = {bytes, str, type(None)}


def _timestamps(values: list[Any]) -> pa.Array:
    """Enqueued times: milliseconds since the epoch as microsecond timestamps."""
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    try:
        millis = np.array([0 if v is None else v for v in values], dtype=np.int64)
    except (OverflowError, TypeError, ValueError):  # not milliseconds a long holds: Arrow says so, as before
        return pa.array([None if v is None else int(v) * 1000 for v in values], MICROS)
    if len(millis) and np.abs(millis).max() <= MILLIS_MAX:
        return arrays.numbers(millis * 1000, MICROS, valid)
    # the cast raises Arrow's out-of-range error (as layout._times does)
    return arrays.numbers(millis, pa.int64(), valid).cast(pa.timestamp("ms", tz="UTC")).cast(MICROS)


MICROS = pa.timestamp("us", tz="UTC")
MILLIS_MAX = np.iinfo(np.int64).max // 1000  # beyond this, milliseconds do not fit as microseconds


def _pairs(rows: list[list[tuple[Any, Any]] | None]) -> pa.Array:
    """A map<string,string> column: keys as :func:`_key` names them, values as :func:`to_text` does."""
    offsets = [0]
    keys: list[Any] = []
    values: list[Any] = []
    total = 0
    for pairs in rows:
        if pairs:
            for k, v in pairs:
                keys.append(k)
                t = type(v)
                if t is bytes or v is None:
                    values.append(v)  # made text with the rest in one pass (below)
                elif t is int:
                    values.append(str(v))  # what to_text (json) makes of an int, without the call
                elif t is bool:
                    values.append("true" if v else "false")
                else:
                    values.append(to_text(v))
            total += len(pairs)
        offsets.append(total)
    return pa.MapArray.from_arrays(arrays.ints(offsets, pa.int32()), _texts(keys, _key), _texts(values, to_text))


def offset_text(value: Any) -> str | None:
    """An ``x-opt-offset`` annotation as text (it arrives as bytes)."""
    return value.decode() if isinstance(value, bytes) else None if value is None else str(value)


def events_to_batch(events: Iterable[Any], partition: str) -> pa.RecordBatch:
    """One record batch from SDK ``EventData`` objects of one partition (their public view)."""
    from eventhubs_spark.amqp import sdk

    cols = Columns()
    for event in events:
        message = sdk.raw_message(event)
        annotations = message.annotations or {}
        system = [(k, v) for k, v in annotations.items() if k not in COLUMN_ANNOTATIONS]
        system.extend((k, v) for k, v in event.system_properties.items() if k not in annotations)
        seq = annotations[b"x-opt-sequence-number"]
        cols.append(*_columns(body_bytes(event), seq, annotations, message.application_properties, system))
    return cols.to_batch(partition)
