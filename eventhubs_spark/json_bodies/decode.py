"""JSON bodies into a ``value`` struct column and a rescue column, in a task, columnar where the bodies allow.

Why this shape: pyarrow's C++ JSON reader parses a batch's bodies at once (newline-delimited, typed by the
schema), tens of times faster than ``json.loads`` per body; but it fails a whole block for one body that does not
fit. So a batch's bodies are parsed in blocks, and a block that fails (a body that is not JSON, a value of another
type, a field the schema lacks, a duplicate key, a body with a line break) is halved until the bodies that do not
fit stand alone; only those are read by Python's ``json`` and the rules below. A batch with a few odd bodies
costs a few more parses, not a row-by-row pass.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import base64
import datetime
import io
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from eventhubs_spark.errors import DoesNotFit, SchemaEvolved
from eventhubs_spark.json_bodies import types
from eventhubs_spark.json_bodies.spark_text import spark_json_text

ADD, RESCUE, FAIL, NONE = "addnewcolumns", "rescue", "failonnewcolumns", "none"
MODES = (ADD, RESCUE, FAIL, NONE)


@dataclass
class Outcome:
    """One batch decoded: the values, the rescue column, and what did not fit the schema."""

    values: pa.StructArray
    rescued: pa.Array
    proposed: pa.DataType | None = None  # the schema the bodies ask for, when it differs (addNewColumns)
    added: list[str] = field(default_factory=list)
    first_misfit: int | None = None  # the first row that did not fit (for the error's partition and sequence)
    slow_rows: int = 0  # bodies read by Python's json


def decode(bodies: pa.Array, schema: pa.StructType, mode: str) -> Outcome:
    """``bodies`` (binary) parsed into ``schema``'s struct, by ``mode``'s rules."""
    n = len(bodies)
    if not n:
        return Outcome(pa.array([], type=schema), pa.array([], pa.string()))
    if not bodies.null_count:  # the common case first: every body fits, none has a line break; one parse
        text, ends = _joined(bodies)
        if _one_per_line(text, ends):
            whole = _parse_text(text, n, schema, mode)
            if whole is not None:
                return Outcome(whole, pa.nulls(n, pa.string()))
    raw: list[bytes | None] = bodies.to_pylist()
    pieces: list[tuple[int, pa.StructArray]] = []  # (first row, values) of blocks the C++ reader parsed
    slow: list[int] = []
    start = 0
    for i, body in enumerate(raw):  # a body with a line break (or none) is Python's: NDJSON keeps it whole
        if body is None or b"\n" in body or b"\r" in body:
            _blocks(raw, start, i, schema, mode, pieces, slow)
            slow.append(i)
            start = i + 1
    _blocks(raw, start, n, schema, mode, pieces, slow)
    if not slow:
        values = pieces[0][1] if len(pieces) == 1 else pa.concat_arrays([p for _, p in pieces])
        return Outcome(values, pa.nulls(n, pa.string()))
    return _with_slow_rows(raw, schema, mode, pieces, sorted(slow))


def _joined(bodies: pa.Array) -> tuple[bytes, list[int]]:
    """The bodies one per line, copied once from the array's buffer (slices of it joined: no object per body), and
    the bodies' offsets in that buffer (``len(bodies) + 1`` of them)."""
    import numpy as np

    wide = pa.types.is_large_binary(bodies.type) or pa.types.is_large_string(bodies.type)
    offsets = np.frombuffer(bodies.buffers()[1], dtype=np.int64 if wide else np.int32)
    ends = offsets[bodies.offset : bodies.offset + len(bodies) + 1].tolist()
    data = memoryview(bodies.buffers()[2])
    return b"\n".join([data[ends[i] : ends[i + 1]] for i in range(len(bodies))]), ends


_FIND_FROM = 512  # bytes a body: from this mean size on, a find per body beats one count of the whole text


