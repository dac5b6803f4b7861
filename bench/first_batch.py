"""A fresh query's first micro-batch (issue 87, item 3): ours with no option set against a trivial Python source's
(Spark's own first batch of a Python source) at 4 and 32 partitions, and where ours goes.

The first batches are bench ``defaults``' runs (bench ``partitions``' hubs: 51,200 events of 200 bytes; each sample a
fresh ``local[2]`` Spark process reading the hub in micro-batches of 12,800 into the noop sink), RUNS of each side,
interleaved; the figure is Spark's ``triggerExecution`` of batch 0, its median over the runs.

The breakdown times the first batch's steps one by one, each in a fresh Python process on the same emulator (outside
Spark: inside it they overlap with Spark's own start of the query and of its Python workers, and no hook of Spark's
sees them):

- the driver's first trigger: the connector's imports (the stream reader, and the SDK modules the first trigger
  brings), the SDK's opening of the management connection (connection, session, links), the sign-in (the CBS
  token), and the first properties (the hub's, then every partition's on the kept connection);
- the executor's first task: the receiver service's start (from the worker's first connect to its listening), its
  first range (a connection, a sign-in, a link, the events), another partition's first range (a link on the open
  connection), and a range on a warm link.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .partitions import _fill, _run
from .results import record

COUNTS = (4, 32)
RUNS = 5  # fresh processes a side and count, interleaved
STEP_SAMPLES = 5  # fresh processes timing the steps


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 1)


def driver_steps(conn: str) -> None:
    """In a fresh process: the driver's first trigger step by step (prints ms as JSON)."""
    out: dict[str, float] = {}
    started = time.perf_counter()
    import eventhubs_spark.source.stream_reader  # noqa: F401 (what Spark's stream runner imports first)
    from eventhubs_spark.amqp import management, sdk
    from eventhubs_spark.auth.settings import parse_connection_string

    out["imports: the stream reader"] = _ms(started)
    started = time.perf_counter()
    import azure.eventhub.aio  # noqa: F401 (the SDK's async client, which the first trigger's connection brings)

    out["imports: the SDK's async client"] = _ms(started)
    settings = parse_connection_string(conn)
    client = management.ManagementClient(settings)
    steps: dict[str, float] = {}

    def timed(step: str, call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        """``call``, its first run's time kept as ``step``."""

        async def run(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return await call(*args, **kwargs)
            finally:
                steps.setdefault(step, _ms(began))

        return run

    sdk.open_management = timed("the SDK's opening (connection, session, links)", sdk.open_management)
    management._signed_in = timed("the sign-in (CBS token)", management._signed_in)
    started = time.perf_counter()
    ids = client.partition_ids()
    whole = _ms(started)
    out.update(steps)
    out["the hub's properties (the first request)"] = round(whole - sum(steps.values()), 1)
    started = time.perf_counter()
    client.partition_properties(ids)
    out[f"every partition's properties ({len(ids)})"] = _ms(started)
    client.close()
    print(json.dumps(out))


def executor_steps(conn: str) -> None:
    """In a fresh process made an executor's worker (``SPARK_LOCAL_DIRS``): the first task's steps (prints ms)."""
    local = tempfile.mkdtemp(prefix="blockmgr-bench-")
    os.environ["SPARK_LOCAL_DIRS"] = local
    out: dict[str, float] = {}
    started = time.perf_counter()
    from eventhubs_spark.auth.settings import parse_connection_string
    from eventhubs_spark.interprocess.task_ranges import RangeRequest, ReceiverConfig
    from eventhubs_spark.process.runtime import Runtime

    out["imports: the worker's read path"] = _ms(started)
    settings = parse_connection_string(conn)
    worker = Runtime(reap_every=0)
    started = time.perf_counter()
    client = worker.service()
    assert client is not None
    client._connect()  # starts the service (a process of its own) and waits for it to listen
    out["the receiver service's start (spawn to listening)"] = _ms(started)

    def read(partition: str, start: int, end: int) -> float:
        request = RangeRequest(ReceiverConfig(receiver_timeout=30), partition, start, end, True, settings=settings)
        began = time.perf_counter()
        stats: dict[str, Any] = {}
        rows = sum(b.num_rows for b in worker.read(request, True, stats))
        assert rows == end - start and stats.get("via") == "service", (rows, stats)
        return _ms(began)

    out["its first range (connection, sign-in, link, 100 events)"] = read("0", 0, 100)
    out["another partition's first range (a link on the open connection)"] = read("1", 0, 100)
    out["a range on a warm link (100 events)"] = read("0", 100, 200)
    client.close()
    shutil.rmtree(local, ignore_errors=True)  # the service ends with its directory
    print(json.dumps(out))


def _steps(kind: str, conn: str) -> list[dict[str, float]]:
    samples = []
    for _ in range(STEP_SAMPLES):
        code = f"from bench.first_batch import {kind}; {kind}({conn!r})"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYSPARK_PYTHON": sys.executable})  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{kind}: {done.stderr[-3000:]}")
        samples.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return samples


def _medians(samples: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(s[key] for s in samples), 1) for key in samples[0]}


