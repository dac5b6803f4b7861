"""Event Hubs Capture, as the service writes it: each partition's events in Avro files, window by window.

What the service writes (``../shared/facts/capture.md``, from real files, which win where the documentation
differs): Avro object container files whose header holds only ``avro.codec`` and ``avro.schema``, the writer
schema below byte for byte (``Properties`` values with a fifth ``"null"`` branch the documentation leaves out),
codec ``null`` or ``deflate``; one file per partition and window, the window closed by time or by size,
whichever comes first; files named by ``archiveNameFormat`` from the window's start; an empty window gives a
file with one block of zero events (unless ``skip_empty``). ``EnqueuedTimeUtc`` is a .NET culture string
precise to the second (``12/9/2022 4:51:25 PM``); ``SystemProperties`` carries ``x-opt-enqueued-time`` in epoch
milliseconds, ``x-opt-partition-key`` where the event had one, and (inferred, see :data:`PROPERTY_NAMES`) the
fields of the message's properties section it was sent with (``content-type``, ``message-id``, ...).

Events are taken as they are appended (a hub's retention can remove them from the hub before their window is
written, and Capture still has them), encoded and written by a thread of its own, to a local folder or a blob
container (Azurite). Faults a test can ask for: capture paused (the events of that time are never captured:
a real gap), a partition's next file written late (back-fill after a storage outage), a partition's next file
written twice (under a second name, one second later).

Where the service's choice is unknown (application property types other than long, double, string, bytes and
null) the emulator picks: booleans as the strings ``True``/``False`` (.NET's), timestamps as epoch
milliseconds (long), UUIDs as strings.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import amqp

if TYPE_CHECKING:  # the broker's types, by their shape (the broker imports this module, not the reverse)
    from typing import Protocol

    class Event(Protocol):
        sequence_number: int
        segment: int
        offset: int
        enqueued_ms: int
        partition_key: str | None
        size: int

        @property
        def body(self) -> bytes: ...

    class _Hub(Protocol):
        name: str

    class Partition(Protocol):
        id: str

        @property
        def hub(self) -> _Hub: ...

        def wire_offset(self, offset: int, segment: int | None = None) -> str: ...


WRITER_SCHEMA = (
    '{"type":"record","name":"EventData","namespace":"Microsoft.ServiceBus.Messaging","fields":['
    '{"name":"SequenceNumber","type":"long"},{"name":"Offset","type":"string"},'
    '{"name":"EnqueuedTimeUtc","type":"string"},'
    '{"name":"SystemProperties","type":{"type":"map","values":["long","double","string","bytes"]}},'
    '{"name":"Properties","type":{"type":"map","values":["long","double","string","bytes","null"]}},'
    '{"name":"Body","type":["null","bytes"]}]}'
)
DEFAULT_NAME_FORMAT = "{Namespace}/{EventHub}/{PartitionId}/{Year}/{Month}/{Day}/{Hour}/{Minute}/{Second}"
TOKENS = ("Namespace", "EventHub", "PartitionId", "Year", "Month", "Day", "Hour", "Minute", "Second")
# The AMQP properties section's fields, in their order, by the names the SDKs give them among an event's system
# properties. Capture writes what the .NET EventData.SystemProperties holds (inferred: the real files seen held
# only x-opt-enqueued-time and x-opt-partition-key, from events sent without these), so a content type, and with it
# the Schema Registry's schema id, reaches the files.
PROPERTY_NAMES = ("message-id", "user-id", "to", "subject", "reply-to", "correlation-id", "content-type",
                  "content-encoding", "absolute-expiry-time", "creation-time", "group-id", "group-sequence",
                  "reply-to-group-id")  # fmt: skip
BLOCK_EVENTS = 1000  # events per Avro block (the service's own block size is not known; readers must not care)


@dataclass
class CaptureSettings:
    """How and where the emulator captures.

    ``destination``: a local folder, or ``blob`` with ``connection_string`` and ``container`` (Azurite).
    ``window_seconds`` / ``window_bytes``: the time and size windows (the service allows 60-900 s and
    10-500 MiB; the emulator takes any, so tests run in seconds). ``hubs``: the hubs captured (all when empty).
    """

    destination: str = ""
    connection_string: str | None = None
    container: str | None = None
    name_format: str = DEFAULT_NAME_FORMAT
    namespace: str = "emulator"
    window_seconds: float = 300.0
    window_bytes: int = 300 * 1024 * 1024
    codec: str = "null"
    skip_empty: bool = False
    hubs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        missing = [t for t in TOKENS if "{" + t + "}" not in self.name_format]
        if missing:
            raise ValueError(
                f"capture name format {self.name_format!r} lacks {', '.join('{' + t + '}' for t in missing)}: "
                f"all nine tokens are required, e.g. {DEFAULT_NAME_FORMAT!r}"
            )
        if self.codec not in ("null", "deflate"):
            raise ValueError(f"capture codec {self.codec!r}: 'null' or 'deflate'")
        if not self.destination:
            raise ValueError("capture needs a destination: a local folder, or 'blob' with a connection string and a "
                             "container")  # fmt: skip
        if self.destination == "blob" and not (self.connection_string and self.container):
            raise ValueError("capture to blob needs connection_string and container, e.g. Azurite's")
        if self.window_seconds <= 0 or self.window_bytes <= 0:
            raise ValueError("capture windows must be positive (window_seconds, window_bytes)")


def file_name(name_format: str, namespace: str, hub: str, partition: str, start: dt.datetime) -> str:
    """A file's name: the format's tokens filled from the window's start (UTC), zero-padded, plus ``.avro``."""
    values = {"Namespace": namespace, "EventHub": hub, "PartitionId": partition, "Year": f"{start.year:04d}",
              "Month": f"{start.month:02d}", "Day": f"{start.day:02d}", "Hour": f"{start.hour:02d}",
              "Minute": f"{start.minute:02d}", "Second": f"{start.second:02d}"}  # fmt: skip
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], name_format) + ".avro"