def _one_per_line(text: bytes, ends: list[int]) -> bool:
    """Whether the line breaks of ``text`` (:func:`_joined`'s) are exactly the separators put between its bodies:
    no body holds a line break of its own, so the C++ reader's lines are the bodies.

    Why two ways: ``bytes.count`` looks at every byte in turn (about 0.55 µs of a 2 KB document, a tenth of its
    parse), while ``bytes.find`` skips to the next line break at memory speed; a find per body costs a Python call
    each, which only pays for bodies of some size."""
    n = len(ends) - 1
    if b"\r" in text:
        return False
    if len(text) < _FIND_FROM * n:
        return text.count(b"\n") == n - 1
    find, base, at = text.find, ends[0], -1
    for i in range(1, n):  # the separator after body i - 1 is at its end, plus the i - 1 separators before it
        at = find(b"\n", at + 1)
        if at != ends[i] - base + i - 1:
            return False
    return find(b"\n", at + 1) == -1


def _blocks(raw: list[bytes | None], lo: int, hi: int, schema: pa.StructType, mode: str,
            pieces: list[tuple[int, pa.StructArray]], slow: list[int]) -> None:  # fmt: skip
    """Parse ``raw[lo:hi]`` with the C++ reader, halving what fails down to single bodies (then ``slow``)."""
    if lo >= hi:
        return
    parsed = _parse(raw, lo, hi, schema, mode)
    if parsed is not None:
        pieces.append((lo, parsed))
        return
    if hi - lo == 1:
        slow.append(lo)
        return
    mid = (lo + hi) // 2
    _blocks(raw, lo, mid, schema, mode, pieces, slow)
    _blocks(raw, mid, hi, schema, mode, pieces, slow)


def _parse(raw: list[bytes | None], lo: int, hi: int, schema: pa.StructType, mode: str) -> pa.StructArray | None:
    return _parse_text(b"\n".join(raw[lo:hi]), hi - lo, schema, mode)  # type: ignore[arg-type]


def _parse_text(text: bytes, rows: int, schema: pa.StructType, mode: str) -> pa.StructArray | None:
    """``rows`` bodies, one per line of ``text``, parsed by the C++ reader; None when any does not fit."""
    import pyarrow.json as pj

    options = pj.ParseOptions(explicit_schema=pa.schema(list(schema)),
                              unexpected_field_behavior="ignore" if mode == NONE else "infer")  # fmt: skip
    read = pj.ReadOptions(use_threads=False, block_size=len(text) + 1)  # one block: the bodies are in memory
    try:
        table = pj.read_json(io.BytesIO(text), read_options=read, parse_options=options)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError, ValueError):
        return None
    if table.num_rows != rows or pa.struct(list(table.schema)) != schema:
        return None  # an empty body (a skipped line), or fields the schema lacks ("infer" added them)
    if not schema.num_fields:  # a struct of no fields (documents that were all {}): its length is not its fields'
        return pa.array([{}] * rows, type=schema)
    arrays = [table.column(i).combine_chunks() for i in range(table.num_columns)]
    return pa.StructArray.from_arrays(arrays, fields=list(schema))


def _with_slow_rows(raw: list[bytes | None], schema: pa.StructType, mode: str,
                    pieces: list[tuple[int, pa.StructArray]], slow: list[int]) -> Outcome:  # fmt: skip
    """The batch with its odd bodies (``slow``) read one by one, between the blocks parsed (``pieces``), in order."""
    proposed: pa.DataType = schema
    first_misfit: int | None = None
    by_start = dict(pieces)
    chunks: list[pa.StructArray] = []
    values: list[Any] = []  # odd bodies' values since the last block
    rescued: list[str | None] = []
    row = 0
    while row < len(raw):
        block = by_start.get(row)
        if block is not None:
            if values:
                chunks.append(pa.array(values, type=schema))
                values = []
            chunks.append(block)
            rescued.extend([None] * len(block))
            row += len(block)
            continue
        value, rescue, asks = _one(raw[row], schema, mode)
        if first_misfit is None and (rescue is not None or asks is not None):
            first_misfit = row
        if asks is not None:
            proposed = types.merge(proposed, asks)
        values.append(value)
        rescued.append(rescue)
        row += 1
    if values:
        chunks.append(pa.array(values, type=schema))
    settled = types.settled(proposed)
    added = types.added(schema, settled) if settled != schema else []
    return Outcome(pa.concat_arrays(chunks) if len(chunks) > 1 else chunks[0], pa.array(rescued, pa.string()),
                   settled if added else None, added, first_misfit, len(slow))  # fmt: skip


