"""Where a stream starts by enqueued time: every partition's first event after that time, found at 32 and 1,024
partitions (issue 64: start positions are per-partition lookups; Event Hubs has no call that answers them).

Three ways, taking turns each round on the same hub (events enqueued on both sides of the time):

- ``shared connection``: the connector as it ships (planning/position_lookup.py): a link a partition on the
  process's one connection, all attached at once, credit for one event each;
- ``a receiver each``: the connector before (kept as its fallback): an SDK receiver and a connection of its own a
  partition, 16 at a time;
- ``plain SDK``: what a hand-written consumer does, ``EventHubConsumerClient.receive(starting_position=time)`` over
  every partition, until an event came from each (its load balancer claims the partitions first; the time until
  the last partition's first event).

The emulator runs in its own process. The ratio the issue asks for: the shared connection against the plain SDK.
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import threading
import time
from typing import Any

from .emulator_sdk import start_emulator
from .partitions import _fill
from .results import record

COUNTS = tuple(int(c) for c in os.environ.get("EVENTHUBS_BENCH_LOOKUPS", "32,1024").split(","))
ROUNDS = 3
SDK_WAIT = 600.0  # seconds the plain SDK is given to find every partition's first event
SDK_ROUNDS_UP_TO = 256  # above this many partitions the plain SDK takes one round, not ROUNDS


def _connector(conn: str, when: dt.datetime, shared: bool) -> tuple[float, dict[str, int]]:
    from eventhubs_spark.planning import position_lookup
    from eventhubs_spark.positions.event_positions import EnqueuedTime
    from eventhubs_spark.source.planner import plan_reading

    planner = plan_reading({"eventhubs.connectionString": conn}, "stream", None, None, None)[0]
    infos = planner.partition_infos(0.0)
    original = position_lookup._first_positions
    if not shared:
        position_lookup._first_positions = lambda *args: {}  # type: ignore[assignment]
    try:
        started = time.monotonic()
        found = position_lookup.resolve(planner.settings, planner.config, infos,
                                         {p: EnqueuedTime(when) for p in infos}, 120.0)  # fmt: skip
        return time.monotonic() - started, found
    finally:
        position_lookup._first_positions = original


def _sdk(conn: str, when: dt.datetime, partitions: int) -> tuple[float, dict[str, int]]:
    from azure.eventhub import EventHubConsumerClient

    found: dict[str, int] = {}
    done = threading.Event()
    lock = threading.Lock()

    def on_event(context: Any, event: Any) -> None:
        if event is None:
            return
        with lock:
            found.setdefault(context.partition_id, event.sequence_number)
            if len(found) == partitions:
                done.set()

    client = EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default")
    started = time.monotonic()
    thread = threading.Thread(target=client.receive, kwargs={"on_event": on_event, "starting_position": when,
                                                             "prefetch": 1}, daemon=True)  # fmt: skip
    thread.start()
    done.wait(SDK_WAIT)
    took = time.monotonic() - started
    client.close()
    thread.join(60)
    return took, found


def run() -> None:
    proc, conns = start_emulator({f"s{n}": n for n in COUNTS})
    rows: list[dict[str, Any]] = []
    sdk_short: dict[int, str] = {}
    try:
        for n in COUNTS:
            conn = conns[f"s{n}"]
            _fill(conn, n, 4 * n, b"before")
            time.sleep(1.1)
            when = dt.datetime.now(dt.timezone.utc)
            time.sleep(1.1)
            _fill(conn, n, 4 * n, b"after")
            expected = {str(p): 4 for p in range(n)}  # four events each side of the time
            times: dict[str, list[float]] = {"shared connection": [], "a receiver each": [], "plain SDK": []}
            for round_ in range(ROUNDS):
                for way in times:
                    if way == "plain SDK" and n > SDK_ROUNDS_UP_TO and round_:
                        continue  # minutes a round at 1,024 partitions: one is enough to compare with
                    if way == "plain SDK":
                        took, found = _sdk(conn, when, n)
                        if found != expected:  # said in the record, not asserted: the reference, not ours
                            sdk_short[n] = f"found {len(found)} of {n} partitions' events within {SDK_WAIT:g} s"
                            continue
                    else:
                        took, found = _connector(conn, when, way == "shared connection")
                        assert found == expected, f"{way} at {n} partitions found {sorted(found.items())[:5]}..."
                    times[way].append(took)
            row: dict[str, Any] = {"partitions": n}
            for way, seconds in times.items():
                row[f"{way} (s, median)"] = round(statistics.median(seconds), 3) if seconds else sdk_short[n]
            sdk = row["plain SDK (s, median)"]
            row["shared / plain SDK"] = (
                round(row["shared connection (s, median)"] / sdk, 3) if times["plain SDK"] else None
            )
            row["shared / a receiver each"] = round(
                row["shared connection (s, median)"] / row["a receiver each (s, median)"], 3
            )
            rows.append(row)
            print(f"  {n} partitions: {row}", flush=True)
    finally:
        proc.terminate()
        proc.wait(30)
    top = rows[-1]
    record(
        "start_lookups",
        {
            "target": "a stream's start by enqueued time found no slower than the plain SDK finds it (ratio <= 1)",
            f"shared connection / plain SDK at {COUNTS[-1]} partitions": top["shared / plain SDK"],
            f"shared connection / a receiver each at {COUNTS[-1]} partitions": top["shared / a receiver each"],
            "target met": all(r["shared / plain SDK"] is not None and r["shared / plain SDK"] <= 1.0 for r in rows),
        },
        rows,
        notes=(
            f"Medians of {ROUNDS} rounds (the plain SDK one above {SDK_ROUNDS_UP_TO} partitions), the three ways "
            "taking turns on the same hub (four events a partition each side of the time; every way must find the "
            "first after it in every partition). The emulator runs in a process of its own; each way's time is from "
            "the call to the last partition's answer."
        ),
    )
