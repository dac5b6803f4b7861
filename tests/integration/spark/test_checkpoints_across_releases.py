"""Checkpoints written by an earlier release resume on this one: Spark's checkpoint and the blob checkpoint
store's blobs, both kept in ``tests/data/written_before_restructure`` (written by its ``make.py`` on the code
before the package was reorganised by folder)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eventhubs_emulator import Emulator
from tests.integration.sdk_helpers import send

pytestmark = [pytest.mark.spark, pytest.mark.azurite]

KEPT = Path(__file__).resolve().parents[2] / "data" / "written_before_restructure"


def _stream(spark, conn: str, tmp: Path, checkpoint: Path, **options: str):
    reader = spark.readStream.format("eventhubs").option("eventhubs.connectionString", conn)
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .selectExpr("cast(body as string) as body")
        .writeStream.format("parquet")
        .option("path", str(tmp / "data"))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    # the files themselves: the sink's metadata log in a new folder starts at the resumed batch
    return sorted(r.body for r in spark.read.parquet(str(tmp / "data" / "*.parquet")).collect())


def test_a_spark_checkpoint_and_blob_checkpoints_of_the_earlier_release_resume_after_their_last_event(
    spark, azurite, tmp_path
):
    from azure.storage.blob import ContainerClient

    kept = json.loads((KEPT / "blobs.json").read_text())
    with Emulator({"kept": 2}) as emu:
        conn = emu.connection_string("kept")
        # the hub as it was when the checkpoints were written (the same events, so the same sequence numbers)
        for partition, bodies in kept["events"].items():
            send(conn, bodies, partition_id=partition)
        send(conn, ["a-new"], partition_id="0")
        send(conn, ["b-new-0", "b-new-1"], partition_id="1")
        new = ["a-new", "b-new-0", "b-new-1"]

        # Spark's checkpoint: the query goes on after its last committed batch
        checkpoint = tmp_path / "spark-checkpoint"
        shutil.copytree(KEPT / "spark-checkpoint", checkpoint)
        assert _stream(spark, conn, tmp_path / "spark", checkpoint) == new

        # the store's checkpoints: a new query starts after them
        container = ContainerClient.from_connection_string(azurite.connection_string, "kept")
        container.create_container()
        for blob in kept["blobs"]:
            name = blob["name"].replace("{namespace}", emu.fully_qualified_namespace)
            container.upload_blob(name, b"", metadata=blob["metadata"])
        store = {
            "eventhubs.checkpointStore.connectionString": azurite.connection_string,
            "eventhubs.checkpointStore.container": "kept",
            "eventhubs.startFromCheckpointStore": "true",
            "eventhubs.startingPosition": '{"offset": "-1"}',
        }
        assert _stream(spark, conn, tmp_path / "store", tmp_path / "new-checkpoint", **store) == new
