"""What crosses the receiver service's socket: data only, never code.

The service holds every query's credentials, so a request is JSON rebuilt field by field against the dataclasses it
names, each field's type checked; anything else is refused (:class:`ProtocolError`), logged and never used.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import types
import typing
from collections.abc import Iterable
from typing import Any, TypeVar, Union

from eventhubs_spark.auth.credentials import EntraSettings
from eventhubs_spark.auth.network import HttpProxy, NetworkSettings
from eventhubs_spark.auth.secret import Secret
from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.common.retry import RetryPolicy
from eventhubs_spark.errors import ERROR_TYPES, EventHubsError, NetworkError, OptionError, RegistryError
from eventhubs_spark.interprocess.task_ranges import (
    OWN_FIELDS,
    SHARED_FIELDS,
    DriverAddress,
    Home,
    QueryKey,
    RangeRequest,
    ReceiverConfig,
    RemoteRead,
    same_objects,
)

T = TypeVar("T")

# The dataclasses a request is made of, by name: nothing else can be built from a message.
_KNOWN: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        RangeRequest, RemoteRead, ConnectionSettings, ReceiverConfig, RetryPolicy, EntraSettings, NetworkSettings,
        HttpProxy, QueryKey, Home, DriverAddress,
    )
}  # fmt: skip
_MAX_REQUEST = 1 << 20  # bytes: a request is a few KB; anything near this is not one


class ProtocolError(ValueError):
    """A message that is not what the protocol allows; says what is wrong, never the message itself."""


# -- requests ----------------------------------------------------------------------------------------------


def encode_request(request: RangeRequest | RemoteRead) -> bytes:
    """``request`` as JSON. A range request goes as two JSON objects on two lines: its settings, config and stream
    fields (the same objects for every task of a query, see :meth:`RangeRequest.__reduce__`), encoded once while the
    same objects come (walking their dataclasses was 40 us of every 10-event task, issue 87), then its own fields; the
    service rebuilds and checks the first line once while the same bytes come (:func:`decode_request`)."""
    if type(request) is not RangeRequest:
        return json.dumps(_to_json(request), separators=_COMPACT).encode("utf-8")
    global _encoded
    shared = tuple(getattr(request, name) for name in SHARED_FIELDS)
    last, line = _encoded
    if not same_objects(last, shared):
        text = json.dumps({n: _to_json(v) for n, v in zip(SHARED_FIELDS, shared, strict=True)}, separators=_COMPACT)
        line = text.encode("utf-8") + b"\n"  # compact JSON holds no line break: the first one ends the line
        _encoded = (shared, line)  # the objects held, so no id is reused while they are compared by identity
    own = json.dumps({n: _own_json(getattr(request, n)) for n in OWN_FIELDS}, separators=_COMPACT)
    return line + own.encode("utf-8")


def _own_json(value: Any) -> Any:
    """:func:`_to_json` of a request's own field: text, numbers and flags as they are, without its checks."""
    return value if value is None or type(value) in (str, int, bool) else _to_json(value)


_COMPACT = (",", ":")
_encoded: tuple[tuple[Any, ...], bytes] = ((), b"")  # the shared objects last encoded, and their line


def decode_request(payload: bytes | bytearray | memoryview, cls: type[T] = RangeRequest) -> T:  # type: ignore[assignment]
    """The request (a :class:`RangeRequest`, or the ``cls`` given) in ``payload``, rebuilt and checked;
    :class:`ProtocolError` for anything else. A range request is read as :func:`encode_request` writes it (its
    shared line, then its own fields) or as one JSON object of all its fields."""
    if len(payload) > _MAX_REQUEST:
        raise ProtocolError(f"a request of {len(payload)} bytes is larger than any range request")
    payload = bytes(payload)
    cut = payload.find(b"\n") if cls is RangeRequest else -1
    if cut >= 0:
        return _range_request(payload[:cut], payload[cut + 1 :])  # type: ignore[return-value]
    return _from_json(cls, _json(payload), "request")


def _json(payload: bytes) -> Any:
    try:
        return json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = getattr(exc, "pos", getattr(exc, "start", "?"))
        raise ProtocolError(f"the request is not JSON ({type(exc).__name__} at byte {where})") from None


def _range_request(shared: bytes, own: bytes) -> RangeRequest:
    """A range request of its shared line and its own fields, every field once and no other: the shared ones
    rebuilt and checked once while the same bytes come (the service's side of :func:`encode_request`'s saving: 60 us
    a request), its own every time."""
    hints = _shape(RangeRequest)[0]
    values = _decoded.get(shared)
    if values is None:
        values = _fields(RangeRequest, _json(shared), SHARED_FIELDS, hints)
        with _decoded_lock:  # the service serves its connections on threads of their own
            if len(_decoded) >= _DECODED_KEPT:
                _decoded.pop(next(iter(_decoded)))
            _decoded[shared] = values
    return RangeRequest(**values, **_fields(RangeRequest, _json(own), OWN_FIELDS, hints))


