"""An executor killed mid-stream on local-cluster[3,1,1024]: its partitions get a new home, and the query
stays exact (every event once in the sink)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .sdk_helpers import send

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.partitions(6)
def test_an_executor_killed_mid_stream_loses_and_repeats_nothing(eventhub, tmp_path):
    expected = set()
    for p in range(eventhub.partitions):
        bodies = [f"kill-{p}-{i}" for i in range(200)]
        send(eventhub.connection_string, bodies, partition_id=str(p))
        expected.update(bodies)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.integration.spark_app", "local-cluster-kill", eventhub.connection_string,
         str(tmp_path), "150"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["killed"], "an executor was killed mid-stream"
    rows = result["rows"]
    assert len(rows) == len(expected) and set(rows) == expected, "every event once in the sink"
    assert result["batches"] >= 8  # 1200 events, 150 per trigger
    # the killed executor was a home: the driver heard that its partitions' tasks could not reach it, found it
    # gone too, and placed them elsewhere
    assert "could not read from its partition's home" in proc.stderr, proc.stderr[-3000:]
    assert "it is no longer a home" in proc.stderr
