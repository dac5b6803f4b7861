"""The exactly-once sink's records: fences (the hub's ends at each commit) and marks.

Per write: where the target hub's partitions ended at each committed batch (fences), and which tasks have
begun sending (marks).

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eventhubs_spark.auth.storage import local_path

FOLDER = "eventhubs-sink"
_FENCE = re.compile(r"^fence-(\d+)\.json$")
_MARKS = re.compile(r"^marks-(\d+)$")


class WriteFences:
    """One write's records (a stream's query id, or a ``df.write``'s write id) for one target hub."""

    def __init__(self, location: str, write_id: str, target: str) -> None:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", write_id):
            raise ValueError(f"a write id is letters, digits, '.', '_' and '-', got {write_id!r}")
        self.root = Path(local_path(location)) / FOLDER / write_id
        self.target = target  # "namespace/hub": a fence of another hub (the query's target changed) is not used

    def fence_before(self, batch: int) -> dict[str, int] | None:
        """The partitions' ends (next sequence numbers) recorded when the latest batch before ``batch`` committed,
        or None when none did (the write's first batch, or a target that changed since)."""
        best = -1
        for name in _names(self.root):
            found = _FENCE.match(name)
            if found and best < int(found.group(1)) < batch:
                best = int(found.group(1))
        if best < 0:
            return None
        record = _read(self.root / f"fence-{best}.json")
        if record is None or record.get("target") != self.target:
            return None
        return {str(p): int(seq) for p, seq in record["ends"].items()}

    def write_fence(self, batch: int, ends: dict[str, int], figures: Mapping[str, float] | None = None) -> None:
        """Record the partitions' ends after ``batch`` committed, and drop what no run of a batch will read again:
        marks of batches before it, fences before the one before it (a re-run of ``batch`` reads that one).
        ``figures``: what exactly once did in the batch (rows found stored, sends settled, events read back),
        added to the write's totals (``totals.json``), so how often it had to act can be looked up later."""
        _write(self.root / f"fence-{batch}.json", {"target": self.target, "batch": batch, "ends": ends})
        if figures:
            totals = _read(self.root / "totals.json") or {}
            for key, value in figures.items():
                totals[key] = totals.get(key, 0) + value
            totals["last batch"] = batch
            _write(self.root / "totals.json", totals)
        for name in _names(self.root):
            fence, marks = _FENCE.match(name), _MARKS.match(name)
            if fence and int(fence.group(1)) < batch - 1:
                (self.root / name).unlink(missing_ok=True)
            elif marks and int(marks.group(1)) < batch:
                _remove_folder(self.root / name)

    def totals(self) -> dict[str, Any]:
        """The write's totals so far (see :meth:`write_fence`)."""
        return _read(self.root / "totals.json") or {}

    def mark(self, batch: int, partition: int) -> dict[str, int] | None:
        """What an earlier attempt of task ``partition`` of ``batch`` recorded before it sent (the ends it looked up,
        or none), or None when no attempt began sending."""
        record = _read(self.root / f"marks-{batch}" / f"{partition}.json")
        if record is None:
            return None
        return {str(p): int(seq) for p, seq in record.get("ends", {}).items()}

    def write_mark(self, batch: int, partition: int, ends: dict[str, int] | None) -> None:
        """Say that an attempt of task ``partition`` of ``batch`` is about to send (with the ends it looked up)."""
        _write(self.root / f"marks-{batch}" / f"{partition}.json", {"target": self.target, "ends": ends or {}})


def _names(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []


def _read(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as file:
            record = json.load(file)
    except FileNotFoundError:
        return None
    return record if isinstance(record, dict) else None


def _write(path: Path, record: dict[str, Any]) -> None:
    """Write ``record`` whole: to a temporary file beside ``path``, flushed to disk, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump(record, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def _remove_folder(folder: Path) -> None:
    for name in _names(folder):
        (folder / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # a file written meanwhile (a late attempt): left for the next commit
        folder.rmdir()
