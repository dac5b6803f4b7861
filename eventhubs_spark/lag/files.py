"""Where a stream's lag goes besides its log line, and Spark's commit log read back.

The lag goes into a small JSON file per trigger under the query's checkpoint location (written off the
trigger, kept for ``eventhubs-spark lag`` and the notebooks); the command also reads Spark's own commit log.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from eventhubs_spark.auth.storage import local_path
from eventhubs_spark.lag.tracker import LagReport, from_micros, to_micros
from eventhubs_spark.positions import geo_segments

UTC = dt.timezone.utc
_LOG = logging.getLogger(__name__)

KEEP_FILES = 100  # trigger files kept per hub (Spark keeps 100 batches of its own logs by default)
# Trigger files waiting for the writer thread at most (LagFiles.write_later): past that the oldest waiting one is
# left out, and said, when the location takes longer to write than triggers come.
WAITING_FILES = 16
# How long the writer thread lets a trigger finish before writing its file: the file is CPU in the same
# interpreter (7,000 values at 1,024 partitions), and the runner's thread Spark waits on still has the trigger's
# progress report to make.
WRITE_AFTER = 0.02
FILE_DIRECTORY = "eventhubs-lag"  # under the query's checkpoint location, one folder per hub


class Folder(Protocol):
    """Where a checkpoint location's files are read from: a local folder, or blobs under a prefix
    (:class:`eventhubs_spark.checkpoints.blob.BlobFolder`), so the command reads either alike."""

    where: str

    def names(self, sub: str) -> list[str]:
        """The files directly in folder ``sub`` (``a/b``), by name; empty when there is none."""
        ...

    def folders(self, sub: str) -> list[str]:
        """The folders directly in folder ``sub``, by name; empty when there is none."""
        ...

    def text(self, path: str) -> str:
        """A file's text (OSError when it cannot be read)."""
        ...

    def modified(self, path: str) -> dt.datetime:
        """When a file was last written."""
        ...


class LocalFolder:
    """A checkpoint location on a path this process can open (:func:`local_path`)."""

    def __init__(self, location: str) -> None:
        self.where = location
        self.root = Path(local_path(location))

    def names(self, sub: str) -> list[str]:
        folder = self.root / sub
        return [p.name for p in folder.iterdir() if p.is_file()] if folder.is_dir() else []

    def folders(self, sub: str) -> list[str]:
        folder = self.root / sub
        return [p.name for p in folder.iterdir() if p.is_dir()] if folder.is_dir() else []

    def text(self, path: str) -> str:
        return (self.root / path).read_text(encoding="utf-8")

    def modified(self, path: str) -> dt.datetime:
        return dt.datetime.fromtimestamp((self.root / path).stat().st_mtime, UTC)


SOURCE_FILE = "source.json"


def stored_sources(folder: Folder) -> dict[str, dict[str, str]]:
    """The hubs whose queries wrote lag files under a checkpoint location, with the options each stored
    (:meth:`LagFiles.write_source`); a hub that stored none is left out."""
    found: dict[str, dict[str, str]] = {}
    for hub in folder.folders(FILE_DIRECTORY):
        with contextlib.suppress(OSError, ValueError, TypeError):
            doc = json.loads(folder.text(f"{FILE_DIRECTORY}/{hub}/{SOURCE_FILE}"))
            if isinstance(doc, dict):
                found[hub] = {str(k): str(v) for k, v in doc.items()}
    return found


