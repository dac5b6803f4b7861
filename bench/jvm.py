"""Bench ``jvm`` (issue 47): the old Scala connector (azure-event-hubs-spark 2.3.22 on Spark 3.5.9, the JVM
connector users migrate from) beside this connector (on the newest Spark), one run, one emulator, the same events.

Each case is a hub of its own (4 or 32 partitions, 200 B or 2 KB events, ``EVENTHUBS_JVM_EVENTS`` events, 200,000
by default: runs at the issue's million and at 200,000 ended without a result, the old connector's reads idling for
minutes on this emulator, see the closing note of 2026-11-26) read
whole by a batch query into Spark's ``noop`` sink, ``local[2]``: the query's wall time (planning
included) and the CPU of the whole Spark application (its JVM and every process below it: Python workers, the
receiver service), measured the same way for both. The old connector reads over TLS on 5671 (the only way it
connects); ours over plain AMQP, as the other benches (bench ``networks`` has TLS at 0.9 of plain TCP here).
``python -m bench jvm``; needs java, mvn and keytool (see tests/jvm_peers.py), which fill ``.jvm/`` and
``.venv-spark3.5`` on first use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .read import fill
from .results import record

CASES = ((4, 200), (32, 200), (4, 2048), (32, 2048))
EVENTS = int(os.environ.get("EVENTHUBS_JVM_EVENTS", "200000"))
ROOT = Path(__file__).resolve().parents[1]


def _old_app() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("old_app", ROOT / "tests" / "jvm" / "old_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ours(plan_file: str, out_file: str) -> None:
    """This connector's side, in a process of its own (so its CPU is its application's alone)."""
    from eventhubs_spark.localspark import local_session

    plan = json.loads(Path(plan_file).read_text())
    spark = local_session(
        "bench-jvm", **{"spark.master": "local[2]", "spark.ui.enabled": "false", "spark.driver.memory": "4g"}
    )  # as the old connector's (fmt: skip)
    tree_cpu = _old_app().tree_cpu
    results = {}
    for name, conn in plan["hubs"].items():
        df = (
            spark.read.format("eventhubs").option("eventhubs.connectionString", conn)
            .option("eventhubs.startingPosition", '{"offset": "-1"}').load()
        )  # fmt: skip
        cpu, began = tree_cpu(), time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        results[name] = {"seconds": time.perf_counter() - began, "cpu_seconds": tree_cpu() - cpu}
        print(name, results[name], flush=True)
    spark.stop()
    Path(out_file).write_text(json.dumps(results))


def run() -> None:
    from eventhubs_emulator.tls import generate
    from tests import jvm_peers

    lacking = jvm_peers.missing()
    if lacking:
        print(f"bench jvm skipped: it {lacking}")
        return
    host = jvm_peers.loopback_address(5671)  # the old connector's only port
    where = Path(tempfile.mkdtemp(prefix="bench-jvm-"))
    cert = generate(host, str(where))
    hubs = {f"c{p}x{size}": p for p, size in CASES}
    warm = "warm"  # read first by each side and not recorded: the JVM's and the workers' first query
    args = [sys.executable, "-m", "eventhubs_emulator", "--host", host, "--port", "0", "--tls-port", "5671",
            "--cert", cert.cert_file, "--cert-key", cert.key_file]  # fmt: skip
    for name, partitions in {warm: 4, **hubs}.items():
        args += ["--hub", f"{name}:{partitions}"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        conns: dict[str, str] = {}
        while len(conns) < len(hubs) + 1:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("the emulator ended before it printed its connection strings")
            for name in (warm, *hubs):
                if line.strip().startswith(f"{name} ") and "UseDevelopmentEmulator" in line:
                    conns[name] = line[line.index("Endpoint=") :].split()[0]
        fill(conns[warm], 20_000, 200)
        for (_, size), name in zip(CASES, hubs, strict=True):
            started = time.perf_counter()
            fill(conns[name], EVENTS, size)
            print(f"{name}: {EVENTS} events in {time.perf_counter() - started:.0f} s", flush=True)
        namespace = f"Endpoint=sb://{host};SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE"
        plan = {"connection_string": f"{namespace};EntityPath={next(iter(hubs))}", "namespace": namespace,
                "driver_memory": "4g",
                "trust_store": jvm_peers.trust_store(cert.ca_file, where),
                "steps": [{"do": "time", "name": name, "hub": name} for name in (warm, *hubs)]}  # fmt: skip
        old = jvm_peers.run_old(plan, where, timeout=3600)
        print({"old": old}, flush=True)
        (where / "ours-plan.json").write_text(json.dumps({"hubs": {warm: conns[warm], **{n: conns[n] for n in hubs}}}))
        subprocess.run([sys.executable, "-m", "bench.jvm", str(where / "ours-plan.json"), str(where / "ours.json")],
                       cwd=ROOT, check=True, timeout=3600)  # fmt: skip
        new = json.loads((where / "ours.json").read_text())
    finally:
        proc.terminate()
        proc.wait(30)
    rows = []
    for (partitions, size), name in zip(CASES, hubs, strict=True):
        o, n = old[name], new[name]
        rows.append({
            "partitions": partitions, "event bytes": size, "events": EVENTS,
            "old connector events/s": round(EVENTS / o["seconds"]), "ours events/s": round(EVENTS / n["seconds"]),
            "ours / old": round(o["seconds"] / n["seconds"], 2),
            "old CPU per event (µs)": round(o["cpu_seconds"] / EVENTS * 1e6, 2),
            "ours CPU per event (µs)": round(n["cpu_seconds"] / EVENTS * 1e6, 2),
            "CPU ours / old": round(n["cpu_seconds"] / o["cpu_seconds"], 2),
        })  # fmt: skip
        print(rows[-1], flush=True)
    throughput_met = all(r["ours / old"] >= (1.5 if r["partitions"] >= 32 else 1.0) for r in rows)
    cpu_200 = max(r["CPU ours / old"] for r in rows if r["event bytes"] == 200)
    record(
        "jvm",
        {
            "target": "whole query: ours >= 1.0x the old Scala connector's events/s in every case, >= 1.5x at 32 "
            "partitions; CPU per event within 3x of its at 200 B (issue 47)",
            "worst ratio, ours / old (events/s)": min(r["ours / old"] for r in rows),
            "CPU per event, ours / old, 200 B (worst)": cpu_200,
            "target met": throughput_met and cpu_200 <= 3.0,
        },
        rows,
        notes=(
            f"One run, one emulator process: {EVENTS:,} events per case, each case a hub of its own, filled once by "
            "the SDK. Each connector's batch query (local[2], into Spark's noop sink) reads the whole hub, timed "
            "from the write's call to its end; the old connector (azure-event-hubs-spark 2.3.22, Spark 3.5.9, "
            "Scala 2.12, all four cases in one application) over TLS on 5671, ours (the newest Spark) over plain "
            "AMQP. CPU: the Spark application's JVM and every process below it, plus the receiver service, from "
            "/proc, over the query. Not yet beside Spark's Kafka source (no broker run here yet)."
        ),
    )


if __name__ == "__main__":
    ours(sys.argv[1], sys.argv[2])
