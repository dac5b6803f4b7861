"""The sink's writers Spark calls, and their commits.

``df.write`` takes Arrow batches, ``df.writeStream`` Arrow on Spark 4.1+ and rows on 4.0; their commits log what
the batch did and (exactly once) record the next batch's fence.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter, DataSourceWriter

from eventhubs_spark.avro.encode import writing as avro_writing
from eventhubs_spark.json_bodies.encode import writing as json_writing
from eventhubs_spark.options import write_options
from eventhubs_spark.registry.client import Registry
from eventhubs_spark.sink.exactly_once import ExactlyOnce, exactly_once_of, record_fence
from eventhubs_spark.sink.layout import layout_for
from eventhubs_spark.sink.sender import SendReport, write_task

try:  # Spark 4.1+
    from pyspark.sql.datasource import DataSourceStreamArrowWriter

    HAS_STREAM_ARROW_WRITER = True
except ImportError:  # Spark 4.0: the stream sink takes rows
    HAS_STREAM_ARROW_WRITER = False
    DataSourceStreamArrowWriter = DataSourceStreamWriter  # type: ignore[misc,assignment]

_LOG = logging.getLogger(__name__)


def _merged(messages: Iterable[Any]) -> SendReport:
    """A write's tasks' reports summed into one (other commit messages, e.g. None from a failed task, skipped)."""
    total = SendReport()
    for m in messages:
        if isinstance(m, SendReport):
            for p, n in m.by_partition.items():
                total.by_partition[p] = total.by_partition.get(p, 0) + n
            total.by_key += m.by_key
            total.batches += m.batches
            total.throttled += m.throttled
            total.throttled_wait += m.throttled_wait
            total.resent += m.resent
            total.write = total.write or m.write
            total.skipped += m.skipped
            total.differed += m.differed
            total.settled += m.settled
            total.read_back += m.read_back
            total.read_seconds += m.read_seconds
    return total


def _events(report: SendReport) -> int:
    return sum(report.by_partition.values()) + report.by_key


class _SinkBase:
    stream = False
    once: ExactlyOnce | None = None

    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        parsed = write_options(dict(options))
        self.settings = parsed.settings
        self.timeout = parsed.operation_timeout
        kind = "Avro" if parsed.avro_registry else "JSON" if parsed.json_registry else None
        self.layout = layout_for(schema, kind)
        self.once = exactly_once_of(parsed, self.stream)
        # a registry's schema is registered (or found) once per query, here on the driver; the tasks only encode
        value = schema.fields[self.layout.body]
        if parsed.avro_registry:
            registry = Registry.of(parsed.avro_registry, parsed.settings)
            self.layout = dataclasses.replace(self.layout, encoder=avro_writing(
                registry, str(parsed.avro_group), value.dataType, parsed.avro_schema, parsed.avro_record_name,
                parsed.avro_record_namespace, value.name))  # fmt: skip
        elif parsed.json_registry:
            registry = Registry.of(parsed.json_registry, parsed.settings, "eventhubs.json")
            self.layout = dataclasses.replace(self.layout, encoder=json_writing(
                registry, parsed.json_group, value.dataType, parsed.json_schema_id,
                parsed.json_schema_name or parsed.settings.hub, parsed.json_validate, value.name))  # fmt: skip

    def _log_commit(self, messages: Iterable[Any], batch_id: int | None) -> None:
        report = _merged(messages)
        batch = "-" if batch_id is None else batch_id
        if report.resent:
            _LOG.warning(
                "eventhubs sink hub=%s batch=%s: %d events were sent again after a send of theirs went unanswered "
                "(for eventhubs.connectionIdleTimeout, or until eventhubs.operationTimeout); the first send may have "
                "been stored all the same, so the hub may hold them twice (delivery is at least once)",
                self.settings.hub, batch, report.resent,
            )  # fmt: skip
        if report.skipped or report.settled:
            _LOG.warning(
                "eventhubs sink hub=%s batch=%s (exactly once): %d rows an earlier attempt had stored were not sent "
                "again, and %d unanswered sends were settled; %d events read back in %.1f s to find them",
                self.settings.hub, batch, report.skipped, report.settled, report.read_back, report.read_seconds,
            )  # fmt: skip
        if report.differed:
            _LOG.warning(
                "eventhubs sink hub=%s batch=%s (exactly once): %d rows differed from what an earlier attempt had "
                "stored at their place, so the query is not deterministic (see Guarantees: an operator whose output "
                "order or values change between runs, e.g. rows after a shuffle; sortWithinPartitions before the "
                "sink makes the order fixed); they were sent again rather than risk losing them (at least once)",
                self.settings.hub, batch, report.differed,
            )  # fmt: skip
        if report.throttled:
            _LOG.warning(
                "eventhubs sink hub=%s batch=%s: the namespace is throttling (over its throughput units): it refused "
                "%d sends as busy, and the tasks waited %.1f s in all before sending them again; every event was "
                "sent once. More throughput units (or auto-inflate) would spare the wait; the waits follow "
                "eventhubs.retry.*", self.settings.hub, batch, report.throttled, report.throttled_wait,
            )  # fmt: skip
        detail = ", ".join(f"{p}:{n}" for p, n in sorted(report.by_partition.items(), key=lambda kv: int(kv[0])))
        _LOG.info(
            "eventhubs sink hub=%s batch=%s sent %d events (per partition: %s; routed by partition key: %d)",
            self.settings.hub, batch, _events(report), detail or "none", report.by_key,
        )  # fmt: skip


class EventHubsBatchWriter(_SinkBase, DataSourceArrowWriter):
    """``df.write.format("eventhubs")``: Arrow batches in, events out."""

    def write(self, iterator: Iterator[Any]) -> SendReport:
        return write_task(self.settings, self.layout, self.timeout, iterator, arrow=True, once=self.once)

    def commit(self, messages: list[Any]) -> None:
        self._log_commit(messages, None)

    def abort(self, messages: list[Any]) -> None:
        _LOG.warning("eventhubs sink hub=%s: write aborted after %d events were sent (at least once)",
                     self.settings.hub, _events(_merged(messages)))  # fmt: skip


class _StreamCommits(_SinkBase):
    """Commit and abort of both stream writers: log the batch's counts, and (exactly once) record the fence."""

    stream = True

    def commit(self, messages: list[Any], batchId: int) -> None:
        self._log_commit(messages, batchId)
        report = _merged(messages)
        if self.once is not None and report.write is not None:
            # the next batch's stamps all land after where the hub ends now
            figures = {"rows found stored": report.skipped, "rows that differed": report.differed,
                       "sends settled": report.settled, "events read back": report.read_back}  # fmt: skip
            record_fence(self.settings, self.once.location, report.write, batchId, self.timeout, figures)

    def abort(self, messages: list[Any], batchId: int) -> None:
        _LOG.warning(
            "eventhubs sink hub=%s batch=%d aborted after %d events were sent; Spark re-runs it (at least once)",
            self.settings.hub, batchId, _events(_merged(messages)),
        )  # fmt: skip


class EventHubsStreamArrowWriter(_StreamCommits, DataSourceStreamArrowWriter):
    """``df.writeStream.format("eventhubs")`` on Spark 4.1+: Arrow batches per micro-batch."""

    def write(self, iterator: Iterator[Any]) -> SendReport:
        return write_task(self.settings, self.layout, self.timeout, iterator, arrow=True, once=self.once)


class EventHubsStreamRowWriter(_StreamCommits, DataSourceStreamWriter):
    """``df.writeStream.format("eventhubs")`` on Spark 4.0, which has no Arrow stream writer."""

    def write(self, iterator: Iterator[Any]) -> SendReport:
        return write_task(self.settings, self.layout, self.timeout, iterator, arrow=False, once=self.once)


def batch_writer(options: Mapping[str, str], schema: Any) -> DataSourceWriter:
    return EventHubsBatchWriter(options, schema)


def stream_writer(options: Mapping[str, str], schema: Any) -> DataSourceStreamWriter:
    if HAS_STREAM_ARROW_WRITER:
        return EventHubsStreamArrowWriter(options, schema)
    return EventHubsStreamRowWriter(options, schema)
