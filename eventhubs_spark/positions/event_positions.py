"""Starting and ending positions: tagged values and their JSON forms.

The JSON is the azure-event-hubs-spark connector's, and it selects the same events as there, so a
migration keeps its option values *and* what they read::

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from eventhubs_spark.errors import OptionError

EXAMPLE = '{"offset": "-1"}, {"offset": "@latest"}, {"seqNo": 42} or {"enqueuedTime": "2024-05-01T00:00:00Z"}'
_TIME_EXAMPLE = '{"enqueuedTime": "2024-05-01T00:00:00Z"}'
_KEYED = '{"0": {"seqNo": 10}}'


@dataclass(frozen=True)
class Earliest:
    def to_json(self) -> dict[str, Any]:
        return {"offset": "-1"}


@dataclass(frozen=True)
class Latest:
    def to_json(self) -> dict[str, Any]:
        return {"offset": "@latest"}


@dataclass(frozen=True)
class SequenceNumber:
    """The event with this sequence number. ``inclusive`` is kept for the JSON round trip only: the old
    connector ignored it for sequence numbers, and so does this one."""

    value: int
    inclusive: bool = True

    def first(self) -> int:
        """The sequence number of the event this position names."""
        return self.value

    def to_json(self) -> dict[str, Any]:
        return {"seqNo": self.value, "isInclusive": self.inclusive}


@dataclass(frozen=True)
class Offset:
    """The first event at (``inclusive``) or after this offset."""

    value: str
    inclusive: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.value, "isInclusive": self.inclusive}


@dataclass(frozen=True)
class EnqueuedTime:
    """The first event enqueued strictly after this instant. ``inclusive`` is kept for the JSON round
    trip only: the old connector's Java client filtered enqueued times with ``>`` whatever it said."""

    value: dt.datetime  # timezone-aware
    inclusive: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"enqueuedTime": self.value.isoformat().replace("+00:00", "Z"), "isInclusive": self.inclusive}


Position = Earliest | Latest | SequenceNumber | Offset | EnqueuedTime


def selector(pos: SequenceNumber | Offset | EnqueuedTime) -> tuple[str, bool, Any]:
    """The filter that finds the event a position names: (annotation, inclusive, value).

    This is where the old connector's rules live: sequence numbers are always inclusive, offsets
    follow ``isInclusive``, enqueued times are always exclusive.
    """
    if isinstance(pos, SequenceNumber):
        return "sequence-number", True, pos.value
    if isinstance(pos, Offset):
        return "offset", pos.inclusive, pos.value
    return "enqueued-time", False, pos.value


def parse_position(value: Any, option: str) -> Position:
    """Parse one position from its JSON text or an already-decoded dict."""
    doc = _load(value, option)
    if not isinstance(doc, dict):
        raise OptionError(f"{option}: expected a JSON object, got {value!r}. Valid examples: {EXAMPLE}", EXAMPLE)
    known = {"offset", "seqno", "enqueuedtime", "isinclusive"}
    lowered = {str(k).lower(): v for k, v in doc.items()}
    unknown = sorted(set(lowered) - known)
    if unknown:
        raise OptionError(f"{option}: unknown field(s) {unknown} in {value!r}. Valid examples: {EXAMPLE}", EXAMPLE)
    inclusive = lowered.get("isinclusive")
    if inclusive is None:
        inclusive = True  # EventPosition's default in the old connector
    if not isinstance(inclusive, bool):
        raise OptionError(
            f"{option}: isInclusive must be true or false, got {inclusive!r}. Example: {EXAMPLE}", EXAMPLE
        )
    offset = lowered.get("offset")
    seq = lowered.get("seqno")
    if seq == -1:
        seq = None  # the old connector's "unset"
    when = lowered.get("enqueuedtime")
    chosen = [name for name, v in (("offset", offset), ("seqNo", seq), ("enqueuedTime", when)) if v is not None]
    if len(chosen) != 1:
        raise OptionError(
            f"{option}: set exactly one of offset, seqNo, enqueuedTime (got {chosen or 'none'} in {value!r}). "
            f"Valid examples: {EXAMPLE}",
            EXAMPLE,
        )
    if offset is not None:
        text = str(offset)
        if text == "-1":
            return Earliest()
        if text == "@latest":
            return Latest()
        if not (text.isascii() and text.isdigit()):
            raise OptionError(
                f'{option}: offset must be "-1", "@latest" or digits, got {offset!r}. Example: {EXAMPLE}', EXAMPLE
            )
        return Offset(text, inclusive)
    if seq is not None:
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise OptionError(f"{option}: seqNo must be a whole number >= 0, got {seq!r}. Example: {EXAMPLE}", EXAMPLE)
        return SequenceNumber(seq, inclusive)
    return EnqueuedTime(parse_time(when, option), inclusive if "isinclusive" in lowered else False)


def parse_time(value: Any, option: str) -> dt.datetime:
    """An ISO-8601 instant (``Z`` or an offset; naive means UTC) or epoch milliseconds."""
    if isinstance(value, bool):
        raise OptionError(f"{option}: expected an ISO-8601 time, e.g. {_TIME_EXAMPLE}, got {value!r}", _TIME_EXAMPLE)
    if isinstance(value, (int, float)):
        try:
            return dt.datetime.fromtimestamp(value / 1000, tz=dt.timezone.utc)
        except (OverflowError, ValueError, OSError):
            pass  # out of the representable range: answered below
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)
    raise OptionError(f"{option}: expected an ISO-8601 time, e.g. {_TIME_EXAMPLE}, got {value!r}", _TIME_EXAMPLE)


def parse_positions(value: Any, option: str) -> dict[str, Position]:
    """Per-partition positions: ``{"0": {...}, "1": {...}}``.

    Keys may also be the old connector's ``{"ehName": "hub", "partitionId": 0}`` JSON strings.
    """
    doc = _load(value, option)
    if not isinstance(doc, dict):
        raise OptionError(f"{option}: expected a JSON object keyed by partition id, e.g. {_KEYED}", _KEYED)
    out: dict[str, Position] = {}
    for key, pos in doc.items():
        partition = _partition_key(str(key), option)
        out[partition] = parse_position(pos, f"{option}[{partition}]")
    return out


def _partition_key(key: str, option: str) -> str:
    if key.isascii() and key.isdigit():  # str.isdigit() also takes "²", which int() refuses
        return str(int(key))
    try:
        doc = json.loads(key)
    except json.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and str(doc.get("partitionId", "")).isascii() and str(doc["partitionId"]).isdigit():
        return str(int(doc["partitionId"]))
    raise OptionError(
        f'{option}: keys must be partition ids (or {{"ehName": "hub", "partitionId": 0}}), got {key!r}, e.g. {_KEYED}',
        _KEYED,
    )


def _load(value: Any, option: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise OptionError(
                f"{option}: not valid JSON ({exc.msg}) in {value!r}. Valid examples: {EXAMPLE}", EXAMPLE
            ) from None
    return value