def run() -> None:
    from eventhubs_emulator import Emulator

    counts = tuple(int(c) for c in os.environ.get("EVENTHUBS_BENCH_PARTITIONS", "").split(",") if c) or COUNTS
    rows: list[dict[str, Any]] = []
    summary: dict[str, Any] = {"target": "a fresh query's first batch at most 1.15x a trivial Python source's, at 4 "
                                         "and 32 partitions (issue 87)"}  # fmt: skip
    with Emulator({f"p{n}": n for n in counts}) as emulator:
        for n in counts:
            _fill(emulator.connection_string(f"p{n}"), n)
            for number in range(1, RUNS + 1):
                for mode in ("default", "floor"):
                    print(f"  {n} partitions, {mode}, run {number} ...", flush=True)
                    row = _run(emulator, f"p{n}", n, mode)
                    rows.append({"partitions": n, "mode": mode, "run": number,
                                 "first batch (ms)": row["first batch (ms)"],
                                 "its phases (ms)": row["first batch's phases (ms)"]})  # fmt: skip
            firsts = {m: [r["first batch (ms)"] for r in rows if r["partitions"] == n and r["mode"] == m]
                      for m in ("default", "floor")}  # fmt: skip
            ours, floor = statistics.median(firsts["default"]), statistics.median(firsts["floor"])
            summary[f"{n} partitions: first batch, ours / trivial source (ms, medians)"] = f"{ours:.0f} / {floor:.0f}"
            summary[f"{n} partitions: ours / trivial"] = round(ours / floor, 2)
            summary[f"{n} partitions: target met"] = ours / floor <= 1.15
            for mode, side in (("default", "ours"), ("floor", "trivial source")):
                phases = [r["its phases (ms)"] for r in rows if r["partitions"] == n and r["mode"] == mode]
                keys = sorted({k for p in phases for k in p})
                summary[f"{n} partitions: {side}'s first batch by Spark's phases (ms, medians)"] = {
                    k: statistics.median(p.get(k, 0) for p in phases) for k in keys}  # fmt: skip
        conn = emulator.connection_string(f"p{counts[-1]}")
        driver = _medians(_steps("driver_steps", conn))
        executor = _medians(_steps("executor_steps", conn))
    summary["the driver's first trigger, step by step (ms, medians)"] = driver
    summary["the executor's first task, step by step (ms, medians)"] = executor
    for step, ms in {**driver, **executor}.items():
        rows.append({"step": step, "ms (median)": ms})
    record("first_batch", summary, rows, notes=(
        f"Each first-batch figure is Spark's triggerExecution of batch 0 in a fresh local[2] process (bench "
        f"defaults' runs: {RUNS} a side and count, interleaved; medians). The steps are each timed in a fresh Python "
        f"process ({STEP_SAMPLES} of each, medians) on the same emulator, outside Spark: in a query the driver's "
        "steps run in Spark's stream runner while Spark starts the query, and the executor's in the first tasks "
        "beside Spark's start of its Python workers, so they overlap with Spark's own part of the first batch "
        "rather than add to it."))  # fmt: skip
