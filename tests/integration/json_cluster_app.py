"""An inferred JSON read right after a stream on ``local-cluster[2,1,1024]`` (issue 90, item 1): the stream's
receivers stay pooled on the executors (owner level); the read's sampler on the driver, and its tasks on the
executors, must not be refused by them. Writes ``result.json``: the inferred fields and the values read."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path


def main(connection: str, out: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from tests.integration.cluster_start import distinct_application_id
    from tests.integration.spark_app import executors_up

    with distinct_application_id():
        spark = (
            SparkSession.builder.master("local-cluster[2,1,1024]")
            .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
            .config("spark.ui.enabled", "false")
            .getOrCreate()
        )
    executors_up(spark, 2)
    import eventhubs_spark

    eventhubs_spark.register(spark)
    checkpoint = tempfile.mkdtemp(prefix="json-cluster-")
    stream = (
        spark.readStream.format("eventhubs").option("eventhubs.connectionString", connection)
        .option("eventhubs.startingPosition", '{"offset": "-1"}').load()
        .writeStream.format("noop").option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )  # fmt: skip
    stream.awaitTermination(300)
    streamed = sum(p["numInputRows"] for p in stream.recentProgress)
    # at once: the stream's receivers are pooled on the executors, holding the partitions at their owner level
    df = (
        spark.read.format("eventhubs").option("eventhubs.connectionString", connection)
        .option("eventhubs.json.schemaLocation", str(Path(out) / "schema")).load()
    )  # fmt: skip
    fields = [f.name for f in df.schema["value"].dataType.fields]
    values = [r.asDict() for r in df.select("value.*").collect()]
    # and a stream that infers, right after both
    again = (
        spark.readStream.format("eventhubs").option("eventhubs.connectionString", connection)
        .option("eventhubs.startingPosition", '{"offset": "-1"}')
        .option("eventhubs.json.schemaLocation", str(Path(out) / "schema2")).load().select("value.*")
        .writeStream.format("memory").queryName("again").option("checkpointLocation", checkpoint + "-2")
        .trigger(availableNow=True).start()
    )  # fmt: skip
    again.awaitTermination(300)
    streamed_again = [r.asDict() for r in spark.sql("select * from again").collect()]
    Path(out, "result.json").write_text(json.dumps({"streamed": streamed, "fields": fields, "values": values,
                                                    "streamed_again": streamed_again}))  # fmt: skip
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