class LagFiles:
    """A stream's lag figures, a small JSON file per trigger under ``<checkpoint location>/eventhubs-lag/
    <hub>/``, the newest :data:`KEEP_FILES` kept. Written whole (a temporary file renamed), so a reader
    never sees half of one."""

    def __init__(self, checkpoint_location: str, hub: str, folder: Folder | None = None) -> None:
        """``folder``: where to read them from (default: the location as a local path, where they are written)."""
        self.location = checkpoint_location
        self.folder: Folder = folder if folder is not None else LocalFolder(checkpoint_location)
        self.hub = hub
        self._sub = f"{FILE_DIRECTORY}/{hub}"
        self._written: collections.deque[Path] | None = None  # the trigger files there, oldest first (see write)
        self._start_writer_state()

    def _start_writer_state(self) -> None:
        self._waiting: collections.deque[LagReport] = collections.deque()  # for the writer thread (write_later)
        self._writing = False
        self._left_out = 0  # trigger files left out since the last warning (the writer fell behind)
        self._writer_cond = threading.Condition()
        self._writer: threading.Thread | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Without the files written: the stream reader that holds this goes to every task, and up to 100 paths
        would go with it (a driver that gets it back lists the folder again); nor the writer thread's state."""
        state = self.__dict__.copy()
        state["_written"] = None
        for name in ("_waiting", "_writing", "_left_out", "_writer_cond", "_writer"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._start_writer_state()

    def write_later(self, report: LagReport) -> None:
        """One trigger's file, written by a thread of its own, in trigger order.

        Why not on the trigger: Spark waits on ``latestOffset`` for the batch's plan, and the file is not part of
        it. At 1,024 partitions making and writing the file was 6.7 ms of a trigger whose planning took 0.6 ms,
        and a location on a mounted store (``/dbfs``) adds its own round trips to every trigger. A failure is
        logged as a warning (the figures stay in the driver's log and the progress). Should the location take
        longer to write than triggers come, at most :data:`WAITING_FILES` wait; older ones are left out, and
        said."""
        with self._writer_cond:
            if len(self._waiting) >= WAITING_FILES:
                self._waiting.popleft()
                self._left_out += 1
            self._waiting.append(report)
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_waiting, name="eventhubs-lag-files", daemon=True)
                self._writer.start()
            self._writer_cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every file :meth:`write_later` was given is written (or failed), at most ``timeout``
        seconds; False when some are still waiting then."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._writer_cond:
            while self._waiting or self._writing:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._writer_cond.wait(left)
        return True

    def _write_waiting(self) -> None:
        while True:
            with self._writer_cond:
                while not self._waiting:
                    self._writer_cond.wait()
            time.sleep(WRITE_AFTER)  # the trigger that gave it finishes first
            while True:
                with self._writer_cond:
                    if not self._waiting:
                        self._writer_cond.notify_all()
                        break
                    report = self._waiting.popleft()
                    self._writing = True
                    left_out, self._left_out = self._left_out, 0
                if left_out:
                    _LOG.warning("eventhubs: hub %s: %d triggers' lag files were left out: %s takes longer to "
                                 "write than triggers come (the newest are kept)", self.hub, left_out,
                                 self.directory)  # fmt: skip
                try:
                    self.write(report)
                except Exception as exc:  # the figures stay in the driver's log and the progress
                    _LOG.warning("eventhubs: hub %s: the lag figures could not be written under %s: %s", self.hub,
                                 self.directory, exc)  # fmt: skip
                finally:
                    with self._writer_cond:
                        self._writing = False
                        self._writer_cond.notify_all()

    @property
    def directory(self) -> Path:
        """Where the driver writes them (a local path)."""
        return Path(local_path(self.location)) / self._sub

    def write(self, report: LagReport) -> Path:
        """One trigger's file, the oldest beyond :data:`KEEP_FILES` removed.

        A driver writes one a trigger, so this is on the planning path: at 1,024 partitions the figures are
        7,000 values. They are written without indentation (json's C encoder; with an indent Python's own
        encoder took 7 ms of a 10 ms trigger), and the folder is listed once, then the files written are
        counted here."""
        directory = self.directory
        if self._written is None:
            directory.mkdir(parents=True, exist_ok=True)
            self._written = collections.deque(self.files())
        stamp = to_micros(report.at)
        while (directory / f"{stamp:017d}.json").exists():  # two triggers in one microsecond: both kept
            stamp += 1
        path = directory / f"{stamp:017d}.json"
        _write_whole(path, json.dumps(report.to_json(), sort_keys=True))
        written = self._written
        written.append(path)
        while len(written) > KEEP_FILES:
            with contextlib.suppress(OSError):
                written.popleft().unlink()
        return path

    def write_reads(self, reads: Mapping[str, tuple[int, int]]) -> None:
        """Where the tasks' reading of each partition ended and the enqueued time of the event before it
        (``reads.json``): what the next trigger's file would say, for a command that looks before it comes
        (or after the query stopped)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        doc = {p: {"end": geo_segments.show(end), "enqueuedTime": from_micros(micros).isoformat()}  # type: ignore[union-attr]
               for p, (end, micros) in sorted(reads.items())}  # fmt: skip
        _write_whole(self.directory / "reads.json", json.dumps(doc, sort_keys=True))

    def write_source(self, options: Mapping[str, str]) -> None:
        """The query's options without their secrets (``source.json``, see :func:`shareable_options`), so a
        command given only the checkpoint location (``eventhubs-spark lag``) knows the hub, its namespace and
        how the query reads; the secret it still needs comes from the user."""
        self.directory.mkdir(parents=True, exist_ok=True)
        _write_whole(self.directory / SOURCE_FILE, json.dumps(dict(options), indent=1, sort_keys=True))

    def reads(self) -> dict[str, tuple[int, int]]:
        """What :meth:`write_reads` wrote last (empty when nothing was)."""
        try:
            doc = json.loads(self.folder.text(f"{self._sub}/reads.json"))
            return {str(p): (geo_segments.parse(str(v["end"])),
                             to_micros(dt.datetime.fromisoformat(str(v["enqueuedTime"]))))
                    for p, v in doc.items()}  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def files(self) -> list[Path]:
        """The trigger files (written here), oldest first."""
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.iterdir() if p.suffix == ".json" and p.stem.isdigit())

    def names(self) -> list[str]:
        """The trigger files' names in the folder read from, oldest first."""
        return sorted(n for n in self.folder.names(self._sub) if n.endswith(".json") and n[:-5].isdigit())

    def reports(self, last: int | None = None) -> list[LagReport]:
        """The reports of the last ``last`` triggers (all kept ones: None), oldest first; a file that cannot
        be read (removed meanwhile) is passed over."""
        out = []
        names = self.names()
        for name in names[-last:] if last else names:
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                out.append(LagReport.from_json(json.loads(self.folder.text(f"{self._sub}/{name}"))))
        return out


