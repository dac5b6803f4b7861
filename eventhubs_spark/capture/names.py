"""Capture file names: ``archiveNameFormat`` compiled to a pattern that says each file's partition and window.

A listing so tells which files matter without opening any.

The service names each file from its window's start (UTC) with nine tokens, all required, in any order, with or
without delimiters (``../shared/facts/capture.md``); the default is
``{Namespace}/{EventHub}/{PartitionId}/{Year}/{Month}/{Day}/{Hour}/{Minute}/{Second}``, plus ``.avro``. Listing
one partition by prefix works only while ``{PartitionId}`` comes before the first time token; otherwise the
whole hub's prefix is listed and the names filtered.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from eventhubs_spark.errors import OptionError

DEFAULT_FORMAT = "{Namespace}/{EventHub}/{PartitionId}/{Year}/{Month}/{Day}/{Hour}/{Minute}/{Second}"
TOKENS = ("Namespace", "EventHub", "PartitionId", "Year", "Month", "Day", "Hour", "Minute", "Second")
_TIME = ("Year", "Month", "Day", "Hour", "Minute", "Second")
_PATTERNS = {
    "Namespace": r"(?P<Namespace>.+?)",
    "EventHub": r"(?P<EventHub>.+?)",
    "PartitionId": r"(?P<PartitionId>\d+)",
    "Year": r"(?P<Year>\d{4})",
}
_PATTERNS.update({t: f"(?P<{t}>\\d{{2}})" for t in ("Month", "Day", "Hour", "Minute", "Second")})


@dataclass(frozen=True)
class FileName:
    """What a Capture file's name says: the namespace, hub and partition, and its window's start (UTC)."""

    name: str
    namespace: str
    hub: str
    partition: str
    start: dt.datetime


class NameFormat:
    """One ``archiveNameFormat``, checked, as a pattern and as listing prefixes."""

    def __init__(self, text: str, option: str = "eventhubs.capture.nameFormat") -> None:
        found = re.findall(r"\{(\w+)\}", text)
        unknown = [t for t in found if t not in TOKENS]
        missing = [t for t in TOKENS if t not in found]
        twice = sorted({t for t in found if found.count(t) > 1})
        if unknown or missing or twice:
            said = [f"unknown token {{{t}}}" for t in unknown] + [f"no {{{t}}}" for t in missing]
            said += [f"{{{t}}} twice" for t in twice]
            raise OptionError(f"{option} {text!r}: {', '.join(said)}; all nine tokens, each once, as the service "
                              f"requires, e.g. .option('{option}', '{DEFAULT_FORMAT}')")  # fmt: skip
        self.text = text
        pattern = "".join(_PATTERNS[part[1:-1]] if re.fullmatch(r"\{\w+\}", part) else re.escape(part)
                          for part in re.split(r"(\{\w+\})", text) if part)  # fmt: skip
        self._pattern = re.compile(pattern + r"\.avro")

    def parse(self, name: str) -> FileName | None:
        """The parts of a file's name (a blob's name under the container, or a path under the folder); None for a
        name the format does not make (another hub's layout, a temporary file)."""
        m = self._pattern.fullmatch(name)
        if m is None:
            return None
        g = m.groupdict()
        try:
            start = dt.datetime(int(g["Year"]), int(g["Month"]), int(g["Day"]), int(g["Hour"]), int(g["Minute"]),
                                int(g["Second"]), tzinfo=dt.timezone.utc)  # fmt: skip
        except ValueError:  # 02/30 and such: not a name the service writes
            return None
        return FileName(name, g["Namespace"], g["EventHub"], str(int(g["PartitionId"])), start)

    def prefix(self, namespace: str, hub: str, partition: str | None = None) -> str:
        """The longest literal start of every file name of ``hub`` (of ``partition`` too, where the format names
        the partition before any time token): what to list."""
        values = {"Namespace": namespace, "EventHub": hub}
        if partition is not None:
            values["PartitionId"] = partition
        out = []
        for part in (p for p in re.split(r"(\{\w+\})", self.text) if p):
            token = part[1:-1] if re.fullmatch(r"\{\w+\}", part) else None
            if token is None:
                out.append(part)
            elif token in values:
                out.append(values[token])
            else:
                break
        return "".join(out)

    @property
    def lists_by_partition(self) -> bool:
        """Whether a listing can be narrowed to one partition (``{PartitionId}`` before every time token)."""
        position = {t: self.text.index("{" + t + "}") for t in TOKENS}
        return all(position["PartitionId"] < position[t] for t in _TIME)
