"""A JSON read's schema on the driver: fixed, kept from an earlier start, or inferred from a sample and kept.

Why here, in the source: inference reads events from where the query will start (its starting positions, through
the planner) on the driver, at ``.load()``, before any query runs; and a reader takes the schema Spark settled on
at ``.load()``, which it checks against the one kept (a newer version means the stream was defined before its
schema grew, and must be defined again to read the new columns).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from eventhubs_spark.errors import OptionError
from eventhubs_spark.interprocess.task_ranges import RangeRequest
from eventhubs_spark.json_bodies import types
from eventhubs_spark.json_bodies.decode import ADD, RESCUE, JsonReading
from eventhubs_spark.json_bodies.json_schema import column_type
from eventhubs_spark.json_bodies.kept import KeptSchemas
from eventhubs_spark.json_bodies.registered import RegisteredJsonReading
from eventhubs_spark.options import STREAM, ReadOptions
from eventhubs_spark.process import runtime
from eventhubs_spark.registry.client import Registry

_LOG = logging.getLogger(__name__)


def json_of_options(
    raw: Mapping[str, str], options: ReadOptions, planner: Callable[[Mapping[str, str], str], Any], spark_schema: Any
) -> JsonReading | None:
    """How a read decodes JSON bodies (None: it does not). ``spark_schema``: the schema Spark gave the reader (its
    ``value`` column is the one to read), else the schema is the fixed one, the one kept, or one inferred now from
    events the ``planner`` (the source's, made from the options and the mode) finds."""
    if not options.decodes_json:
        return None
    mode = options.json_mode or (ADD if options.json_schema_location else RESCUE)
    stream = options.mode == STREAM
    registry = Registry.of(options.json_registry, options.settings, "eventhubs.json") if options.json_registry else None
    if options.json_schema or (registry is not None and not options.json_schema_location):
        fixed = (
            _registered_type(registry, options)
            if registry is not None
            else types.parse_schema(str(options.json_schema))
        )
        fixed_reading = JsonReading(types.to_text(fixed), mode, options.json_rescue_column,
                                    keep_body=options.json_keep_body, stream=stream)  # fmt: skip
        return _with_registry(fixed_reading, registry, options)
    location = str(options.json_schema_location)
    kept = KeptSchemas(location)
    latest = kept.latest()
    given = _value_of(spark_schema)
    if given is not None:
        if latest is not None and types.parse_schema(latest.schema) != given and mode == ADD:
            example = f"spark.{'readStream' if stream else 'read'}.format('eventhubs')...load()"
            raise OptionError(
                f"eventhubs.json.schemaLocation: the schema kept at {location} is version {latest.number}, with "
                f"{', '.join(latest.added) or 'other fields'}; this DataFrame was defined with an earlier one. "
                f"{'Define' if stream else 'Load'} it again ({example}) to read the new columns",
                example,
            )  # fmt: skip
        return _with_registry(JsonReading(types.to_text(given), mode, options.json_rescue_column, location,
                                          latest.number if latest is not None else 0, options.json_keep_body,
                                          stream), registry, options)  # fmt: skip
    if latest is None:
        # version 0: the registered schema, else one inferred from a sample
        first = (
            _registered_type(registry, options) if registry is not None else infer(planner(raw, options.mode), options)
        )
        if not kept.create(0, types.to_text(first), [f.name for f in first]):
            _LOG.info("eventhubs.json: another process kept a schema at %s first; reading with it", location)
        latest = kept.latest()
        assert latest is not None
    return _with_registry(JsonReading(latest.schema, mode, options.json_rescue_column, location, latest.number,
                                      options.json_keep_body, stream), registry, options)  # fmt: skip


def _registered_type(registry: Registry, options: ReadOptions) -> pa.StructType:
    """The value column's type from the schema eventhubs.json.schemaId names (fetched here on the driver, only where
    no kept version or DataFrame's schema types the read already)."""
    schema_id = str(options.json_schema_id)
    where = f"eventhubs.json.schemaId ({schema_id})"
    return column_type(registry.schema(schema_id, context=f" ({where})"), where)


def _with_registry(reading: JsonReading, registry: Registry | None, options: ReadOptions) -> JsonReading:
    """``reading`` as a registered one when the bodies' schemas are in the registry."""
    if registry is None:
        return reading
    kept = {f.name: getattr(reading, f.name) for f in dataclasses.fields(reading)}
    return RegisteredJsonReading(**kept, registry=registry, schema_id=options.json_schema_id,
                                 validate=options.json_validate)  # fmt: skip


def _value_of(spark_schema: Any) -> pa.StructType | None:
    """The Arrow type of the ``value`` column of a schema Spark gave (None: no schema, or no such column), read from
    the column type's JSON as a fixed schema is (pyspark's ``to_arrow_type`` changed its keywords between releases
    and, on 4.1+, needs a time zone for a timestamp field)."""
    if spark_schema is None or isinstance(spark_schema, str):
        return None
    for f in spark_schema.fields:
        if f.name == "value":
            return types.parse_schema(f.dataType.json())
    return None


SAMPLE_READERS = 16  # partitions sampled at once: each read is a link attach and a round trip or two
SAMPLE_SECONDS = 60.0  # partitions not begun within this are not sampled (said in the log): a big hub's bound


def _default_start(options: ReadOptions, pid: str) -> bool:
    """Whether partition ``pid`` starts where the read's kind says (no eventhubs.startingPosition(s) for it): a batch
    read at the start of the stream, a stream at its end. Spark does not tell a source at ``.load()``, where the
    schema is inferred, which of the two the DataFrame will be, so such a partition is sampled at both."""
    return options.starting_position is None and pid not in options.starting_positions


def _sample_ranges(info: Any, start: int, per: int, both_ends: bool) -> list[tuple[int, int]]:
    """The ranges of one partition to sample, ``per`` events in all: from ``start``, or (``both_ends``) half from
    its first event and half up to its newest; where ``start`` has nothing yet to read, the newest events."""
    begin, end = info.beginning_sequence_number, info.end
    if both_ends:
        head = (begin, min(end, begin + max(1, per // 2)))
        tail = (max(head[1], end - (per - per // 2)), end)
        return [r for r in (head, tail) if r[0] < r[1]]
    start = max(start, begin)
    if start >= end:  # nothing to read yet from where it starts: the latest events stand in for it
        start = max(begin, end - per)
    return [(start, min(end, start + per))] if start < min(end, start + per) else []


def infer(planner: Any, options: ReadOptions, budget: float = SAMPLE_SECONDS) -> pa.StructType:
    """A schema for the JSON objects among a sample of the events the query will read first: up to
    ``eventhubs.json.sampleEvents`` in all, spread over the partitions, from each one's starting position; a
    partition with none given is sampled at both the start of the stream (where a batch read begins) and its end
    (where a stream does), half each.

    Why concurrently and within ``budget`` seconds: the sample is read on the driver at ``.load()``, one small
    range per partition, and each range costs a link attach (a token, a round trip) however few events it holds:
    one after another, a 1,024-partition hub made the user wait seconds to minutes before the query even started.
    Partitions are read SAMPLE_READERS at a time; a partition not begun within the budget is left out (the log
    says how many), and the types are merged in partition order whatever order the reads end in."""
    infos = planner.partition_infos()
    starts = planner.resolve(infos, planner.configured_starts(infos))
    per = max(1, options.json_sample_events // max(1, len(infos)))
    # The query's own receivers (owner level, as its reads open them): an idle receiver the pool kept from a read
    # a moment ago holds the partition at that level and would refuse a sampler without one; this one takes the
    # partition from it as every read of the query does, and the pooled one reopens at its next read.
    config = dataclasses.replace(planner.config, receiver_timeout=options.receiver_timeout)
    requests: list[RangeRequest] = []
    for pid, info in infos.items():
        if info.is_empty:
            continue
        for start, end in _sample_ranges(info, starts[pid], per, _default_start(options, pid)):
            requests.append(RangeRequest(config=config, partition=pid, start=start, end=end, fail_on_data_loss=False,
                                         idle_timeout=0.0, settings=options.settings))  # fmt: skip
    deadline = time.monotonic() + budget

    def bodies(request: RangeRequest) -> list[Any] | None:
        if time.monotonic() > deadline:
            return None  # not begun within the budget
        return [b for batch in runtime.current().read(request, False, {}) for b in batch.column("body").to_pylist()]

    with ThreadPoolExecutor(max_workers=max(1, min(SAMPLE_READERS, len(requests))),
                            thread_name_prefix="eventhubs-json-sample") as pool:  # fmt: skip
        sampled = list(pool.map(bodies, requests))
    left_out = sum(1 for b in sampled if b is None)
    if left_out:
        _LOG.warning("eventhubs.json: sampled %d of %d ranges within %g s; the schema is inferred from those "
                     "(give eventhubs.json.schema to read with a schema of your own)", len(requests) - left_out,
                     len(requests), budget)  # fmt: skip
    found: pa.DataType = types.NULL
    seen = objects = 0
    for partition_bodies in sampled:
        for body in partition_bodies or ():
            seen += 1
            try:
                document = json.loads(body)
            except ValueError:
                continue
            if isinstance(document, dict):
                objects += 1
                found = types.merge(found, types.of_value(document))
    if not objects:
        example = ".option('eventhubs.json.schema', 'id bigint, device string')"
        raise OptionError(
            f"eventhubs.json.schemaLocation: no JSON object among the {seen} events sampled from hub "
            f"{options.settings.hub!r} to infer a schema from: send some first, start where there are some "
            f"(eventhubs.startingPosition), or give the schema, e.g. {example}",
            example,
        )
    _LOG.info("eventhubs.json: inferred a schema from %d JSON objects of %d events sampled", objects, seen)
    settled = types.settled(found)
    assert isinstance(settled, pa.StructType)
    return settled
