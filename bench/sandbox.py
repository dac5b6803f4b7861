"""Issue 46: what the places that forbid our cluster features cost a stream, on ``local-cluster[3,1,1024]``,
16 partitions, 100 events per partition and micro-batch into parquet, each case in a network namespace of its own
(``tests/integration/firewall_app.py``, run as root with ``ip`` and ``nft``):

* everything allowed; homes off (``eventhubs.partitionHomes=false``);
* the driver's channel port dropped from the start by an nftables rule (the driver unreachable);
* that, with homes and the receiver service off (what a sandbox leaves: the baseline the others are held to);
* the rule added mid-stream, then taken away.

Figures: the median executor run time of the query's tasks (the application's REST API), the median micro-batch
duration of the batches that read events (the first, which starts the cluster's Python workers, left out), the
slowest one, and how many processes said the driver could not be reached (each paid one probe).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from .results import record

ROOT = Path(__file__).resolve().parents[1]
PARTITIONS = 16
CASES = (("none", "everything allowed"), ("homes-off", "partitionHomes=false"),
         ("always", "driver port dropped"), ("bare", "driver port dropped, homes off, receiver service off"),
         ("all", "driver and home ports dropped, no place for the receiver service, default options"),
         ("mid", "driver port dropped mid-stream, then allowed"),
         ("flood", "a stranger's 1,000 connections to the driver and a home, mid-stream"))  # fmt: skip


def _case(plan: str) -> dict[str, Any]:
    name = f"ehs-bench-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    out = tempfile.mkdtemp(prefix="eventhubs-sandbox-")
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        subprocess.run(["ip", "netns", "exec", name, sys.executable, "-m", "tests.integration.firewall_app", out, plan,
                        str(PARTITIONS)], cwd=ROOT, check=True, timeout=900, capture_output=True)  # fmt: skip
        return json.loads(Path(out, "result.json").read_text())  # type: ignore[no-any-return]
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
        shutil.rmtree(out, ignore_errors=True)


def run() -> None:
    if os.geteuid() != 0 or not shutil.which("nft") or not shutil.which("ip"):
        print("sandbox: needs root, ip and nft (apt-get install nftables); not run")
        return
    rows = []
    medians: dict[str, float] = {}
    flood_ratio: float | None = None
    for plan, what in CASES:
        result = _case(plan)
        batches = [b for b in result["batches"] if b["rows"]][1:]
        ms = [b["ms"] for b in batches]
        tasks = result.get("task_ms") or [0]
        row: dict[str, Any] = {"case": what, "median task ms": round(statistics.median(tasks)),
                               "median batch ms": round(statistics.median(ms)),
                               "slowest batch ms": max(ms), "processes that paid a probe":
                               sum("cannot be reached" in line for line in result["said"])}  # fmt: skip
        if plan == "mid":
            dropped = float(result["dropped"])
            after = [b["ms"] for b in batches if _at(b["start"]) > dropped]
            before = [b["ms"] for b in batches if _at(b["start"]) <= dropped]
            row["median before / after the rule ms"] = f"{round(statistics.median(before))} / " \
                f"{round(statistics.median(after))}"  # fmt: skip
        if plan == "flood":
            during = [b["ms"] for b in batches if result["flood_started"] <= _at(b["start"]) <= result["flood_ended"]]
            before = [b["ms"] for b in batches if _at(b["start"]) < result["flood_started"]]
            row["median batch before / during the flood ms"] = (
                f"{round(statistics.median(before))} / {round(statistics.median(during))}" if during and before else "-"
            )
            flood_ratio = statistics.median(during) / statistics.median(before) if during and before else None
        medians[plan] = statistics.median(tasks)
        rows.append(row)
        print(row, flush=True)
    ratio = round(medians["always"] / medians["bare"], 2)
    every = round(medians["all"] / medians["bare"], 2)
    record(
        "sandbox",
        {
            "target": "driver unreachable, or every restriction: median task run time within 1.1x of homes and the "
            "receiver service off",
            "driver unreachable / bare (median task)": ratio,
            "every restriction / bare (median task)": every,
            "target met": ratio <= 1.1 and every <= 1.1,
            "flood target": "a stranger's 1,000 connections: the median micro-batch within 1.2x of before it",
            "during / before the flood (median batch)": round(flood_ratio, 2) if flood_ratio is not None else None,
            "flood target met": flood_ratio is not None and flood_ratio <= 1.2,
        },
        rows,
        notes=(
            f"local-cluster[3,1,1024], {PARTITIONS} partitions, 100 events per partition and micro-batch, parquet "
            "sink, each case in a network namespace of its own, an nftables rule dropping the driver channel's port "
            "where it says. Task figures: executorRunTime of every finished task of the query; micro-batch durations: "
            "triggerExecution, the first left out."
        ),
    )


def _at(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