@dataclass(frozen=True)
class SparkCommit:
    """What a Spark checkpoint location says of one hub: the last committed batch, where it left each
    partition (the next position to read), and when its commit was written."""

    batch: int
    positions: Mapping[str, int]
    committed_at: dt.datetime


def last_commit(folder: Folder, hub: str) -> SparkCommit | None:
    """The last batch Spark committed (``commits/N``) and this hub's end offset in it (``offsets/N``: a version
    line, the batch's metadata, then one line per source; ours is ``{"<hub>": {"<partition>": <position>}}``).
    None when no batch has been committed yet. A location of another hub's query raises ValueError."""
    batches = sorted(int(n) for n in folder.names("commits") if n.isdigit())
    if not batches:
        if not folder.names("offsets") and not folder.names(""):
            raise ValueError(f"no Spark checkpoint at {folder.where!r}: nothing is there")
        return None
    batch = batches[-1]
    hubs: list[str] = []
    for line in folder.text(f"offsets/{batch}").splitlines()[2:]:
        try:
            doc = json.loads(line)
        except ValueError:
            continue  # "-": a source without an offset in this batch
        if not isinstance(doc, dict):
            continue
        hubs.extend(str(k) for k in doc if not str(k).startswith("@"))
        found = {str(k).lower(): v for k, v in doc.items()}.get(hub.lower())
        if isinstance(found, dict):
            positions = {str(p): geo_segments.parse(str(v)) for p, v in found.items()}
            return SparkCommit(batch, positions, folder.modified(f"commits/{batch}"))
    raise ValueError(f"the checkpoint at {folder.where!r} is of a query reading {sorted(hubs) or 'no hub'}, "
                     f"not {hub!r}: name the hub its query reads (EntityPath or eventhubs.name)")  # fmt: skip


def _write_whole(path: Path, text: str) -> None:
    """Write a file so a reader sees the old one or the new one, never half (a temporary file renamed)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
