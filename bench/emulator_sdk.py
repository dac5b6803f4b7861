"""Events per second the plain SDK sends to and receives from the emulator, and who spends the CPU.

The emulator runs as its own process (``python -m eventhubs_emulator``), as a user would run
it, so the SDK client and the server do not share a GIL. CPU seconds of both processes are read from
``/proc`` around each phase: the figure that matters is the emulator's share, which shows whether the
SDK client (the intended bottleneck) or the server limits throughput.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from typing import Any

from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient

from .results import record

HUB = "bench"
PARTITIONS = 4


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def _start_emulator() -> tuple[subprocess.Popen[str], str]:
    proc, conns = start_emulator({HUB: PARTITIONS})
    return proc, conns[HUB]


def start_emulator(
    hubs: dict[str, int], consumer_groups: tuple[str, ...] = (), tree: str | None = None
) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """The emulator in its own process with these hubs (each with ``$Default`` and ``consumer_groups``);
    returns it and each hub's connection string. ``tree``: a checkout whose emulator runs instead of this one's
    (bench ab_read's variants)."""
    args = [sys.executable, "-m", "eventhubs_emulator", "--port", "0"]
    if consumer_groups:
        import json
        import tempfile

        entities = [
            {"Name": name, "PartitionCount": partitions, "ConsumerGroups": [{"Name": g} for g in consumer_groups]}
            for name, partitions in hubs.items()
        ]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as config:
            json.dump({"UserConfig": {"NamespaceConfig": [{"Name": "bench", "Entities": entities}]}}, config)
        args += ["--config", config.name]
    else:
        for name, partitions in hubs.items():
            args += ["--hub", f"{name}:{partitions}"]
    env = None if tree is None else {**os.environ, "PYTHONPATH": tree}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, cwd=tree, env=env)
    assert proc.stdout is not None
    proc.stdout.readline()
    conns = {}
    for _ in hubs:
        line = proc.stdout.readline()
        match = re.search(r"^\s*(\S+) \(.*(Endpoint=\S+)", line)
        assert match, f"the emulator did not print a connection string: {line!r}"
        conns[match.group(1)] = match.group(2)
    return proc, conns


def send_events(conn: str, events: int, size: int, round_robin: bool = False) -> float:
    """Send with full ``send_batch`` batches: all to partition 0, or round-robin over the partitions."""
    body = b"x" * size
    with EventHubProducerClient.from_connection_string(conn) as producer:
        ids = producer.get_partition_ids() if round_robin else ["0"]
        started = time.perf_counter()
        sent, turn = 0, 0
        while sent < events:
            batch = producer.create_batch(partition_id=ids[turn % len(ids)])
            turn += 1
            while sent < events:
                try:
                    batch.add(EventData(body))
                except ValueError:
                    break
                sent += 1
            producer.send_batch(batch)
        return time.perf_counter() - started


def receive_sdk(
    conn: str, events: int, prefetch: int, consumer_group: str = "$Default", **client_options: Any
) -> tuple[float, int]:
    """The plain SDK's ``receive_batch`` reading ``events`` of partition 0 from the start: (seconds from
    its first batch, events received). ``client_options`` go to the client (transport, endpoint...)."""
    client = EventHubConsumerClient.from_connection_string(conn, consumer_group=consumer_group, **client_options)
    count = 0
    done = threading.Event()
    started = 0.0

    def on_batch(ctx: Any, batch: list[Any]) -> None:
        nonlocal count, started
        if not started:
            started = time.perf_counter()
        count += len(batch)
        if count >= events:
            done.set()

    thread = threading.Thread(
        target=client.receive_batch,
        kwargs={
            "on_event_batch": on_batch,
            "partition_id": "0",
            "starting_position": "-1",
            "prefetch": prefetch,
            "max_batch_size": prefetch,
            "max_wait_time": 1,
        },
        daemon=True,
    )
    thread.start()
    done.wait(600)
    elapsed = time.perf_counter() - started  # from the first batch: connection set-up excluded
    client.close()
    thread.join(30)
    return elapsed, count


def run(events: int = 100_000, size: int = 200) -> None:
    proc, conn = _start_emulator()
    me = os.getpid()
    rows = []
    try:
        conn_hub = conn
        # send: every batch to partition 0, so the receive phase can read them all from one partition
        server0, client0 = _cpu_seconds(proc.pid), _cpu_seconds(me)
        elapsed = send_events(conn_hub, events, size)
        server1, client1 = _cpu_seconds(proc.pid), _cpu_seconds(me)
        rows.append(_row("send_batch", events, elapsed, server1 - server0, client1 - client0))
        in_partition = events
        for prefetch in (300, 2000):
            server0, client0 = _cpu_seconds(proc.pid), _cpu_seconds(me)
            elapsed, _count = receive_sdk(conn_hub, in_partition, prefetch)
            server1, client1 = _cpu_seconds(proc.pid), _cpu_seconds(me)
            rows.append(
                _row(f"receive_batch prefetch={prefetch}", in_partition, elapsed, server1 - server0, client1 - client0)
            )
    finally:
        proc.terminate()
        proc.wait(30)
    best_receive = max(r["events/s"] for r in rows if r["operation"].startswith("receive"))
    record(
        "emulator_sdk",
        {
            "events": events,
            "event size (bytes)": size,
            "SDK send_batch events/s": round(rows[0]["events/s"]),
            "SDK receive_batch events/s (best prefetch)": round(best_receive),
            "emulator CPU per event, receive (µs)": rows[-1]["emulator µs/event"],
            "SDK client CPU per event, receive (µs)": rows[-1]["client µs/event"],
        },
        rows,
        notes=(
            "The emulator runs in its own process. 'emulator µs/event' and 'client µs/event' are CPU "
            "time per event of each process during the phase; where the client's figure is the larger "
            "one, the SDK, not the emulator, is the bottleneck."
        ),
    )


def _row(op: str, events: int, elapsed: float, server_cpu: float, client_cpu: float) -> dict[str, Any]:
    return {
        "operation": op,
        "events": events,
        "seconds": round(elapsed, 2),
        "events/s": events / elapsed,
        "emulator µs/event": round(server_cpu / events * 1e6, 1),
        "client µs/event": round(client_cpu / events * 1e6, 1),
    }