def _one(body: bytes | None, schema: pa.StructType, mode: str) -> tuple[Any, str | None, pa.DataType | None]:
    """One body: (its value for ``schema``, its rescue text, the type it asks for when it does not fit)."""
    if body is None:
        return None, json.dumps({"_body": None}), None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None, json.dumps({"_body_base64": base64.b64encode(body).decode("ascii")}), None
    try:
        document = json.loads(text)
    except ValueError:
        return None, json.dumps({"_body": text}, ensure_ascii=False), None
    if not isinstance(document, dict):
        return None, json.dumps({"_body": text}, ensure_ascii=False), None
    misfits: dict[str, Any] = {}
    extras: dict[str, Any] = {}
    value = _conform(document, schema, "", misfits, extras)
    if mode == NONE:
        extras = {}  # fields the schema lacks are ignored, by the mode's choice
    if not misfits and not extras:
        return value, None, None
    kept = {**misfits, **extras}
    return value, json.dumps(kept, ensure_ascii=False, separators=(",", ":")), types.of_value(document)


def _conform(value: Any, t: pa.DataType, path: str, misfits: dict[str, Any], extras: dict[str, Any]) -> Any:
    """``value`` as ``t`` holds it; what does not fit is noted by its dotted path and left null."""
    if value is None:
        return None
    if pa.types.is_struct(t):
        if not isinstance(value, dict):
            misfits[path] = value
            return None
        names = {f.name for f in t}
        for key, item in value.items():
            if key not in names:
                extras[f"{path}.{key}" if path else key] = item
        return {f.name: _conform(value.get(f.name), f.type, f"{path}.{f.name}" if path else f.name, misfits, extras)
                for f in t}  # fmt: skip
    if pa.types.is_list(t):
        if not isinstance(value, list):
            misfits[path] = value
            return None
        return [_conform(item, t.value_type, f"{path}[]", misfits, extras) for item in value]
    if t == types.TEXT:
        return value if isinstance(value, str) else spark_json_text(value)
    if t == types.BOOL:
        if isinstance(value, bool):
            return value
    elif t in (types.LONG, pa.int32()):
        limit = 1 << (63 if t == types.LONG else 31)
        if isinstance(value, int) and not isinstance(value, bool) and -limit <= value < limit:
            return value
    elif t == types.DOUBLE:
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(float(value)):
            return float(value)
    elif t == types.TIMESTAMP:
        if isinstance(value, str):
            try:
                moment = datetime.datetime.fromisoformat(value)
            except ValueError:
                pass
            else:
                return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)
    elif t == types.DATE and isinstance(value, str):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            pass
    misfits[path] = value
    return None


def redefine(stream: bool) -> str:
    """What a user does once the kept schema has columns their DataFrame lacks: a stream is defined again and started
    (it reads the batch that stopped again); a batch read is loaded again and its action run again (nothing of it
    was kept)."""
    if stream:
        return ("define the stream again (spark.readStream.format('eventhubs')...load()) and start it; it reads this "
                "batch again with the new columns, nothing skipped")  # fmt: skip
    return ("load the DataFrame again (spark.read.format('eventhubs')...load()) and run the action again; it reads "
            "every event again with the new columns, nothing skipped")  # fmt: skip


