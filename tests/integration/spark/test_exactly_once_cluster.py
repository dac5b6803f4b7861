"""Exactly once into a hub on ``local-cluster[2,1,1024]``: a 16-partition hub-to-hub stream of 200,000 events
through executors SIGKILLed mid-write three times, a black hole under every connection mid-write, and the driver
SIGKILLed mid-write three times (then started again from its checkpoint). Every event is in the target once, read
by our reader and by the official SDK.

The same faults without the option store events twice: the at-least-once variant is that control (marker
``control``: 3 minutes, run by ``./dev test -m control``, outside ``./dev test`` and CI for their time; the smaller
controls of ``test_exactly_once_spark.py`` run in both). Here the point is the whole system under the faults users
meet.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.sdk_helpers import receive
from tests.integration.sink_app import writing

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[3]
PARTITIONS = 16
EVENTS = 200_000


def wait_for(predicate, timeout: float, what: str, app: subprocess.Popen | None = None, out: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        if app is not None and app.poll() is not None:
            log = (out / "driver.log").read_text(errors="replace")[-4000:] if out else ""
            raise AssertionError(f"the app ended ({app.returncode}) before {what}:\n{log}")
        time.sleep(0.05)
    raise AssertionError(f"no {what} within {timeout:.0f} s")


@pytest.mark.timeout(900)  # about 4.5 minutes alone on 2 cores: four drivers of local-cluster start, 200,000 events
@pytest.mark.parametrize(
    "once",
    [True, pytest.param(False, marks=pytest.mark.control)],  # the control: 3 minutes, outside ./dev test (README)
    ids=["exactly-once", "at-least-once"],
)
def test_hub_to_hub_exactly_once_through_executor_and_driver_kills_and_a_black_hole(
    spark, eventhubs_emulator, tmp_path, once
):
    """Every event once in the target; the same run with the option off stores some twice and loses none (so this
    test can fail: the faults do repeat sends)."""
    from pyspark.sql import functions as F

    name = f"eoc{uuid.uuid4().hex[:8]}"
    eventhubs_emulator.add_hub(name, PARTITIONS)
    eventhubs_emulator.add_hub(name + "-out", PARTITIONS)
    source, target = eventhubs_emulator.connection_string(name), eventhubs_emulator.connection_string(name + "-out")
    seed = spark.range(EVENTS).select(
        F.concat(F.lit("e-"), F.col("id").cast("string")).alias("body"),
        (F.col("id") % PARTITIONS).cast("string").alias("partitionId"),
    )
    seed.write.format("eventhubs").option("eventhubs.connectionString", source).mode("append").save()
    counts = [eventhubs_emulator.partition_properties(name, p)["last_enqueued_sequence_number"] + 1
              for p in range(PARTITIONS)]  # fmt: skip
    assert sum(counts) == EVENTS

    out = tmp_path

    def in_target() -> int:
        return sum(eventhubs_emulator.partition_properties(name + "-out", p)["last_enqueued_sequence_number"] + 1
                   for p in range(PARTITIONS))  # fmt: skip

    log = open(out / "driver.log", "ab")  # noqa: SIM115 (appended to by every driver started)

    def start(kills: int) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.integration.sink_app", source, target, str(out), str(kills),
             "on" if once else "off"],
            cwd=ROOT, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip

    app = start(3)
    try:
        lines = lambda: (out / "executor-kills").exists() and len((out / "executor-kills").read_text().splitlines())  # noqa: E731
        wait_for(lambda: lines() == 3, 600, "three executors killed mid-write", app, out)
        batch = wait_for(lambda: writing(str(out)), 300, "a batch being written", app, out)
        holed = eventhubs_emulator.black_hole(None)  # every open connection, for good; new ones are served
        assert holed > 0
        killed: list[int] = []
        for _ in range(3):
            batch = wait_for(lambda: (b := writing(str(out))) is not None and b not in killed and b, 600,
                             "a batch being written", app, out)  # fmt: skip
            before = in_target()
            # the kill lands once the batch has stored something (or it is over): between its sends and its commit
            wait_for(lambda b=batch, n=before: in_target() > n or writing(str(out)) != b, 120, "the batch's sends", app,
                     out)  # fmt: skip
            time.sleep(random.uniform(0.0, 0.3))
            os.killpg(app.pid, signal.SIGKILL)
            app.wait(30)
            killed.append(batch)
            app = start(0)
        assert app.wait(900) == 0, (out / "driver.log").read_text(errors="replace")[-4000:]
    finally:
        if app.poll() is None:
            os.killpg(app.pid, signal.SIGKILL)
        log.close()
    assert (out / "done").exists()

    expected = sorted(f"E-{i}" for i in range(EVENTS))
    stored = {str(p): eventhubs_emulator.partition_properties(name + "-out", p)["last_enqueued_sequence_number"] + 1
              for p in range(PARTITIONS)}  # fmt: skip
    if not once:  # at least once: nothing lost, and the faults stored some events twice
        rows = spark.read.format("eventhubs").option("eventhubs.connectionString", target).load().collect()
        copies = collections.Counter(bytes(r.body).decode() for r in rows)
        assert sorted(copies) == expected
        assert sum(stored.values()) > EVENTS and max(copies.values()) > 1, sum(stored.values())
        print(f"at least once: {sum(stored.values()) - EVENTS} events stored twice or more")
        return
    assert sum(stored.values()) == EVENTS, stored
    # our reader
    rows = (
        spark.read.format("eventhubs").option("eventhubs.connectionString", target).load()
        .selectExpr("cast(body as string) as body", "properties['eventhubs-spark-stamp'] as stamp", "partition")
        .collect()
    )  # fmt: skip
    assert sorted(r.body for r in rows) == expected
    assert len({r.stamp for r in rows}) == EVENTS and None not in {r.stamp for r in rows}
    assert all(int(r.body[2:]) % PARTITIONS == int(r.partition) for r in rows)  # each to the partition it came from
    # the official SDK
    bodies: collections.Counter[str] = collections.Counter()
    for p, n in stored.items():
        events = receive(target, n, timeout=60, partition_id=p, starting_position="-1")
        assert len(events) == n
        bodies.update(e.body_as_str() for e in events)
    assert sorted(bodies) == expected and max(bodies.values()) == 1
    # the faults hit batches being written, and the batches run again found what their first run had stored
    text = (out / "driver.log").read_text(errors="replace")
    assert "rows an earlier attempt had stored were not sent again" in text, text[-3000:]
