"""Secrets never show: one known key fed through every path a user or an operator looks at.

The key is in the Event Hubs connection string and in the checkpoint store's connection string. The
test reads and writes with them, makes the connector fail on purpose, and searches plans
(``explain``, the SQL plan the Spark UI shows), query progress, exception text, log output (the
driver's and, through the captured file descriptors, Spark's and the Python workers') and every file
in the query's checkpoint directory.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.integration.sdk_helpers import send

pytestmark = [pytest.mark.spark, pytest.mark.azurite]

KEY = "S3cretK3yValue+/ShouldNeverShow=="


def _with_key(conn: str) -> str:
    parts = [p for p in conn.split(";") if p and not p.startswith("SharedAccessKey=")]
    return ";".join([*parts, f"SharedAccessKey={KEY}"])


def _store_conn_with_key(azurite) -> str:
    # Azurite checks its own account key, so the probe secret rides in a SAS-like extra field the storage
    # SDK ignores; the real account key of Azurite is public and not a secret.
    return azurite.connection_string + f"SharedAccessSignature=sv=2022&sig={KEY}"


def test_a_known_secret_appears_nowhere(spark, eventhub, azurite, tmp_path, capfd, caplog):
    caplog.set_level(logging.DEBUG, logger="eventhubs_spark")
    conn = _with_key(eventhub.connection_string)
    send(eventhub.connection_string, [f"s{i}" for i in range(10)], partition_id="0")
    seen: list[str] = []

    reader = (
        spark.readStream.format("eventhubs")
        .option("eventhubs.connectionString", conn)
        .option("eventhubs.startingPosition", '{"offset": "-1"}')
        .option("eventhubs.checkpointStore.connectionString", azurite.connection_string)
        .option("eventhubs.checkpointStore.container", "secrets")
    )
    df = reader.load().selectExpr("cast(body as string) as body")
    seen.append(df._jdf.queryExecution().toString())
    df.explain(mode="extended")
    query = (
        df.writeStream.format("parquet")
        .option("path", str(tmp_path / "data"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    seen += [str(p) for p in query.recentProgress]
    query.explain(extended=True)
    assert len(spark.read.parquet(str(tmp_path / "data")).collect()) == 10

    batch = spark.read.format("eventhubs").option("eventhubs.connectionString", conn).load()
    seen.append(batch._jdf.queryExecution().toString())
    batch.explain(mode="extended")
    assert batch.count() == 10

    # A SAS token (this emulator takes any signature) read end to end, and an Entra client secret in a plan.
    namespace = eventhub.emulator.fully_qualified_namespace
    sas_read = (
        spark.read.format("eventhubs").option("eventhubs.namespace", namespace)
        .option("eventhubs.name", eventhub.name).option("eventhubs.useDevelopmentEmulator", "true")
        .option("eventhubs.sasToken", f"SharedAccessSignature sr={namespace}&sig={KEY}&se=4102444800&skn=x")
        .load()
    )  # fmt: skip
    seen.append(sas_read._jdf.queryExecution().toString())
    assert sas_read.count() == 10
    entra_read = (
        spark.read.format("eventhubs").option("eventhubs.namespace", "ns.servicebus.windows.net")
        .option("eventhubs.name", "hub").option("eventhubs.entra.tenantId", "t").option("eventhubs.entra.clientId", "c")
        .option("eventhubs.entra.clientSecret", KEY).load()
    )  # fmt: skip
    seen.append(entra_read._jdf.queryExecution().toString())
    entra_read.explain(mode="extended")

    # writes, and failures: a bad value next to the secret, a hub that does not exist, a bad store
    spark.createDataFrame([("w",)], "body string").write.format("eventhubs").option(
        "eventhubs.connectionString", conn
    ).mode("append").save()
    failures = [
        lambda: spark.read.format("eventhubs").option("eventhubs.connectionString", conn)
        .option("maxEventsPerPartition", "-5").load().count(),
        lambda: spark.read.format("eventhubs")
        .option("eventhubs.connectionString", conn.replace(f"EntityPath={eventhub.name}", "EntityPath=nohub"))
        .option("eventhubs.operationTimeout", "3s").load().count(),
        lambda: spark.read.format("eventhubs").option("eventhubs.connectionString", conn + ";Bogus")
        .load().count(),
        lambda: spark.read.format("eventhubs").option("eventhubs.connectionString", conn)
        .option("eventhubs.checkpointStore.connectionString", _store_conn_with_key(azurite))
        .option("eventhubs.startFromCheckpointStore", "true").load().count(),
    ]  # fmt: skip
    for fail in failures:
        with pytest.raises(Exception) as info:
            fail()
        seen.append(str(info.value))
        seen.append(repr(info.value))

    captured = capfd.readouterr()
    seen += [captured.out, captured.err, caplog.text]
    for path in Path(tmp_path / "checkpoint").rglob("*"):
        if path.is_file():
            seen.append(path.read_text(errors="replace"))
    text = "\n".join(seen)
    assert len(text) > 1000, "the probe looked at real output"
    assert "eventhubs" in text.lower()
    assert KEY not in text
    assert KEY.replace("+", "%2B").replace("/", "%2F") not in text
