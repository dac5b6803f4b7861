"""Planning: one trigger's offset planning against one partition-properties call of the plain SDK.

The stream reader is driven in-process as Spark's runner drives it: ``latestOffset(start, limit)``
then ``partitions(start, end)``, with fresh events in every partition each trigger so the plan is
never empty. The SDK figure is the median of ``get_partition_properties`` on a warm client (its
connection open), the cheapest management call a hand-written consumer makes per partition.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from .emulator_sdk import start_emulator
from .read import fill
from .results import record

SIZES = (4, 32, 100)
ROUNDS = 30


def _sdk_call_seconds(conn: str) -> float:
    from azure.eventhub import EventHubConsumerClient

    with EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default") as client:
        client.get_partition_properties("0")  # warm: connection and management link open
        times = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            client.get_partition_properties("0")
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def _one_request_seconds(conn: str) -> float:
    """One partition's properties on the connector's own kept-open management link (the floor)."""
    from eventhubs_spark.auth.settings import parse_connection_string
    from eventhubs_spark.executor.runtime import current

    client = current().management(parse_connection_string(conn), 60.0)
    client.partition_properties(["0"])
    times = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        client.partition_properties(["0"])
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _plan_seconds(conn: str) -> float:
    from eventhubs_spark.source import EventHubsStreamReader

    reader = EventHubsStreamReader(
        {"eventhubs.connectionString": conn, "eventhubs.startingPosition": '{"offset": "-1"}'}
    )
    start = reader.initialOffset()
    limit: Any = reader.getDefaultReadLimit() if hasattr(reader, "getDefaultReadLimit") else None
    times = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        end = reader.latestOffset(start, limit) if limit is not None else reader.latestOffset()
        reader.partitions(start, end)
        times.append(time.perf_counter() - started)
        reader.commit(end)
        start = end
    return statistics.median(times)


def run() -> None:
    proc, conns = start_emulator({f"plan{n}": n for n in SIZES})
    rows = []
    try:
        for n in SIZES:
            conn = conns[f"plan{n}"]
            fill(conn, n * 50, 100)
            sdk = _sdk_call_seconds(conn)
            floor = _one_request_seconds(conn)
            plan = _plan_seconds(conn)
            rows.append({"partitions": n, "one SDK call (ms)": sdk * 1e3, "one request, open link (ms)": floor * 1e3,
                         "one trigger's planning (ms)": plan * 1e3, "ratio to the SDK call": round(plan / sdk, 2),
                         "ratio to one open-link request": round(plan / floor, 1)})  # fmt: skip
            print(rows[-1], flush=True)
    finally:
        proc.terminate()
        proc.wait(30)
    at_100 = rows[-1]["ratio to the SDK call"]
    record(
        "planning",
        {
            "target": "planning <= 2x one partition-properties call at 100 partitions",
            "ratio at 100 partitions": at_100,
            "target met": at_100 <= 2.0,
        },
        rows,
        notes=(
            f"Medians of {ROUNDS} rounds. Planning is latestOffset + partitions of EventHubsStreamReader driven "
            "in-process; it asks every partition's properties over one kept-open management link, concurrently. "
            "The SDK's get_partition_properties opens a management link (and authenticates) for every call, "
            "which is most of its time; 'one request, open link' is the floor: a single partition's properties "
            "on the connector's already-open link. Planning grows with the partition count because each partition "
            "is one request (the service has no batch call); the requests are pipelined on one connection."
        ),
    )
