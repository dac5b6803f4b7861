"""Event Hubs into tables with Spark Declarative Pipelines: a streaming table of the hub's events, one of their
parsed JSON bodies, and a materialized view over those. Each definition takes the pipeline's session as the active
one (Spark 4.3 also puts it in this module as ``spark``; 4.1 and 4.2 do not)."""

import os

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import eventhubs_spark  # noqa: F401  (registers the "eventhubs" source with the pipeline's session)

READING = "struct<device:string, temperature:double, ts:string>"


@dp.table(comment="Every event of the hub, as the eventhubs source reads it (body, partition, sequenceNumber, ...)")
def events() -> DataFrame:
    return (
        SparkSession.active()
        .readStream.format("eventhubs")
        .option("eventhubs.connectionString", os.environ["EVENTHUBS_CONNECTION_STRING"])
        .option("eventhubs.startingPosition", '{"offset": "-1"}')
        .load()
    )


@dp.table(comment="The JSON bodies, parsed; the event's own columns beside them")
def readings() -> DataFrame:
    return (
        SparkSession.active()
        .readStream.table("events")
        .select(
            F.from_json(F.col("body").cast("string"), READING).alias("r"), "partition", "sequenceNumber", "enqueuedTime"
        )
        .select("r.*", "partition", "sequenceNumber", "enqueuedTime")
    )


@dp.materialized_view(comment="Readings per device: how many, and their mean temperature")
def readings_by_device() -> DataFrame:
    return (
        SparkSession.active()
        .read.table("readings")
        .groupBy("device")
        .agg(F.count("*").alias("readings"), F.avg("temperature").alias("mean_temperature"))
    )
