# Databricks notebook source
# MAGIC %md
# MAGIC # Backfill a table from Event Hubs Capture, and keep it live
# MAGIC
# MAGIC A hub keeps events for 1 to 7 days (up to 90 on Premium); older history exists only in the Avro files Event
# MAGIC Hubs Capture wrote. With `eventhubs.capture.location` one stream reads both: each partition's history from the
# MAGIC Capture files, in sequence order, then the hub from its first retained event on. Each event reaches the table
# MAGIC once, whichever side it came from, and a restart anywhere (mid-file, at the seam) reads on exactly. Files
# MAGIC written twice are read once; a gap (Capture switched off while the hub's retention passed) fails the query by
# MAGIC name, after waiting `eventhubs.capture.lateFileWait` for a file Capture writes late.
# MAGIC
# MAGIC The storage account is signed in to as the checkpoint store is: a storage connection string from the secret
# MAGIC scope here (`eventhubs.capture.connectionString`), else `eventhubs.capture.sasToken`, else the hub's Microsoft
# MAGIC Entra identity (which then needs *Storage Blob Data Reader* on the container).

# COMMAND ----------

dbutils.widgets.text("secret_scope", "eventhubs")
dbutils.widgets.text("capture_location", "abfss://capture@ACCOUNT.dfs.core.windows.net")
dbutils.widgets.text("capture_namespace", "")  # {Namespace} in the file names: empty for the namespace's name
dbutils.widgets.text("output_path", "/tmp/eventhubs/history")
dbutils.widgets.text("checkpoint_path", "/tmp/eventhubs/history_checkpoint")
dbutils.widgets.text("available_now", "false")  # "true": read what is there, then stop

scope = dbutils.widgets.get("secret_scope")
connection_string = dbutils.secrets.get(scope, "connection-string")
storage_connection_string = dbutils.secrets.get(scope, "capture-storage-connection-string")
capture_location = dbutils.widgets.get("capture_location")
capture_namespace = dbutils.widgets.get("capture_namespace")
output_path = dbutils.widgets.get("output_path")
checkpoint_path = dbutils.widgets.get("checkpoint_path")
available_now = dbutils.widgets.get("available_now") == "true"

# COMMAND ----------

reader = (
    spark.readStream.format("eventhubs")
    .option("eventhubs.connectionString", connection_string)
    .option("eventhubs.startingPosition", '{"offset": "-1"}')  # the earliest event, in Capture or the hub
    .option("eventhubs.capture.location", capture_location)
    .option("eventhubs.capture.connectionString", storage_connection_string)
    .option("maxEventsPerTrigger", 100000)  # one budget across both sides
)
if capture_namespace:
    reader = reader.option("eventhubs.capture.namespace", capture_namespace)
events = reader.load().selectExpr("partition", "sequenceNumber", "enqueuedTime", "cast(body as string) as body")

query = (
    events.writeStream.format("parquet")  # on Databricks: .format("delta") or .toTable("history")
    .option("path", output_path)
    .option("checkpointLocation", checkpoint_path)
    .trigger(**({"availableNow": True} if available_now else {"processingTime": "30 seconds"}))
    .start()
)
if available_now:
    query.awaitTermination()

# COMMAND ----------

# MAGIC %md
# MAGIC ## Each partition, from its first captured event to the hub's last
# MAGIC `first` lies in Capture when the hub no longer holds it; `events` equals `last - first + 1` when nothing is
# MAGIC missing.

# COMMAND ----------

from pyspark.sql import functions as F

history = spark.read.parquet(output_path)
display(
    history.groupBy("partition")
    .agg(F.min("sequenceNumber").alias("first"), F.max("sequenceNumber").alias("last"), F.count("*").alias("events"))
    .orderBy("partition")
)
