"""A streaming query in a driver process of its own, for the tests that kill it with SIGKILL.

``python -m tests.integration.crash_app CONNECTION_STRING OUT_DIR`` streams the hub from its start into
parquet under ``OUT_DIR/data`` (checkpoint ``OUT_DIR/checkpoint``) with a 200 ms processing-time
trigger, small micro-batches, and runs until it is killed. It touches ``OUT_DIR/started`` once the
query runs.
"""

from __future__ import annotations

import os
import sys


def main(connection: str, out: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    query = (
        spark.readStream.format("eventhubs")
        .option("eventhubs.connectionString", connection)
        .option("eventhubs.startingPosition", '{"offset": "-1"}')
        .option("maxEventsPerTrigger", "200")
        .load()
        .selectExpr("cast(body as string) as body", "partition", "sequenceNumber")
        .writeStream.format("parquet")
        .option("path", os.path.join(out, "data"))
        .option("checkpointLocation", os.path.join(out, "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    with open(os.path.join(out, "started"), "w"):
        pass
    query.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
