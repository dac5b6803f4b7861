# Databricks notebook source
# MAGIC %md
# MAGIC # Avro with the Azure Schema Registry
# MAGIC
# MAGIC Producers that use the Schema Registry encoders (`AvroEncoder` in Python, `AvroSerializer` in JavaScript,
# MAGIC .NET and Java alike) send a plain Avro body and name its schema in the content type,
# MAGIC `avro/binary+<schema id>`. The connector reads such events into a struct column `value` typed by a reader
# MAGIC schema of yours (each event's writer schema, fetched once per executor, is resolved to it by Avro's
# MAGIC rules), and writes a struct column back out as registered Avro. No jar.
# MAGIC
# MAGIC The registry takes Microsoft Entra ID only, never a SAS key: the `eventhubs.entra.*` options sign in to
# MAGIC it (here a service principal with the Schema Registry Contributor role on the namespace), even when the
# MAGIC hub itself is reached with a connection string.

# COMMAND ----------

dbutils.widgets.text("secret_scope", "eventhubs")
dbutils.widgets.text("registry", "NAMESPACE.servicebus.windows.net")
dbutils.widgets.text("schema_group", "orders")
dbutils.widgets.text("output_path", "/tmp/eventhubs/orders_avro")
dbutils.widgets.text("checkpoint_path", "/tmp/eventhubs/orders_avro_checkpoint")
dbutils.widgets.text("ca_file", "")  # a CA bundle to trust (a TLS-inspecting proxy's); empty: the system's
dbutils.widgets.text("authority_host", "")  # Entra's host in a sovereign cloud; empty: Azure's public cloud

scope = dbutils.widgets.get("secret_scope")
registry = {
    "eventhubs.avro.schemaRegistry": dbutils.widgets.get("registry"),
    "eventhubs.entra.tenantId": dbutils.secrets.get(scope, "tenant-id"),
    "eventhubs.entra.clientId": dbutils.secrets.get(scope, "client-id"),
    "eventhubs.entra.clientSecret": dbutils.secrets.get(scope, "client-secret"),
}
authority = dbutils.widgets.get("authority_host")
if authority:
    registry |= {"eventhubs.entra.authorityHost": authority, "eventhubs.entra.disableInstanceDiscovery": "true"}
if dbutils.widgets.get("ca_file"):
    registry["eventhubs.connectionVerify"] = dbutils.widgets.get("ca_file")
orders_hub = dbutils.secrets.get(scope, "connection-string")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Write: a struct column becomes registered Avro
# MAGIC
# MAGIC The sink registers the struct's schema (made as Spark's `to_avro` makes it, or `eventhubs.avro.schema`)
# MAGIC in the group once per query and sends each row's `value` as its Avro body.

# COMMAND ----------

from pyspark.sql import functions as F

orders = spark.createDataFrame(
    [(1, "oslo", 120.0, 2), (2, "lima", 80.5, 1), (3, "oslo", 42.0, 5), (4, "pune", 310.0, 1)],
    "id long, city string, amount double, quantity int",
)
(
    orders.select(F.col("city").alias("partitionKey"), F.struct("id", "city", "amount", "quantity").alias("value"))
    .write.format("eventhubs")
    .option("eventhubs.connectionString", orders_hub)
    .options(**registry)
    .option("eventhubs.avro.schemaGroup", dbutils.widgets.get("schema_group"))
    .option("eventhubs.avro.recordName", "Order")
    .option("eventhubs.avro.recordNamespace", "shop")
    .mode("append")
    .save()
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Read: Avro bodies into columns
# MAGIC
# MAGIC The reader schema is the `value` column's type. Here it evolved from what was written: `quantity` is read
# MAGIC as a long (a promotion), and `coupon` is new, with a default. `PERMISSIVE` keeps the stream going past a
# MAGIC body that cannot be read: its `value` is null and `_corrupt_record` holds the body and the error
# MAGIC (`FAILFAST`, the default, stops the query naming the partition, sequence number and schema id).

# COMMAND ----------

import json

reader_schema = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "city", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "quantity", "type": "long"},
        {"name": "coupon", "type": ["null", "string"], "default": None},
    ],
}
orders_in = (
    spark.readStream.format("eventhubs")
    .option("eventhubs.connectionString", orders_hub)
    .options(**registry)
    .option("eventhubs.avro.schema", json.dumps(reader_schema))
    .option("eventhubs.avro.mode", "PERMISSIVE")
    .option("eventhubs.startingPosition", '{"offset": "-1"}')
    .load()
    .select("partition", "sequenceNumber", "enqueuedTime", "value.*", "_corrupt_record")
)
query = (
    orders_in.writeStream.format("parquet")
    .option("path", dbutils.widgets.get("output_path"))
    .option("checkpointLocation", dbutils.widgets.get("checkpoint_path"))
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()

# COMMAND ----------

table = spark.read.parquet(dbutils.widgets.get("output_path"))
display(table.where("_corrupt_record IS NULL").drop("_corrupt_record").orderBy("id"))
display(table.where("_corrupt_record IS NOT NULL").select("partition", "sequenceNumber", "_corrupt_record.error"))
