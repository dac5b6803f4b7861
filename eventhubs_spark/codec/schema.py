"""The source's schema: what every record batch a read yields looks like.

The schema is the azure-event-hubs-spark connector's, so queries migrate unchanged. Batches must
match ``to_arrow_schema(schema)`` exactly (timestamps as ``timestamp('us', tz='UTC')``), which is
what lets Spark take them without a row-by-row conversion (and what Spark 4.2+ checks). How events
become such batches is :mod:`eventhubs_spark.codec`'s.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from eventhubs_spark.codec.ddl import SCHEMA_DDL
from eventhubs_spark.errors import OptionError

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
# the columns a task reads for its report to the driver whatever the query's schema (source.partition_reader)
REPORTED = frozenset(ARROW_SCHEMA.get_field_index(name) for name in ("offset", "sequenceNumber", "enqueuedTime"))

# System properties that have columns of their own, or describe the message body itself.
COLUMN_ANNOTATIONS = {b"x-opt-sequence-number", b"x-opt-offset", b"x-opt-enqueued-time", b"x-opt-partition-key"}

_EXAMPLE_SCHEMA = '.schema("body binary, enqueuedTime timestamp")'


@dataclass(frozen=True)
class Projection:
    """The columns a query asked for with a schema of its own (``spark.readStream.format("eventhubs")
    .schema("body binary, enqueuedTime timestamp")``): some of the source's columns, in the query's order and
    spelling. Python data sources get no column pruning from Spark, so this is how a query that needs only the
    body spares Spark the other columns (the JVM takes every column of every batch, maps included)."""

    indexes: tuple[int, ...]  # each column's place in the source's schema
    names: tuple[str, ...]  # as the query spelt them (Spark matches names regardless of case)
    source: pa.Schema = ARROW_SCHEMA  # the source's own columns (with eventhubs.avro.*, value after the others)

    @functools.cached_property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema([self.source.field(i).with_name(n) for i, n in zip(self.indexes, self.names, strict=True)])

    @functools.cached_property
    def needed(self) -> frozenset[int] | None:
        """The source's columns a task decodes for this projection (None: all): its own, and those a task reports to
        the driver (a range's last sequence number, offset and enqueued time); None past the source's own columns
        (an Avro or JSON ``value`` is made from the body)."""
        return frozenset(self.indexes) | REPORTED if self._of_own_source else None

    @functools.cached_property
    def _of_own_source(self) -> bool:
        """Its source is the source's own columns (a task's unpickled copy of them included)."""
        return self.source is ARROW_SCHEMA or self.source.equals(ARROW_SCHEMA)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled without the source's schema when it is the source's own: every task unpickles its reader's
        projection, and a schema's copy (13 us on an idle machine, three times that on a busy executor), compared
        with the source's (``needed``) and narrowed (``arrow_schema``) made a third of a small task's unpickling and
        setting up (issue 87); a worker keeps the projections it made."""
        return _unpickled_projection, (self.indexes, self.names, None if self._of_own_source else self.source)

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch's columns the query asked for (no copy)."""
        return pa.RecordBatch.from_arrays([batch.column(i) for i in self.indexes], schema=self.arrow_schema)


_PROJECTIONS: dict[tuple[tuple[int, ...], tuple[str, ...]], Projection] = {}  # a worker's, of the source's own schema
_PROJECTIONS_KEPT = 16  # distinct projections a worker keeps (a few queries' at a time)


def _unpickled_projection(indexes: tuple[int, ...], names: tuple[str, ...], source: pa.Schema | None) -> Projection:
    """A projection as a task unpickles it (:meth:`Projection.__reduce__`): of the source's own schema (``None``), the
    one this process made before for the same columns, with its narrowed schema already made (a projection does not
    change once made)."""
    if source is not None:
        return Projection(indexes, names, source)
    key = (indexes, names)
    made = _PROJECTIONS.get(key)
    if made is None:
        if len(_PROJECTIONS) >= _PROJECTIONS_KEPT:
            _PROJECTIONS.clear()
        made = _PROJECTIONS[key] = Projection(indexes, names)
    return made


def projection(schema: Any, source: pa.Schema = ARROW_SCHEMA) -> Projection | None:
    """The columns of ``schema`` (the query's, or the source's own when it gave none: then None), checked
    against the source's: each one of them by name (any case), of the same type, nullable, once. A mistake
    raises an :class:`OptionError` that names the column and shows a schema that works."""
    from pyspark.sql.pandas.types import from_arrow_schema

    if schema is None or schema == SCHEMA_DDL:  # Spark passes a StructType; the source's own DDL is its schema
        return None
    # a zone-less Arrow timestamp (Avro's local-timestamp-*) is Spark's TIMESTAMP_NTZ, as the source's DDL says; Spark
    # 4.0's from_arrow_schema defaults to TIMESTAMP for it, 4.1+ to TIMESTAMP_NTZ
    ours = from_arrow_schema(source, prefer_timestamp_ntz=True)
    fields = list(schema.fields)
    if [(f.name, f.dataType, f.nullable) for f in fields] == [(f.name, f.dataType, True) for f in ours.fields]:
        return None
    by_name = {f.name.lower(): (i, f) for i, f in enumerate(ours.fields)}
    known = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in ours.fields)
    if not fields:
        raise OptionError(f"the query's schema has no columns; the eventhubs source's are: {known}. "
                          f"Example: {_EXAMPLE_SCHEMA}", _EXAMPLE_SCHEMA)  # fmt: skip
    indexes: list[int] = []
    for field in fields:
        found = by_name.get(field.name.lower())
        if found is None:
            raise OptionError(f"column {field.name!r} of the query's schema is not a column of the eventhubs source, "
                              f"whose columns are: {known}. Example: {_EXAMPLE_SCHEMA}", _EXAMPLE_SCHEMA)  # fmt: skip
        index, own = found
        if index in indexes:
            raise OptionError(f"column {own.name!r} appears twice in the query's schema. Example: {_EXAMPLE_SCHEMA}",
                              _EXAMPLE_SCHEMA)  # fmt: skip
        wanted = own.dataType.simpleString()
        example = f'.schema("{own.name} {wanted}")'
        if field.dataType != own.dataType:
            declared = field.dataType.simpleString()
            # convert to what the query declared (a binary body becomes text first: Spark casts no bytes to numbers)
            via = '.cast("string")' if wanted == "binary" and declared not in ("string", "binary") else ""
            raise OptionError(
                f"column {field.name!r} of the query's schema is {declared}, but the eventhubs source gives "
                f"{wanted}: declare it {wanted} and convert it after load() (e.g. "
                f'col({own.name!r}){via}.cast("{declared}")). Example: {example}',
                example,
            )
        if not field.nullable:
            raise OptionError(f"column {field.name!r} of the query's schema is NOT NULL, but the eventhubs source's "
                              f"columns are nullable: leave NOT NULL out. Example: {example}", example)  # fmt: skip
        indexes.append(index)
    return Projection(tuple(indexes), tuple(f.name for f in fields), source)
