"""Connector jobs in a Spark driver of its own, for the sign-in tests.

``python -m tests.integration.auth_app JOBS.json RESULTS.json`` runs each job of JOBS.json in one local
Spark session and writes what happened to RESULTS.json. The test starts this process with the
environment a cluster node would have (``REQUESTS_CA_BUNDLE``, ``IDENTITY_ENDPOINT``, ``AZURE_*``):
Spark's Python workers inherit it, so credentials are built and used in the workers, as on a cluster.

A job: ``{"name", "options", "write": [bodies]}`` writes the bodies with ``df.write``, then reads the hub
back in a batch (``"read": true``) or streams it once with ``Trigger.AvailableNow`` (``"stream": DIR``
as checkpoint location); ``"live"`` streams while the sink writes (see ``live``), ``"avro"`` writes and reads
registered Avro through the Schema Registry (see ``avro``). Each result: ``{"name", "read": [bodies],
"written": n}`` or ``{"name", "error", "seconds"}``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import Any


def run_job(spark: Any, job: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, str] = job["options"]
    result: dict[str, Any] = {"name": job["name"]}
    started = time.monotonic()
    try:
        if job.get("write"):
            df = spark.createDataFrame([(b,) for b in job["write"]], "body string")
            # The checkpoint store is the reader's: the sink takes no store options.
            sink_options = {k: v for k, v in options.items() if not k.lower().startswith("eventhubs.checkpointstore")}
            df.write.format("eventhubs").mode("append").options(**sink_options).save()
            result["written"] = len(job["write"])
        reader_options = {**options, "eventhubs.startingPosition": '{"offset": "-1"}'}
        if job.get("read"):
            rows = (
                spark.read.format("eventhubs")
                .options(**reader_options)
                .load()
                .selectExpr("cast(body as string) as body")
                .collect()
            )
            result["read"] = sorted(r.body for r in rows)
        if job.get("stream"):
            import pyspark

            got: list[str] = []
            # Spark 4.0/4.1 mirror an AvailableNow run's progress into the checkpoint store when the next run
            # starts (README, Spark versions): a second run, reading nothing new, writes it
            runs = 1 if tuple(int(x) for x in pyspark.__version__.split(".")[:2]) >= (4, 2) else 2
            for _ in range(runs):
                query = (
                    spark.readStream.format("eventhubs").options(**reader_options).load()
                    .selectExpr("cast(body as string) as body")
                    .writeStream.foreachBatch(lambda df, _id: got.extend(r.body for r in df.collect()))
                    .option("checkpointLocation", job["stream"])
                    .trigger(availableNow=True)
                    .start()
                )  # fmt: skip
                query.awaitTermination()
            result["read"] = sorted(got)
        if job.get("live"):
            result["read"], result["written"] = live(spark, options, job["live"])
        if job.get("avro"):
            result["read"] = avro(spark, options, job["avro"])
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    result["seconds"] = time.monotonic() - started
    return result


def avro(spark: Any, options: dict[str, str], plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Registered Avro both ways through the Schema Registry: ``plan["values"]`` (records of id and item) written by
    the sink into schema group ``plan["group"]`` as record ``plan["name"]``, then read back in a batch decoded with
    the reader schema ``plan["reader"]``; the values read, by id."""
    name, namespace = plan["name"].rsplit(".", 1)[1], plan["name"].rsplit(".", 1)[0]
    df = spark.createDataFrame([(v,) for v in plan["values"]], "value struct<id: bigint, item: string>")
    df.write.format("eventhubs").mode("append").options(**options).options(**{
        "eventhubs.avro.schemaGroup": plan["group"], "eventhubs.avro.recordName": name,
        "eventhubs.avro.recordNamespace": namespace}).save()  # fmt: skip
    rows = (
        spark.read.format("eventhubs").options(**options).option("eventhubs.startingPosition", '{"offset": "-1"}')
        .option("eventhubs.avro.schema", plan["reader"]).load().select("value").collect()
    )  # fmt: skip
    return sorted((r.value.asDict() for r in rows), key=lambda v: v["id"])


def live(spark: Any, options: dict[str, str], plan: dict[str, Any]) -> tuple[list[str], int]:
    """A stream that runs for ``plan["seconds"]`` while ``plan["count"]`` events are written every ``plan["every"]``
    seconds through the sink with the same options (a token may expire meanwhile); the stream's bodies, sorted, once
    it has read every event written, and how many were written."""
    got: list[str] = []
    query = (
        spark.readStream.format("eventhubs").options(**{**options, "eventhubs.startingPosition": '{"offset": "-1"}'})
        .load().selectExpr("cast(body as string) as body")
        .writeStream.foreachBatch(lambda df, _id: got.extend(r.body for r in df.collect()))
        .option("checkpointLocation", plan["checkpoint"]).trigger(processingTime="1 second").start()
    )  # fmt: skip
    written = 0
    deadline = time.monotonic() + plan["seconds"]
    try:
        while time.monotonic() < deadline:
            bodies = [f"live-{written + i}" for i in range(plan["count"])]
            spark.createDataFrame([(b,) for b in bodies], "body string").write.format("eventhubs").mode(
                "append").options(**options).save()  # fmt: skip
            written += len(bodies)
            time.sleep(plan["every"])
        until = time.monotonic() + 60
        while len(got) < written and time.monotonic() < until and query.exception() is None:
            time.sleep(0.5)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
    finally:
        query.stop()
    return sorted(got), written


def main(jobs_file: str, results_file: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from eventhubs_spark.local_spark import local_session

    # The Spark UI on, on a free port: its REST API serves what the UI pages show (SQL plans and their
    # node details, jobs, stages, environment), which the test searches for secrets.
    overrides = {"spark.ui.enabled": "true", "spark.ui.port": "0"}
    master = os.environ.get("EVENTHUBS_TEST_MASTER")  # e.g. local-cluster[2,1,1024]: executors of their own
    if master:
        overrides["spark.master"] = master
    event_log = os.environ.get("EVENTHUBS_TEST_EVENT_LOG")  # a folder: Spark's event log, searched for secrets
    if event_log:
        overrides.update(
            {"spark.eventLog.enabled": "true", "spark.eventLog.dir": event_log, "spark.eventLog.compress": "false"}
        )  # plain text, to search
    from tests.integration.cluster_start import distinct_application_id

    cluster = master is not None and master.startswith("local-cluster")
    with distinct_application_id() if cluster else contextlib.nullcontext():
        spark: SparkSession = local_session("eventhubs-auth-tests", **overrides)
    with open(jobs_file, encoding="utf-8") as f:
        jobs = json.load(f)
    results = [run_job(spark, job) for job in jobs]
    ui = _spark_ui_pages(spark)
    with open(results_file, "w", encoding="utf-8") as f:
        json.dump({"jobs": results, "ui": ui}, f)
    spark.stop()


def _spark_ui_pages(spark: Any) -> dict[str, str]:
    import urllib.request

    base = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    pages = {}
    for path in ("sql?details=true&planDescription=true", "jobs", "stages?details=true", "environment",
                 "executors"):  # fmt: skip
        with urllib.request.urlopen(f"{base}/api/v1/applications/{app}/{path}", timeout=30) as reply:
            pages[path] = reply.read().decode("utf-8", "replace")
    return pages


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
