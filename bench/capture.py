"""Reading history from Event Hubs Capture files against reading the same events from the hub (issue 48).

One hub of 4 partitions is filled with 1,000,000 events of 200 bytes; the emulator (a process of its own) captures
them into a blob container in Azurite as the service does (files closed by a 32 MiB size window). Then, in one
Spark ``local[2]`` session, warmed up first:

* from the hub: ``spark.readStream.format("eventhubs")`` from the earliest event, ``Trigger.AvailableNow`` into
  ``noop``, one micro-batch (as bench ``read``), while the hub still holds every event;
* from Capture: the same query with ``eventhubs.capture.*`` after the hub's retention has taken every event, so
  each one comes from the files (the namespace sends none: checked).

Each side runs ``EVENTHUBS_BENCH_REPEATS`` times (default 3) and the medians are compared: whole-query events/s,
events/s inside the micro-batch (Spark's addBatch), and the executor's Python CPU per event.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any

from .ceiling import register, replay_drain
from .read import connector_drain, executor_python_cpu, fill, local_spark, warm_up
from .results import record

EVENTS = int(os.environ.get("EVENTHUBS_BENCH_CAPTURE_EVENTS", "1000000"))
SIZE = 200
PARTITIONS = 4
REPEATS = int(os.environ.get("EVENTHUBS_BENCH_REPEATS", "3"))
CONTAINER = "bench-capture"
TARGET = "reading history from Capture files >= 2x the events/s of reading the same events from the hub; executor " \
         "CPU per event <= the hub's (issue 48)"  # fmt: skip


def serve(storage: str) -> None:
    """The emulator with Capture into ``storage``'s container, driven by lines on stdin (``flush``, ``trim HUB``,
    ``sent HUB``, ``quit``), answering each with one line: the bench's handle on a process of its own."""
    from eventhubs_emulator import Emulator

    capture = {"destination": "blob", "connection_string": storage, "container": CONTAINER, "window_seconds": 3600,
               "window_bytes": 32 << 20, "hubs": ("hist",)}  # fmt: skip
    with Emulator({"hist": PARTITIONS, "warmup": 4}, capture=capture) as emu:
        print(json.dumps({h: emu.connection_string(h) for h in ("hist", "warmup")}), flush=True)
        for line in sys.stdin:
            command, *args = line.split()
            if command == "flush":
                files = emu.capture_flush()
                print(json.dumps({"files": len(emu.captured_files), "flushed": len(files)}), flush=True)
            elif command == "trim":
                for p in range(PARTITIONS):
                    end = emu.partition_properties(args[0], p)["last_enqueued_sequence_number"] + 1
                    emu.trim(args[0], p, end)
                print("{}", flush=True)
            elif command == "sent":
                print(json.dumps(emu.events_sent(args[0])), flush=True)
            else:
                return


