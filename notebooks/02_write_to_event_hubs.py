# Databricks notebook source
# MAGIC %md
# MAGIC # Write to Event Hubs
# MAGIC
# MAGIC A DataFrame becomes events: a `body` column (string or binary) and, optionally, `partitionKey` (events
# MAGIC with one key stay in order on one partition), `partitionId`, and `properties` (map<string,string>).
# MAGIC Any other column is an error that names it, so nothing is dropped silently.
# MAGIC
# MAGIC Delivery is at least once by default: a retried task sends its rows again. For a hub-to-hub stream whose
# MAGIC consumers must see each row once, add `.option("eventhubs.sink.exactlyOnce", "true")` and
# MAGIC `.option("eventhubs.checkpointLocation", path)` (a path every executor reaches) to the stream's writer
# MAGIC (docs: Guarantees, "Exactly once into a hub").

# COMMAND ----------

dbutils.widgets.text("secret_scope", "eventhubs")
dbutils.widgets.text("checkpoint_path", "/tmp/eventhubs/enriched_checkpoint")
dbutils.widgets.text("available_now", "false")

scope = dbutils.widgets.get("secret_scope")
target = dbutils.secrets.get(scope, "connection-string")  # the hub to write to
source = dbutils.secrets.get(scope, "source-connection-string")  # a hub to stream from
available_now = dbutils.widgets.get("available_now") == "true"

# COMMAND ----------

from pyspark.sql import functions as F

orders = spark.createDataFrame(
    [(1, "oslo", 120.0), (2, "lima", 80.5), (3, "oslo", 42.0), (4, "pune", 310.0)],
    "order_id int, city string, amount double",
)

(
    orders.select(
        F.to_json(F.struct("*")).alias("body"),
        F.col("city").alias("partitionKey"),
        F.create_map(F.lit("schema"), F.lit("orders-v1")).alias("properties"),
    )
    .write.format("eventhubs")
    .option("eventhubs.connectionString", target)
    .mode("append")
    .save()
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Stream to stream: enrich events from one hub into another

# COMMAND ----------

enriched = (
    spark.readStream.format("eventhubs")
    .option("eventhubs.connectionString", source)
    .option("eventhubs.startingPosition", '{"offset": "-1"}')
    .load()
    .select(
        F.to_json(
            F.struct(
                F.current_timestamp().alias("seen_at"),
                F.col("enqueuedTime").alias("enqueued_at"),
                F.col("body").cast("string").alias("event"),
            )
        ).alias("body"),
        F.col("partition").alias("partitionKey"),
    )
)
query = (
    enriched.writeStream.format("eventhubs")
    .option("eventhubs.connectionString", target)
    .option("checkpointLocation", dbutils.widgets.get("checkpoint_path"))
    .trigger(**({"availableNow": True} if available_now else {"processingTime": "5 seconds"}))
    .start()
)
if available_now:
    query.awaitTermination()

# COMMAND ----------

display(spark.createDataFrame([(p["batchId"], p["numInputRows"]) for p in query.recentProgress], "batch long, events long"))