def dotnet_time(ms: int) -> str:
    """Epoch milliseconds as Capture writes ``EnqueuedTimeUtc``: ``M/d/yyyy h:mm:ss tt``, UTC, whole seconds."""
    t = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    return (
        f"{t.month}/{t.day}/{t.year} {t.hour % 12 or 12}:{t.minute:02d}:{t.second:02d} {'AM' if t.hour < 12 else 'PM'}"
    )


# -- Avro, by hand (the writer's bytes are ours to control; any Avro reader reads them) --------------------------
def _long(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _bytes(b: bytes) -> bytes:
    return _long(len(b)) + b


def _string(s: str) -> bytes:
    return _bytes(s.encode("utf-8"))


_DOUBLE = struct.Struct("<d")


def _system_value(value: Any) -> bytes:
    """A value of ``SystemProperties`` (union long, double, string, bytes)."""
    if isinstance(value, bytes):
        return _long(3) + _bytes(value)
    if isinstance(value, float):
        return _long(1) + _DOUBLE.pack(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return _long(0) + _long(int(value))
    return _long(2) + _string(str(value))


def _property_value(value: Any) -> bytes:
    """A value of ``Properties`` (union long, double, string, bytes, null); see the module's note on the rest."""
    if value is None:
        return _long(4)
    if isinstance(value, bool):
        return _long(2) + _string("True" if value else "False")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _long(3) + _bytes(bytes(value))
    if isinstance(value, float):
        return _long(1) + _DOUBLE.pack(value)
    if isinstance(value, int):
        return _long(0) + _long(int(value))
    if isinstance(value, uuid.UUID):
        return _long(2) + _string(str(value))
    return _long(2) + _string(str(value))


def _map(entries: list[tuple[str, bytes]]) -> bytes:
    if not entries:
        return _long(0)
    return _long(len(entries)) + b"".join(_string(k) + v for k, v in entries) + _long(0)


def event_record(event: Event, wire_offset: str) -> bytes:
    """One stored event as a Capture record (binary Avro, the writer schema's field order)."""
    properties: dict[Any, Any] = {}
    body: bytes | None = None
    sent_with: list[tuple[str, bytes]] = []  # the message's properties section, as EventData.SystemProperties has it
    for descriptor, start, _ in amqp.split_sections(event.body):
        if descriptor == amqp.PROPERTIES:
            fields = amqp.section_value(event.body, start) or []
            sent_with = [(name, _system_value(value)) for name, value in zip(PROPERTY_NAMES, fields, strict=False)
                         if value is not None]  # fmt: skip
        elif descriptor == amqp.APPLICATION_PROPERTIES:
            properties = amqp.section_value(event.body, start) or {}
        elif descriptor == amqp.DATA:
            body = (body or b"") + bytes(amqp.section_value(event.body, start))
        elif descriptor == amqp.AMQP_VALUE and body is None:
            value = amqp.section_value(event.body, start)
            body = value if isinstance(value, bytes) else str(value).encode("utf-8")
    system: list[tuple[str, bytes]] = [("x-opt-enqueued-time", _system_value(event.enqueued_ms))]
    if event.partition_key is not None:
        system.append(("x-opt-partition-key", _system_value(event.partition_key)))
    system += sent_with
    props = [(str(k), _property_value(v)) for k, v in properties.items()]
    return b"".join((
        _long(event.sequence_number), _string(wire_offset), _string(dotnet_time(event.enqueued_ms)), _map(system),
        _map(props), _long(0) if body is None else _long(1) + _bytes(body),
    ))  # fmt: skip


def container_file(records: list[bytes], codec: str, sync: bytes | None = None) -> bytes:
    """An Avro object container file of ``records`` (blocks of :data:`BLOCK_EVENTS`); none gives one block of
    zero events, as the service's empty files."""
    sync = sync or os.urandom(16)
    meta = [("avro.codec", _bytes(codec.encode())), ("avro.schema", _bytes(WRITER_SCHEMA.encode()))]
    out = [b"Obj\x01", _long(len(meta)), *(_string(k) + v for k, v in meta), _long(0), sync]
    blocks = [records[i : i + BLOCK_EVENTS] for i in range(0, len(records), BLOCK_EVENTS)] or [[]]
    for block in blocks:
        data = b"".join(block)
        if codec == "deflate" and block:
            packer = zlib.compressobj(6, zlib.DEFLATED, -15)  # raw deflate, as Avro's codec
            data = packer.compress(data) + packer.flush()
        out += [_long(len(block)), _long(len(data)), data, sync]
    return b"".join(out)


# -- the writer ---------------------------------------------------------------------------------------------------
@dataclass
class _Window:
    start_ms: int
    events: list[tuple[Event, str]] = field(default_factory=list)
    size: int = 0


@dataclass
class CapturedFile:
    """A file written: its name, partition and sequence range (None for an empty one), for tests and logs."""

    name: str
    hub: str
    partition: str
    first: int | None
    last: int | None
    count: int
    written_at: float


class Capturer:
    """Captures the events appended to the hubs it covers; windows closed and files written by its thread."""

    def __init__(self, settings: CaptureSettings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.clock = clock
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, str], _Window] = {}
        self._paused: set[str] = set()  # hubs whose events are not captured now (lower-case names)
        self._late: dict[tuple[str, str], float] = {}  # the next file of a partition: written this many s late
        self._twice: set[tuple[str, str]] = set()  # the next file of a partition: written twice
        self._delayed: list[tuple[float, str, bytes, CapturedFile]] = []
        self._full: list[tuple[tuple[str, str], _Window]] = []  # windows the size closed, to be written
        self.files: list[CapturedFile] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._container: Any = None

    # -- the broker's side (its event loop's thread) --
    def covers(self, hub: str) -> bool:
        return not self.settings.hubs or hub.lower() in {h.lower() for h in self.settings.hubs}

    def start_partition(self, partition: Partition) -> None:
        """Open the first window of a partition (when capture is switched on, or the hub is made)."""
        with self._lock:
            self._windows.setdefault((partition.hub.name, partition.id), _Window(int(self.clock() * 1000)))

    def appended(self, partition: Partition, events: Sequence[Event]) -> None:
        """Events just appended to ``partition``: into its open window, unless capture of the hub is paused."""
        hub = partition.hub.name
        if hub.lower() in self._paused:
            return
        key = (hub, partition.id)
        with self._lock:
            window = self._windows.setdefault(key, _Window(int(self.clock() * 1000)))
            for event in events:
                window.events.append((event, partition.wire_offset(event.offset, event.segment)))
                window.size += event.size
                if window.size >= self.settings.window_bytes:  # the size window closes at once, mid-batch if so
                    self._full.append((key, window))
                    window = self._windows[key] = self._next_window(window)

    # -- faults --
    def pause(self, hub: str) -> None:
        self._paused.add(hub.lower())

    def resume(self, hub: str) -> None:
        self._paused.discard(hub.lower())

    def delay_next(self, hub: str, partition: str, seconds: float) -> None:
        with self._lock:
            self._late[(hub, partition)] = seconds

    def duplicate_next(self, hub: str, partition: str) -> None:
        with self._lock:
            self._twice.add((hub, partition))

    # -- windows and files --
    def start(self) -> Capturer:
        if self.settings.destination == "blob":
            from azure.storage.blob import ContainerClient

            container = ContainerClient.from_connection_string(self.settings.connection_string or "",
                                                               self.settings.container or "")  # fmt: skip
            try:
                container.create_container()
            except Exception as exc:  # it exists already: fine; anything else shows at the first write
                if "ContainerAlreadyExists" not in str(exc):
                    raise
            self._container = container
        self._thread = threading.Thread(target=self._run, name="eventhubs-emulator-capture", daemon=True)
        self._thread.start()
        return self

    def stop(self, flush: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if flush:
            self.flush()
            self._write_delayed(force=True)

    def flush(self) -> list[CapturedFile]:
        """Close every open window now and write its file (tests: the files, without waiting for a window)."""
        return self._close(lambda window, now_ms: True)

    def _due(self, window: _Window, now_ms: int) -> bool:
        """A window closes by time or by size, whichever comes first."""
        return (
            now_ms - window.start_ms >= self.settings.window_seconds * 1000 or window.size >= self.settings.window_bytes
        )

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self._close(self._due)
                self._write_delayed()
            except Exception:  # the capture thread must go on; a failed write shows as a missing file
                import logging

                logging.getLogger(__name__).exception("capture failed")

    def _next_window(self, closed: _Window) -> _Window:
        """The window after ``closed``: from now, and at least a second after it began, so that two windows of a
        partition never share a file name (names are to the second)."""
        return _Window(max(int(self.clock() * 1000), closed.start_ms + 1000))

    def _close(self, due: Callable[[_Window, int], bool]) -> list[CapturedFile]:
        now_ms = int(self.clock() * 1000)
        closing: list[tuple[str, str, _Window, float, bool]] = []
        with self._lock:
            ready, self._full = self._full, []
            for key, window in list(self._windows.items()):
                if due(window, now_ms):
                    self._windows[key] = self._next_window(window)
                    ready.append((key, window))
            for key, window in ready:
                closing.append((*key, window, self._late.pop(key, 0.0), key in self._twice))
                self._twice.discard(key)
        written = []
        for hub, partition, window, late, twice in closing:
            if not window.events and self.settings.skip_empty:
                continue
            records = [event_record(event, offset) for event, offset in window.events]
            data = container_file(records, self.settings.codec)
            start = dt.datetime.fromtimestamp(window.start_ms / 1000, dt.timezone.utc)
            seqs = [e.sequence_number for e, _ in window.events]
            copies = [start, start + dt.timedelta(seconds=1)] if twice else [start]
            for when in copies:
                name = file_name(self.settings.name_format, self.settings.namespace, hub, partition, when)
                info = CapturedFile(name, hub, partition, seqs[0] if seqs else None, seqs[-1] if seqs else None,
                                    len(seqs), 0.0)  # fmt: skip
                if late > 0:
                    with self._lock:
                        self._delayed.append((self.clock() + late, name, data, info))
                else:
                    self._write(name, data, info)
                    written.append(info)
        return written

    def _write_delayed(self, force: bool = False) -> None:
        now = self.clock()
        with self._lock:
            due = [d for d in self._delayed if force or d[0] <= now]
            self._delayed = [d for d in self._delayed if d not in due]
        for _, name, data, info in due:
            self._write(name, data, info)

    def _write(self, name: str, data: bytes, info: CapturedFile) -> None:
        if self._container is not None:
            self._container.upload_blob(name, data, overwrite=True)
        else:
            path = os.path.join(self.settings.destination, *name.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            temporary = f"{path}.{os.getpid()}.tmp"
            with open(temporary, "wb") as f:
                f.write(data)
            os.replace(temporary, path)  # a reader never sees half a file
        info.written_at = self.clock()
        with self._lock:
            self.files.append(info)