class _Server:
    def __init__(self, storage: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.capture", "serve", storage], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)  # fmt: skip
        self.conns: dict[str, str] = self._answer()

    def _answer(self) -> Any:
        assert self.proc.stdout is not None
        return json.loads(self.proc.stdout.readline())

    def ask(self, line: str) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(60)


def _timed(spark: Any, conn: str, tmp: str, name: str, **options: str) -> tuple[float, float, float]:
    """(seconds, seconds in the batch, executor Python CPU seconds) of one read of every event."""
    before = executor_python_cpu()
    elapsed, in_batch = connector_drain(spark, conn, EVENTS, os.path.join(tmp, name), **options)
    return elapsed, in_batch, executor_python_cpu() - before


def run() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests.conftest import Azurite

    azurite = Azurite()
    server = _Server(azurite.connection_string)
    spark = local_spark()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            warm_up(spark, server.conns["warmup"], tmp)
            conn = server.conns["hist"]
            fill(conn, EVENTS, SIZE)
            hub = [_timed(spark, conn, tmp, f"hub-{i}") for i in range(REPEATS)]
            files = server.ask("flush")["files"]
            server.ask("trim hist")
            options = {"eventhubs.capture.location": f"{azurite.account_url}/{CONTAINER}",
                       "eventhubs.capture.connectionString": azurite.connection_string,
                       "eventhubs.capture.namespace": "emulator"}  # fmt: skip
            sent = server.ask("sent hist")
            captured = [_timed(spark, conn, tmp, f"capture-{i}", **options) for i in range(REPEATS)]
            if server.ask("sent hist") != sent:
                raise RuntimeError("the namespace sent events while the history was read from Capture")
            # what any Python source could reach here: ready Arrow batches of the same schema and sizes, no I/O
            register(spark)
            ceiling = [replay_drain(spark, SIZE, os.path.join(tmp, f"ceiling-{i}"), EVENTS) for i in range(REPEATS)]
    finally:
        spark.stop()
        server.close()
        azurite.stop()

    def medians(runs: list[tuple[float, float, float]]) -> tuple[float, float, float]:
        return tuple(statistics.median(r[i] for r in runs) for i in range(3))  # type: ignore[return-value]

    hub_s, hub_batch, hub_cpu = medians(hub)
    cap_s, cap_batch, cap_cpu = medians(captured)
    rows = [
        {"read": name, "events": EVENTS, "events/s": round(EVENTS / s), "seconds": round(s, 2),
         "events/s in the batch": round(EVENTS / b) if b else None, "executor CPU µs/event": round(c / EVENTS * 1e6, 2),
         "runs (s)": ", ".join(f"{r[0]:.2f}" for r in runs)}
        for name, s, b, c, runs in (("from the hub", hub_s, hub_batch, hub_cpu, hub),
                                    ("from Capture files in Azurite", cap_s, cap_batch, cap_cpu, captured))
    ]  # fmt: skip
    ceiling_s, ceiling_batch = (statistics.median(r[i] for r in ceiling) for i in range(2))
    rows.append({"read": "Spark's ceiling: a Python source handing over ready Arrow batches (bench ceiling)",
                 "events": EVENTS, "events/s": round(EVENTS / ceiling_s), "seconds": round(ceiling_s, 2),
                 "events/s in the batch": round(EVENTS / ceiling_batch) if ceiling_batch else None,
                 "executor CPU µs/event": None, "runs (s)": ", ".join(f"{r[0]:.2f}" for r in ceiling)})  # fmt: skip
    ratio = hub_s / cap_s
    cpu_ratio = cap_cpu / hub_cpu if hub_cpu else float("nan")
    summary = {
        "target": TARGET,
        "capture / hub, whole query (events/s)": round(ratio, 2),
        "capture / hub, in the batch (events/s)": round(hub_batch / cap_batch, 2) if cap_batch else None,
        "capture / hub, executor CPU per event": round(cpu_ratio, 2),
        "target met": bool(ratio >= 2.0 and cpu_ratio <= 1.0),
        "Spark's ceiling / hub, whole query (the most any Python source reaches here)": round(hub_s / ceiling_s, 2),
        "Capture files": files,
    }
    notes = (f"{PARTITIONS} partitions, {SIZE}-byte events, local[2], one Trigger.AvailableNow batch into noop, "
             f"medians of {REPEATS} runs a side; the emulator (its own process) captured into Azurite with a 32 MiB "
             "size window, then its retention took every event, so the second side reads only files (the namespace "
             "sent none). Executor CPU: Spark's Python workers and the receiver service. The third row reads the "
             "ceiling source of bench ceiling in the same session (ready record batches of the connector's schema "
             "and sizes, no I/O, no decoding): what Spark itself takes for the same rows, start-up included, so "
             "'Spark's ceiling / hub' bounds what any source, Capture included, can reach against the hub "
             "here.")  # fmt: skip
    record("capture", summary, rows, notes)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "serve":
        serve(sys.argv[2])
