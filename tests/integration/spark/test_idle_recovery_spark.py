"""The connector carries on when the service closes what sat idle between micro-batches (issue 19):
pooled receivers and producers, and the planner's management link, on an emulator whose idle
time-outs are shorter than the trigger interval. Nothing may be lost or repeated."""

from __future__ import annotations

import collections
import time

import pytest

from eventhubs_emulator import Emulator
from tests.integration.sdk_helpers import receive_partition, send, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]
IDLE = 2.0  # connections; links idle half as long, so both rules fire between batches


def test_a_hub_to_hub_stream_outlives_the_idle_timeouts(spark, tmp_path):
    with Emulator({"source": 2, "target": 2}, idle_timeout=IDLE, link_idle_timeout=IDLE / 2) as emu:
        source, target = emu.connection_string("source"), emu.connection_string("target")
        query = (
            spark.readStream.format("eventhubs")
            .option("eventhubs.connectionString", source)
            .option("eventhubs.startingPosition", '{"offset": "-1"}')
            .load()
            .selectExpr("body", "partition as partitionId")
            .writeStream.format("eventhubs")
            .option("eventhubs.connectionString", target)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="5 seconds")  # every batch starts after everything sat idle > IDLE
            .start()
        )
        expected: list[str] = []
        try:
            for round_ in range(3):
                for p in range(2):
                    batch = [f"r{round_}-p{p}-{i}" for i in range(20)]
                    send(source, batch, partition_id=str(p))
                    expected += batch

                def arrived(count: int = len(expected)) -> bool:
                    props = [emu.partition_properties("target", p) for p in range(2)]
                    return sum(x["last_enqueued_sequence_number"] + 1 for x in props) >= count

                wait_until(arrived, timeout=90, message=f"round {round_} in the target hub")
                time.sleep(2 * IDLE)
            assert query.exception() is None, query.exception()
        finally:
            query.stop()
        stats = emu.server.stats
        assert stats["idle_connections_closed"] > 0 and stats["idle_links_detached"] > 0, stats
        # each partition read to its own end (asking partition 0 for every event waited out its 60 s for half of them)
        got = [e.body_as_str() for p in range(2)
               for e in receive_partition(target, str(p), emu.partition_properties("target", p)
                                          ["last_enqueued_sequence_number"] + 1)]  # fmt: skip
        counts = collections.Counter(got)
        assert sorted(counts) == sorted(expected), "nothing lost"
        assert max(counts.values()) == 1, "nothing repeated"
