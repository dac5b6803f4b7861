"""The batch reader: ``spark.read.format("eventhubs")``, one task per partition's range between two positions."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from eventhubs_spark.errors import OptionError
from eventhubs_spark.options import BATCH
from eventhubs_spark.planning.offset_ranges import Range
from eventhubs_spark.positions.event_positions import Latest
from eventhubs_spark.source.partition_reader import EventHubsPartition, TaskReader, read_batches
from eventhubs_spark.source.planner import MetadataSource, QueryColumns, plan_reading
from eventhubs_spark.source.said_first import spark_facing


class EventHubsBatchReader(DataSourceReader):
    """``spark.read.format("eventhubs")``: from the starting to the ending positions, then done."""

    def __init__(self, options: Mapping[str, str], metadata: MetadataSource = None,
                 columns: QueryColumns = None, schema: Any = None) -> None:  # fmt: skip
        self.planner, self.avro, self.columns = plan_reading(options, BATCH, metadata, columns, schema)

    @spark_facing
    def partitions(self) -> list[EventHubsPartition]:
        planner = self.planner
        infos = planner.partition_infos()
        planner.check_consumer_group(infos)  # at the action, before any task runs
        starts = planner.resolve(infos, planner.starting_positions(infos))
        options = planner.options
        ending = planner.positions_for(
            infos, options.ending_position or Latest(), options.ending_positions, "eventhubs.endingPositions"
        )
        # An ending position names the first event *not* read (as the old connector's translate() used it).
        ends = planner.resolve(infos, ending)
        ranges = []
        from_capture: list[Range] = []
        for pid in sorted(infos, key=int):
            start, end = starts[pid], ends[pid]
            explicit_end = pid in options.ending_positions or options.ending_position is not None
            if end < start and explicit_end:
                example = f".option('eventhubs.endingPositions', '{{\"{pid}\": {{\"seqNo\": {start}}}}}')"
                raise OptionError(
                    f"partition {pid}: the ending position (sequence number {end}) is before the starting position "
                    f"({start}); check eventhubs.startingPosition(s) and eventhubs.endingPosition(s), e.g. {example}",
                    example,
                )
            # A batch read never waits for events that do not exist yet.
            end = min(end, infos[pid].end)
            captured, start = planner.split(pid, min(start, end), end, infos[pid])
            if captured is not None:
                from_capture.append(captured)
            ranges.append(Range(pid, start, end))
        return planner.input_partitions(ranges) + planner.capture_partitions(from_capture)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_batches(partition, self.columns, self.avro)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled only for the tasks (see :class:`TaskReader`)."""
        return TaskReader, (self.columns, self.avro)
