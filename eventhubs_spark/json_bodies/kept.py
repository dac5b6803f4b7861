"""A JSON read's schema, kept where the user says (``eventhubs.json.schemaLocation``), with its history.

Why kept: a Python source fixes its schema when the query starts, so a restart must read with the schema the
query had, and a schema that grew (new fields seen, ``addNewColumns``) must be the one the next start reads.
Each version is a file ``_schemas/<n>`` (as Auto Loader keeps its own), never changed once written: the schema
as DDL, the fields it added to the version before, and when. A version is created with an exclusive create, so
two processes that find the same new fields at once write one version between them.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
from dataclasses import dataclass
from pathlib import Path

from eventhubs_spark.auth.storage import local_path


@dataclass(frozen=True)
class Version:
    number: int
    schema: str  # DDL of the value struct's fields (json_bodies.types.to_text)
    added: tuple[str, ...] = ()  # what it added to the version before (dotted paths)


class KeptSchemas:
    def __init__(self, location: str) -> None:
        self.location = location
        self.root = Path(local_path(location)) / "_schemas"

    def versions(self) -> list[Version]:
        """Every version kept, oldest first."""
        try:
            names = sorted(int(n) for n in os.listdir(self.root) if n.isdigit())
        except FileNotFoundError:
            return []
        out = []
        for n in names:
            with open(self.root / str(n), encoding="utf-8") as f:
                record = json.load(f)
            out.append(Version(n, record["schema"], tuple(record.get("added", ()))))
        return out

    def latest(self) -> Version | None:
        versions = self.versions()
        return versions[-1] if versions else None

    def create(self, number: int, schema: str, added: list[str]) -> bool:
        """Write version ``number``; False when another process wrote it first (it is left as that one wrote it)."""
        self.root.mkdir(parents=True, exist_ok=True)
        record = {"schema": schema, "added": added,
                  "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}  # fmt: skip
        temporary = self.root / f".{number}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(record, f)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(temporary, self.root / str(number))  # atomic, and refused when the name exists
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        return True