@dataclass(frozen=True)
class JsonReading:
    """How a read decodes JSON bodies (plain data: it travels to the tasks): the value struct's schema (DDL), the
    mode, the rescue column's name, and where the schema is kept with the version read (None: a fixed schema)."""

    schema: str
    mode: str
    rescue_column: str
    location: str | None = None
    version: int | None = None
    keep_body: bool = False  # eventhubs.json.keepBody: the body column stays beside value
    stream: bool = True  # a stream's read (spark.readStream), else a batch read's: what a user does next differs

    def source_fields(self, own: pa.Schema) -> list[pa.Field]:
        """The read's columns: the source's own ``own`` (less the body, unless kept), then value and the rescue
        column."""
        return [f for f in own if self.keep_body or f.name != "body"] + self.fields()

    def value_type(self) -> pa.StructType:
        return types.parse_schema(self.schema) if self.schema.strip() else pa.struct([])

    def fields(self) -> list[pa.Field]:
        return [pa.field("value", self.value_type()), pa.field(self.rescue_column, pa.string())]

    def ddl(self) -> str:
        return f"value {types.ddl(self.value_type())}, `{self.rescue_column}` string"

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` (the source's columns) with ``value`` and the rescue column added; raises as the mode says."""
        schema = self.value_type()
        outcome = decode(batch.column("body"), schema, self.mode)
        outcome = self.checked(batch, outcome)
        if outcome.first_misfit is not None and self.mode == FAIL:
            misfit = outcome.rescued[outcome.first_misfit].as_py()
            where = self.where(batch, outcome.first_misfit, "does not fit the schema")
            raise DoesNotFit(f"{where} ({misfit}); eventhubs.json.schemaEvolutionMode rescue keeps such values in the "
                             "rescue column instead")  # fmt: skip
        if outcome.added and self.mode == ADD:
            raise self._evolve(batch, replace(outcome, proposed=self.proposal(batch, outcome)))
        own = batch if self.keep_body else batch.drop_columns(["body"])
        return pa.RecordBatch.from_arrays(
            [*own.columns, outcome.values, outcome.rescued], schema=pa.schema(self.source_fields(batch.schema))
        )

    def checked(self, batch: pa.RecordBatch, outcome: Outcome) -> Outcome:
        """``outcome``, with what a subclass checks beyond the schema (a registry's schema for each body)."""
        return outcome

    def proposal(self, batch: pa.RecordBatch, outcome: Outcome) -> pa.DataType | None:
        """The schema the bodies ask to grow to (addNewColumns): by default, as their values type it."""
        return outcome.proposed

    def where(self, batch: pa.RecordBatch, row: int, what: str) -> str:
        partition = batch.column("partition")[row].as_py()
        sequence = batch.column("sequenceNumber")[row].as_py()
        return f"eventhubs.json: the event at partition {partition}, sequence number {sequence} {what}"

    def _evolve(self, batch: pa.RecordBatch, outcome: Outcome) -> SchemaEvolved:
        """Record the schema the bodies ask for as the next version (merged with any version recorded since this
        query started), and say so."""
        from eventhubs_spark.json_bodies.kept import KeptSchemas

        assert self.location is not None and outcome.proposed is not None
        kept = KeptSchemas(self.location)
        while True:
            latest = kept.latest()
            base = types.parse_schema(latest.schema) if latest is not None else self.value_type()
            merged = types.settled(types.merge(base, outcome.proposed))
            number = latest.number if latest is not None else -1
            if merged == base:
                break  # a version recorded since this query started holds them already
            if kept.create(number + 1, types.to_text(merged), types.added(base, merged)):
                number += 1
                break
            # another process wrote that version first: merge with it
        assert outcome.first_misfit is not None
        return SchemaEvolved(
            self.where(batch, outcome.first_misfit, "and others carry what schema version "
                        f"{self.version} lacks: {', '.join(outcome.added)}")
            + f". Schema version {number} at {self.location} has them (eventhubs.json.schemaEvolutionMode "
            f"addNewColumns): {redefine(self.stream)}"
        )  # fmt: skip