def _fields(
    cls: type, data: Any, names: Iterable[str], hints: dict[str, Any], where: str = "request"
) -> dict[str, Any]:
    """The fields ``names`` of a ``cls`` (all of them, or a range request's shared or own part) from their JSON
    object, exactly those, each checked."""
    if not isinstance(data, dict):
        raise ProtocolError(f"{where}: expected an object of {cls.__name__}, got {type(data).__name__}")
    names = tuple(names)
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ProtocolError(f"{where}: unknown field(s) {', '.join(map(repr, unknown[:5]))} for {cls.__name__}")
    missing = [n for n in names if n not in data]
    if missing:
        raise ProtocolError(f"{where}: missing field(s) {', '.join(missing)} of {cls.__name__}")
    return {n: _value(hints[n], data[n], f"{where}.{n}") for n in names}


_decoded: dict[bytes, dict[str, Any]] = {}  # shared lines -> their values (a few queries' at a time)
_DECODED_KEPT = 8
_decoded_lock = threading.Lock()


def _to_json(value: Any) -> Any:
    if isinstance(value, Secret):
        return {"secret": value.reveal()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def _from_json(cls: type[T], data: Any, where: str) -> T:
    hints, names = _shape(cls)
    return cls(**_fields(cls, data, names, hints, where))


def _shape(cls: type) -> tuple[dict[str, Any], dict[str, None]]:
    """A dataclass's field types and names (in order, as a dict's keys), worked out once: resolving the annotations
    (``from __future__ import annotations`` makes them text) costs more than the rest of a small read's request."""
    shape = _SHAPES.get(cls)
    if shape is None:
        shape = _SHAPES[cls] = (typing.get_type_hints(cls), dict.fromkeys(f.name for f in dataclasses.fields(cls)))
    return shape


_SHAPES: dict[type, tuple[dict[str, Any], dict[str, None]]] = {}


def _value(hint: Any, data: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if data is None:
            if type(None) in options:
                return None
            raise ProtocolError(f"{where}: must not be null")
        (inner,) = [o for o in options if o is not type(None)]  # the connector's unions are all "X | None"
        return _value(inner, data, where)
    if origin is frozenset:
        (item,) = typing.get_args(hint)
        if not isinstance(data, list):
            raise ProtocolError(f"{where}: expected a list")
        return frozenset(_value(item, v, f"{where}[]") for v in data)
    if origin is tuple:
        (item, more) = typing.get_args(hint)  # the connector's tuples are all "tuple[X, ...]"
        if more is not Ellipsis or not isinstance(data, list):
            raise ProtocolError(f"{where}: expected a list")
        return tuple(_value(item, v, f"{where}[]") for v in data)
    if hint is Secret:
        if not (isinstance(data, dict) and set(data) == {"secret"} and isinstance(data["secret"], str)):
            raise ProtocolError(f"{where}: expected a secret")
        return Secret(data["secret"])
    if isinstance(hint, type) and hint.__name__ in _KNOWN and _KNOWN[hint.__name__] is hint:
        return _from_json(hint, data, where)
    if hint is bool:
        if not isinstance(data, bool):
            raise ProtocolError(f"{where}: expected true or false")
        return data
    if hint is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise ProtocolError(f"{where}: expected a whole number")
        return data
    if hint is float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            raise ProtocolError(f"{where}: expected a number")
        return float(data)
    if hint is str:
        if not isinstance(data, str):
            raise ProtocolError(f"{where}: expected text")
        return data
    raise ProtocolError(f"{where}: the protocol carries no value of type {hint!r}")  # a field added unhandled


# -- errors ------------------------------------------------------------------------------------------------


def encode_error(exc: BaseException) -> bytes:
    """A task's failure, to be raised in the worker as the same type: the connector's own types by name
    (others as :class:`EventHubsError` with their type in the text)."""
    name = type(exc).__name__
    if name in ERROR_TYPES and isinstance(exc, EventHubsError):
        text = str(exc)
    else:
        name, text = "EventHubsError", f"{type(exc).__name__}: {exc}"
    return json.dumps(
        {
            "type": name,
            "message": text,
            "example": getattr(exc, "example", None),
            "retriable": bool(getattr(exc, "retriable", False)),
        }
    ).encode("utf-8")


def decode_error(payload: bytes | bytearray | memoryview) -> EventHubsError:
    try:
        data = json.loads(bytes(payload).decode("utf-8"))
        name, text, example, retriable = data["type"], data["message"], data["example"], data["retriable"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ProtocolError(f"the service's error message is malformed ({type(exc).__name__})") from None
    if not isinstance(text, str) or not isinstance(example, str | None):
        raise ProtocolError("the service's error message is malformed (types)")
    cls = ERROR_TYPES.get(str(name), EventHubsError)
    if cls is NetworkError:
        return NetworkError(text, example, retriable=bool(retriable))
    if issubclass(cls, OptionError):
        return cls(text, example)
    if cls is RegistryError:
        return RegistryError(text, bool(retriable))
    return cls(text)
