"""The data source ``eventhubs`` Spark registers: its schema, its readers and writers, and the readers that fail.

Bad options raise when Spark first asks the source for something, naming the option and a valid example; a
reader whose options failed raises the same error wherever Spark calls it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NoReturn

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from eventhubs_spark.errors import OptionError, RegistryError
from eventhubs_spark.source.said_first import spark_facing

# The readers are imported when Spark asks for one: .load() (schema) runs in a Python worker of its own, which then
# imports only the options and the schema (bench load: the readers' machinery was a third of a fresh .load()).


class EventHubsDataSource(DataSource):
    """The ``eventhubs`` data source. Options: see docs/pages/options.md (``eventhubs_spark.options``)."""

    @classmethod
    def name(cls) -> str:
        return "eventhubs"

    @spark_facing
    def schema(self) -> str:
        # Spark calls this at .load(): the first place a bad option can be reported, before any query.
        from eventhubs_spark.options import check_read_options

        options = check_read_options(self.options)
        if not options.decodes_bodies:
            from eventhubs_spark.codec.ddl import SCHEMA_DDL

            return SCHEMA_DDL  # the source's own columns: nothing decodes the bodies
        from eventhubs_spark.source.partition_reader import source_ddl
        from eventhubs_spark.source.planner import body_decoding

        return source_ddl(body_decoding(self.options, options))

    # ``schema``: the query's own (``.schema(...)``: some columns, see codec.schema.projection), else the source's.
    def reader(self, schema: Any) -> DataSourceReader:
        from eventhubs_spark.source.batch_reader import EventHubsBatchReader

        try:
            return EventHubsBatchReader(self.options, schema=schema)
        except (OptionError, RegistryError) as exc:
            return _FailingReader(exc)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        from eventhubs_spark.source.stream_reader import EventHubsStreamReader

        try:
            return EventHubsStreamReader(self.options, schema=schema)
        except (OptionError, RegistryError) as exc:
            return _FailingStreamReader(exc)

    def writer(self, schema: Any, overwrite: bool) -> Any:
        from eventhubs_spark.sink import batch_writer

        _append_only(overwrite)
        return batch_writer(self.options, schema)

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        from eventhubs_spark.sink import stream_writer

        _append_only(overwrite)
        return stream_writer(self.options, schema)


class _Failing:
    """Reports an option error (or a Schema Registry that could not give the reader schema) from a reader's
    first call.

    PySpark's stream runner calls ``reader.stop()`` in a ``finally`` around ``streamReader()``: an
    error raised there is replaced by ``UnboundLocalError: cannot access local variable 'reader'``.
    Returning a reader that raises on use keeps our message the one the user sees.
    """

    def __init__(self, error: OptionError | RegistryError) -> None:
        self.error = error

    def fail(self) -> NoReturn:
        error = self.error
        if isinstance(error, OptionError):
            raise OptionError(str(error), error.example) from None
        raise RegistryError(str(error), error.retriable) from None

    @spark_facing
    def read(self, partition: InputPartition) -> Iterator[Any]:
        self.fail()


class _FailingStreamReader(_Failing, DataSourceStreamReader):
    @spark_facing
    def initialOffset(self) -> dict[str, Any]:
        self.fail()

    @spark_facing
    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        self.fail()

    @spark_facing
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        self.fail()

    def stop(self) -> None:
        """Nothing was opened."""


class _FailingReader(_Failing, DataSourceReader):
    @spark_facing
    def partitions(self) -> list[InputPartition]:
        self.fail()


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise OptionError(
            "an event hub is append-only: it keeps every event it is sent and cannot replace them, so Overwrite (which "
            "Spark suggests beside Append when it refuses its default mode) does not apply. Write with "
            ".mode('append') (a stream: .outputMode('append'))",
            "mode('append')",
        )
