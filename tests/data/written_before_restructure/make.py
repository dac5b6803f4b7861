"""Writes this folder's fixtures with the code of the day: a Spark checkpoint and the blob checkpoint store's blobs
of one query, read later by ``tests/integration/spark/test_checkpoints_across_releases.py`` with newer code.

Run from the project root, on the release whose checkpoints are to be kept (it was run on commit ``ec3507b``, the
code before the package was reorganised by folder)::

    .venv/bin/python tests/data/written_before_restructure/make.py
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

HUB = "kept"
EVENTS = {"0": [f"a{i}" for i in range(5)], "1": [f"b{i}" for i in range(3)]}
CONTAINER = "kept"


def main() -> None:
    from azure.eventhub import EventData, EventHubProducerClient
    from azure.storage.blob import ContainerClient

    from eventhubs_emulator import Emulator
    from eventhubs_spark.local_spark import local_session
    from tests.conftest import Azurite

    azurite = Azurite()
    spark = local_session("written-before-restructure")
    work = Path(tempfile.mkdtemp())
    try:
        with Emulator({HUB: 2}) as emu:
            conn = emu.connection_string(HUB)
            with EventHubProducerClient.from_connection_string(conn) as producer:
                for partition, bodies in EVENTS.items():
                    producer.send_batch([EventData(b) for b in bodies], partition_id=partition)

            def run() -> None:
                """One Trigger.AvailableNow run into the parquet folder (from the checkpoint once there is one)."""
                query = (
                    spark.readStream.format("eventhubs")
                    .option("eventhubs.connectionString", conn)
                    .option("eventhubs.startingPosition", '{"offset": "-1"}')
                    .option("eventhubs.checkpointStore.connectionString", azurite.connection_string)
                    .option("eventhubs.checkpointStore.container", CONTAINER)
                    .load()
                    .selectExpr("cast(body as string) as body")
                    .writeStream.format("parquet")
                    .option("path", str(work / "data"))
                    .option("checkpointLocation", str(work / "checkpoint"))
                    .trigger(availableNow=True)
                    .start()
                )
                query.awaitTermination(180)
                assert query.exception() is None, query.exception()

            run()
            rows = sorted(r.body for r in spark.read.parquet(str(work / "data")).collect())
            assert rows == sorted(b for bodies in EVENTS.values() for b in bodies), rows
            run()  # Spark 4.0/4.1 mirror a run's progress when the next run starts: one more run that finds nothing
            namespace = emu.fully_qualified_namespace
        container = ContainerClient.from_connection_string(azurite.connection_string, CONTAINER)
        blobs = [
            {"name": b.name.replace(namespace, "{namespace}"), "metadata": dict(b.metadata or {})}
            for b in container.list_blobs(include=["metadata"])
        ]
        assert any("/checkpoint/" in b["name"] for b in blobs), blobs
        target = HERE / "spark-checkpoint"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(work / "checkpoint", target, ignore=shutil.ignore_patterns(".*.crc"))
        (HERE / "blobs.json").write_text(json.dumps({"events": EVENTS, "blobs": blobs}, indent=1) + "\n")
    finally:
        spark.stop()
        azurite.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
