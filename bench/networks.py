"""Read throughput over the transports real namespaces use, beside plain TCP, in one run (issue 25).

The emulator runs in its own process with its plain, AMQPS and WebSocket listeners; one partition
holds 100k events of 200 bytes. The connector's read loop (one receiver, the engine and frame tap,
each chunk decoded into Arrow record batches, as a task does) reads them over each transport in turn,
three rounds interleaved so the machine's drift hits every transport alike, and so does the plain SDK
(``receive_batch``) for reference. Reported per transport: events per second (median), client CPU
per event, and the ratio to plain TCP (targets: TLS at least 0.8, WebSockets at least 0.6). The
emulator's own TLS and WebSocket work runs in its process, on the other core.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time
from typing import Any

from .emulator_sdk import receive_sdk, send_events
from .results import record

EVENTS = 100_000
SIZE = 200
PREFETCH = 2000
ROUNDS = 3
TRANSPORTS = ("tcp", "tls", "websockets")


def _start() -> tuple[subprocess.Popen[str], dict[str, str]]:
    """The emulator with all three listeners; returns it and what the banner says (connection strings,
    endpoints, certificate)."""
    args = [sys.executable, "-m", "eventhubs_emulator", "--port", "0", "--hub", "bench:1", "--tls-port", "0",
            "--websocket-port", "0"]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    found: dict[str, str] = {}
    deadline = time.monotonic() + 30
    while len(found) < 5 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if match := re.search(r"\(1 partitions.*(Endpoint=\S+)", line):
            found["plain"] = match.group(1)
        elif match := re.search(r"^TLS certificate: (\S+);", line):
            found["ca"] = match.group(1)
        elif match := re.search(r"^\s+(Endpoint=sb://\S+;SharedAccessKeyName\S+)$", line):
            found["tls_conn"] = match.group(1)
        elif match := re.search(r"^\s+AMQPS .*customEndpointAddress=(\S+)", line):
            found["tls"] = match.group(1)
        elif match := re.search(r"^\s+AMQP over WebSockets .*customEndpointAddress=(\S+)", line):
            found["websockets"] = match.group(1)
    assert len(found) == 5, f"the emulator's banner lacks a listener: {found}"
    return proc, found


def _options(found: dict[str, str], transport: str) -> dict[str, str]:
    if transport == "tcp":
        return {"eventhubs.connectionString": found["plain"]}
    options = {
        "eventhubs.connectionString": found["tls_conn"],
        "eventhubs.connectionVerify": found["ca"],
        "eventhubs.customEndpointAddress": found[transport],
    }
    if transport == "websockets":
        options["eventhubs.transportType"] = "amqpWebSockets"
    return options


def _read_connector(options: dict[str, str]) -> tuple[float, float, str]:
    """(client CPU seconds, wall seconds, the tap's transport) of one read of every event."""
    from eventhubs_spark.amqp import receive_connections
    from eventhubs_spark.codec.layout import events_batch
    from eventhubs_spark.executor.partition_receiver import PartitionReceiver
    from eventhubs_spark.interprocess.task_ranges import RangeResult, ReceiverConfig
    from eventhubs_spark.options import read_options
    from eventhubs_spark.process.runtime import current

    settings = read_options(options, "batch").settings
    config = ReceiverConfig("$Default", PREFETCH, 30.0, True, read_ahead_events=10 * PREFETCH)
    receiver = PartitionReceiver(settings, config, "0", current().connections)
    started, cpu = time.perf_counter(), time.process_time()
    try:
        rows = sum(events_batch(c, "0")[0].num_rows for c in receiver.read_range(0, EVENTS, True, RangeResult()))
        wall, used = time.perf_counter() - started, time.process_time() - cpu
        connection = current().connections._by_key.get(receive_connections.Connections.key(settings))
        tap = connection._tap if connection is not None else None
        name = tap.transport_name + (" (frame by frame)" if tap._by_frame else "") if tap is not None else "?"
    finally:
        receiver.close()
    assert rows == EVENTS, rows
    return used, wall, name


def _read_sdk(found: dict[str, str], transport: str) -> tuple[float, float]:
    from azure.eventhub import TransportType

    kwargs: dict[str, Any] = {}
    conn = found["plain"]
    if transport != "tcp":
        conn = found["tls_conn"]
        kwargs = {
            "connection_verify": found["ca"],
            "custom_endpoint_address": found[transport],
            "transport_type": TransportType.AmqpOverWebsocket if transport == "websockets" else TransportType.Amqp,
        }
    started, cpu = time.perf_counter(), time.process_time()
    rows = receive_sdk(conn, EVENTS, PREFETCH, **kwargs)[1]
    assert rows >= EVENTS, rows
    return time.process_time() - cpu, time.perf_counter() - started


def run() -> None:
    proc, found = _start()
    try:
        send_events(found["plain"], EVENTS, SIZE)
        connector: dict[str, list[tuple[float, float]]] = {t: [] for t in TRANSPORTS}
        sdk: dict[str, list[tuple[float, float]]] = {t: [] for t in TRANSPORTS}
        names: dict[str, str] = {}
        for _ in range(ROUNDS):
            for transport in TRANSPORTS:
                used, wall, names[transport] = _read_connector(_options(found, transport))
                connector[transport].append((used, wall))
        for transport in TRANSPORTS:  # once each: a reference, not a target
            sdk[transport].append(_read_sdk(found, transport))
    finally:
        proc.terminate()
        proc.wait(10)

    def rate(runs: list[tuple[float, float]]) -> float:
        return EVENTS / statistics.median(w for _, w in runs)

    def cpu_us(runs: list[tuple[float, float]]) -> float:
        return statistics.median(c for c, _ in runs) / EVENTS * 1e6

    plain = rate(connector["tcp"])
    rows = []
    for transport in TRANSPORTS:
        rows.append(
            {
                "transport": transport,
                "read by": names[transport],
                "connector events/s (median)": rate(connector[transport]),
                "vs plain TCP": rate(connector[transport]) / plain,
                "connector CPU us/event": cpu_us(connector[transport]),
                "runs (s)": ", ".join(f"{w:.2f}" for _, w in connector[transport]),
                "SDK events/s": rate(sdk[transport]),
                "SDK CPU us/event": cpu_us(sdk[transport]),
            }
        )
    by = {r["transport"]: r for r in rows}
    record(
        "networks",
        {
            "TLS vs plain TCP (target >= 0.8)": round(by["tls"]["vs plain TCP"], 2),
            "WebSockets vs plain TCP (target >= 0.6)": round(by["websockets"]["vs plain TCP"], 2),
            "connector vs SDK, TLS": round(by["tls"]["connector events/s (median)"] / by["tls"]["SDK events/s"], 2),
            "connector vs SDK, WebSockets": round(
                by["websockets"]["connector events/s (median)"] / by["websockets"]["SDK events/s"], 2
            ),
        },
        rows,
        notes=(
            f"{EVENTS} events of {SIZE} bytes in one partition, read whole by one receiver into Arrow record "
            f"batches (prefetch {PREFETCH}), {ROUNDS} rounds over the transports interleaved; the emulator "
            "(its own process) serves all three listeners and pays its side of TLS and WebSocket framing. "
            "CPU is this process's (the reader thread and the decoding)."
        ),
    )
