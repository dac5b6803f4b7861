"""Where a read's microseconds go, and which decoder serves the hot path (issue 16).

Three parts, on 200-byte events (every other one with three application properties, as a typical
telemetry event has), the emulator in its own process:

1. **The read loop, whole.** Client CPU per event of one receiver reading 100k events into Arrow
   batches (the engine: frames cut from 256 KiB socket reads, each message kept with its sequence
   number; each chunk decoded column by column into a record batch), against the plain SDK consumer
   (``receive_batch``) reading the same events into ``EventData`` in the same run.
2. **Its stages.** cProfile's cumulative times of the same loop (inflated by the profiler, so read as
   shares) split into socket reads, cutting frames, the SDK's part (link and session counters, flow,
   its ``listen``), keeping each message, and decoding the chunks into record batches. Parts 1 and 2 are
   also measured for the read path's files as at an earlier commit (``EVENTHUBS_PROFILE_BEFORE``, its
   files ``EVENTHUBS_PROFILE_PATHS``), in a worktree's process on the same emulator and events, so a
   change to the read path shows stage by stage (issue 50).
3. **The decoders, side by side.** The transfer payloads of that stream, captured once, decoded to
   the same record batches by each candidate: the SDK's own pure-Python decoder (what the connector
   used before), the connector's batch decoder and its message-by-message decoder, the SDK's optional
   uamqp transport (C), and Apache Qpid Proton's Python binding (C). A candidate that cannot be
   installed here is recorded as such.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .emulator_sdk import receive_sdk, start_emulator
from .results import record

EVENTS = 100_000
BODY = b"x" * 200
PREFETCH = 2000


def _fill(conn: str) -> None:
    from azure.eventhub import EventData, EventHubProducerClient

    with EventHubProducerClient.from_connection_string(conn) as producer:
        sent = 0
        while sent < EVENTS:
            batch = producer.create_batch(partition_id="0")
            while sent < EVENTS:
                event = EventData(BODY)
                if sent % 2:
                    event.properties = {"device": f"dev-{sent % 7}", "n": sent, "ok": True}
                try:
                    batch.add(event)
                except ValueError:
                    break
                sent += 1
            producer.send_batch(batch)


def _read_connector(conn: str) -> int:
    from eventhubs_spark.auth.settings import parse_connection_string
    from eventhubs_spark.codec.layout import events_batch
    from eventhubs_spark.executor.partition_receiver import PartitionReceiver
    from eventhubs_spark.interprocess.task_ranges import RangeResult, ReceiverConfig
    from eventhubs_spark.process.runtime import current

    config = ReceiverConfig("$Default", PREFETCH, 30.0, True, read_ahead_events=10 * PREFETCH)
    receiver = PartitionReceiver(parse_connection_string(conn), config, "0", current().connections)
    rows = 0
    try:
        # the task's own way from a receiver's chunks to record batches (decoded a batch at a time)
        for chunk in receiver.read_range(0, EVENTS, True, RangeResult()):
            batch, fallbacks = events_batch(chunk, "0")
            rows += batch.num_rows
            _FALLBACKS.append(fallbacks)  # events the SDK's slow decoder made (the task's log says fallbacks=)
        return rows
    finally:
        receiver.close()


_FALLBACKS: list[int] = []


def _read_sdk(conn: str) -> int:
    return receive_sdk(conn, EVENTS, PREFETCH, consumer_group="sdk")[1]


def _cpu(read: Any, conn: str) -> tuple[float, float, int]:
    started, cpu = time.perf_counter(), time.process_time()
    rows = read(conn)
    return time.process_time() - cpu, time.perf_counter() - started, rows


# stage: the (file, function) pairs whose cumulative times add up to it (none calls another of its stage)
_FUNCS = {
    "task": [("receiver.py", "read_range")],  # the task's thread: waiting, taking chunks
    "batches": [("layout.py", "decode_spans")],  # the task's thread: decoding a chunk into a record batch
    "reader": [("receive_connections.py", "_run")],  # the reader thread, whole
    "listen": [("_connection.py", "listen")],  # the reader thread: the SDK's loop around the tap
    "frames": [("frame_reader.py", "receive_frame")],
    "socket": [("frame_reader.py", "_fill")],
    # the sequence numbers and keeping the bytes: of a run of transfers taken in one pass, of one transfer
    "decode": [("frame_reader.py", "_sequences"), ("messages.py", "add_run"), ("frame_reader.py", "_decode")],
    "wait": [("select", "select")],  # the reader thread waiting for bytes (idle, not CPU)
}


def _add(out: dict[str, float], profiler: cProfile.Profile) -> None:
    raw: Any = getattr(pstats.Stats(profiler), "stats", {})
    for (filename, _line, name), (_cc, _nc, _tt, cumulative, _callers) in raw.items():
        for stage, funcs in _FUNCS.items():
            for file_part, func in funcs:
                if file_part == "select":
                    hit = name == "<built-in method select.select>"
                else:
                    hit = name == func and filename.endswith(file_part)
                if hit:
                    out[stage] += cumulative


def _profile(conn: str) -> dict[str, float]:
    """cProfile's cumulative times of both threads of a read: the task's (which waits for chunks and
    builds record batches) and the connection's reader thread (which reads, cuts and decodes), which a
    profiler enabled in the task's thread does not see."""
    from eventhubs_spark.amqp import receive_connections

    profilers: list[cProfile.Profile] = []
    original_run, original_idle = receive_connections.SharedConnection._run, receive_connections._IDLE_CLOSE

    def profiled_run(self: Any) -> None:
        profiler = cProfile.Profile(time.thread_time)  # CPU of this thread: not its waits for the GIL or the socket
        profilers.append(profiler)
        profiler.enable()
        try:
            original_run(self)
        finally:
            profiler.disable()

    def readers_gone() -> None:
        deadline = time.monotonic() + 30
        while any(t.name.startswith("eventhubs-reader") for t in threading.enumerate()):
            if time.monotonic() > deadline:
                raise RuntimeError("a connection's reader thread did not end")
            time.sleep(0.05)

    # A connection without links closes after _IDLE_CLOSE: made short, the earlier runs' connection
    # goes (so the read opens one whose thread is profiled), and the profiled one ends after the read.
    receive_connections._IDLE_CLOSE = 0.2
    task = cProfile.Profile(time.thread_time)  # CPU of this thread: not its waits for the GIL or the socket
    try:
        readers_gone()
        receive_connections.SharedConnection._run = profiled_run  # type: ignore[method-assign]
        task.enable()
        _read_connector(conn)
        task.disable()
        readers_gone()
        if not profilers:
            raise RuntimeError("the read ran on a connection opened before profiling")
    finally:
        receive_connections.SharedConnection._run = original_run  # type: ignore[method-assign]
        receive_connections._IDLE_CLOSE = original_idle
    out = dict.fromkeys(_FUNCS, 0.0)
    _add(out, task)
    for profiler in profilers:
        _add(out, profiler)
    return out


def _payloads(conn: str) -> list[bytes]:
    """The transfer payloads (one message each) of the stream, as the service sent them."""
    from eventhubs_spark.amqp import frame_reader

    captured: list[bytes] = []
    original = frame_reader.LinkSink.publish

    def keep(self: Any) -> None:
        captured.extend(self.incoming.payloads())
        original(self)

    frame_reader.LinkSink.publish = keep  # type: ignore[method-assign]
    try:
        _read_connector(conn)
    finally:
        frame_reader.LinkSink.publish = original  # type: ignore[method-assign]
    return captured


def _decode_sdk(payloads: list[bytes]) -> int:
    from azure.eventhub._pyamqp._decode import decode_payload

    from eventhubs_spark.codec.columns import Columns

    rows = 0
    for start in range(0, len(payloads), PREFETCH):
        cols = Columns()
        for payload in payloads[start : start + PREFETCH]:
            cols.append_sdk_message(decode_payload(memoryview(payload)))
        rows += cols.to_batch("0").num_rows
    return rows


def _decode_fast(payloads: list[bytes]) -> int:
    from eventhubs_spark.codec.columns import Columns
    from eventhubs_spark.codec.message import decode_message

    rows = 0
    for start in range(0, len(payloads), PREFETCH):
        cols = Columns()
        for payload in payloads[start : start + PREFETCH]:
            decode_message(cols, payload)
        rows += cols.to_batch("0").num_rows
    return rows


def _decode_batches(payloads: list[bytes]) -> int:
    import pyarrow as pa

    from eventhubs_spark.codec.layout import decode_batch

    rows = 0
    for start in range(0, len(payloads), PREFETCH):
        rows += decode_batch(pa.array(payloads[start : start + PREFETCH], pa.binary()), "0")[0].num_rows
    return rows


def _row_from(annotations: dict[Any, Any], props: dict[Any, Any] | None, body: bytes) -> tuple[Any, ...]:
    def get(key: str) -> Any:
        return annotations.get(key.encode(), annotations.get(key))

    system = [(k, v) for k, v in annotations.items() if (k.decode() if isinstance(k, bytes) else k) not in
              ("x-opt-sequence-number", "x-opt-offset", "x-opt-enqueued-time", "x-opt-partition-key")]  # fmt: skip
    return (
        body,
        int(get("x-opt-sequence-number")),
        get("x-opt-offset"),
        get("x-opt-enqueued-time"),
        get("x-opt-publisher"),
        get("x-opt-partition-key"),
        list(props.items()) if props else None,
        system or None,
    )


def _decode_uamqp(payloads: list[bytes]) -> int:
    import uamqp  # type: ignore[import-not-found]

    from eventhubs_spark.codec.columns import Columns

    rows = 0
    for start in range(0, len(payloads), PREFETCH):
        cols = Columns()
        for payload in payloads[start : start + PREFETCH]:
            message = uamqp.Message.decode_from_bytes(payload)
            body = b"".join(message.get_data())
            cols.append(*_row_from(message.annotations or {}, message.application_properties, body))
        rows += cols.to_batch("0").num_rows
    return rows


def _decode_proton(payloads: list[bytes]) -> int:
    import proton  # type: ignore[import-not-found]

    from eventhubs_spark.codec.columns import Columns

    rows = 0
    for start in range(0, len(payloads), PREFETCH):
        cols = Columns()
        for payload in payloads[start : start + PREFETCH]:
            message = proton.Message()
            message.decode(payload)
            body = bytes(message.body) if message.body is not None else b""
            cols.append(*_row_from(dict(message.annotations or {}), message.properties, body))
        rows += cols.to_batch("0").num_rows
    return rows


CANDIDATES = {
    "SDK's pure-Python decoder (the connector's path before)": _decode_sdk,
    "the connector's batch decoder, column by column (codec/layout.py)": _decode_batches,
    "the connector's message-by-message decoder (codec/message.py)": _decode_fast,
    "uamqp (the SDK's optional C transport)": _decode_uamqp,
    "Apache Qpid Proton's Python binding (C)": _decode_proton,
}


def _decoders(payloads: list[bytes]) -> list[dict[str, Any]]:
    rows = []
    for name, decode in CANDIDATES.items():
        try:
            decode(payloads[:1000])  # warm up (and find out whether it can be imported here)
        except ImportError as exc:
            rows.append({"decoder": name, "µs/event incl. Arrow": None, "events/s": None,
                         "note": f"not installable here ({exc.name})"})  # fmt: skip
            continue
        best = float("inf")
        for _ in range(3):
            started = time.process_time()
            count = decode(payloads)
            best = min(best, time.process_time() - started)
        rows.append({"decoder": name, "µs/event incl. Arrow": round(best / count * 1e6, 2),
                     "events/s": round(count / best), "note": ""})  # fmt: skip
    return rows


# What "before" means for the stage table: the read path's files as at this commit (issue 50's second change: frames
# found with numpy, chunks merged in the worker), measured in a worktree beside today's code, same emulator and events.
BEFORE = os.environ.get("EVENTHUBS_PROFILE_BEFORE", "274b4c9")
BEFORE_PATHS = [p for p in os.environ.get("EVENTHUBS_PROFILE_PATHS", ",".join([
    "eventhubs_spark/amqp/frame_reader.py", "eventhubs_spark/amqp/messages.py", "eventhubs_spark/codec/layout.py",
    "eventhubs_spark/executor/service_client.py", "eventhubs_spark/interprocess/service_framing.py",
    "eventhubs_spark/interprocess/sealed_socket.py",
])).split(",") if p]  # fmt: skip

_STAGES = {
    "socket": "socket reads (256 KiB at a time)",
    "frames": "cutting frames (runs in one pass), counters, credit (tap)",
    "decode": "reading the sequence numbers (a run's at once), keeping the messages in place (tap)",
    "sdk": "SDK around it (listen, its frames, the reader thread's loop)",
    "batches": "decoding a chunk column by column into a record batch (layout)",
}


def measure(conn: str) -> dict[str, Any]:
    """The read loop's CPU per event (best of 3, no profiler) and its split by stage (cProfile's shares of it)."""
    best = min((_cpu(_read_connector, conn) for _ in range(3)), key=lambda run: run[0] / run[2])
    per_event = best[0] / best[2] * 1e6
    stages = _profile(conn)
    # The task's thread mostly waits for the reader thread; what it spends on its own is taking chunks
    # and building record batches. The reader thread's time less its waiting in select is its CPU.
    split = {
        "socket": stages["socket"] - stages["wait"],
        "frames": stages["frames"] - stages["socket"] - stages["decode"],
        "decode": stages["decode"],
        "sdk": stages["reader"] - stages["frames"],
        "batches": stages["batches"],
    }
    split = {stage: max(seconds, 0.0) for stage, seconds in split.items()}
    total = sum(split.values()) or 1.0
    return {"per_event": per_event, "events": best[2], "events_per_s": best[2] / best[1],
            "shares": {stage: seconds / total for stage, seconds in split.items()}}  # fmt: skip


def _measure_before(conn: str) -> dict[str, Any] | None:
    """:func:`measure` of the code before (BEFORE), in a worktree's process; None when that commit is not here."""
    from .ab_read import remove_worktrees, worktrees

    if subprocess.run(["git", "cat-file", "-e", BEFORE], capture_output=True).returncode:
        return None
    trees = worktrees(Path(tempfile.mkdtemp(prefix="eventhubs-profile-")), BEFORE, BEFORE_PATHS)
    try:
        env = {**os.environ, "PYTHONPATH": str(trees["A"])}
        done = subprocess.run([sys.executable, "-m", "bench.read_profile", "one", conn], cwd=trees["A"], env=env,
                              capture_output=True, text=True, timeout=1800)  # fmt: skip
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if not lines:
            raise RuntimeError(f"the run before failed: {done.stderr[-3000:]}")
        return dict(json.loads(lines[-1]))
    finally:
        remove_worktrees(trees)


def run() -> None:
    emulator, conns = start_emulator({"profile": 1}, consumer_groups=("$Default", "sdk"))
    conn = conns["profile"]
    try:
        _fill(conn)
        before = _measure_before(conn)
        after = measure(conn)
        sdk = min((_cpu(_read_sdk, conn) for _ in range(3)), key=lambda run: run[0] / run[2])
        payloads = _payloads(conn)
    finally:
        emulator.terminate()
    per_event = after["per_event"]
    sdk_per_event = sdk[0] / sdk[2] * 1e6
    column = "µs/event (of the unprofiled CPU)"
    rows = []
    for stage, name in _STAGES.items():
        row = {
            "stage": name,
            "share": f"{after['shares'][stage]:.0%}",
            column: round(per_event * after["shares"][stage], 2),
        }
        if before is not None:
            row["before: share"] = f"{before['shares'][stage]:.0%}"
            row["before: µs/event"] = round(before["per_event"] * before["shares"][stage], 2)
        rows.append(row)
    whole: dict[str, Any] = {
        "stage": "the read loop, whole (no profiler)",
        "share": "100%",
        column: round(per_event, 2),
    }
    if before is not None:
        whole |= {"before: share": "100%", "before: µs/event": round(before["per_event"], 2)}
    rows.append(whole)
    decoders = _decoders(payloads)
    record(
        "read_profile",
        {
            "events": after["events"],
            "event size (bytes)": len(BODY),
            "connector CPU per event, read loop incl. Arrow (µs)": round(per_event, 1),
            f"the same, before (read path as at {BEFORE})": round(before["per_event"], 1) if before else "-",
            "plain SDK receive_batch CPU per event, same events (µs)": round(sdk_per_event, 1),
            "connector events/s, one process": round(after["events_per_s"]),
            "events decoded by the SDK's slow decoder (fallbacks), all runs": sum(_FALLBACKS),
            "issue 16 goal (µs/event)": "under 10",
            "goal met": per_event < 10,
        },
        rows
        + [
            {
                "stage": f"decoder: {d['decoder']}",
                "share": d["note"] or f"{d['events/s']:,} events/s",
                "µs/event (of the unprofiled CPU)": d["µs/event incl. Arrow"],
            }
            for d in decoders
        ],
        notes=(
            "One partition, one receiver (prefetch 2000), the emulator in its own process; best of 3 runs each. "
            "Every other event carries three application properties (a string, a long, a boolean). Stage shares "
            "come from cProfile's cumulative times, on each thread's own CPU clock (waits for the GIL or the socket "
            "not counted), in both threads of the read: the task's (taking chunks, decoding them into record "
            "batches) and the connection's reader thread (socket reads, cutting frames, keeping each message). "
            "cProfile inflates per-call costs (most in the reader thread, which makes several calls per event), "
            "so they are applied as shares to the unprofiled CPU; the 'before' columns are the same measurement of the "
            f"read path's files as at commit {BEFORE} ({', '.join(p.rsplit('/', 1)[-1] for p in BEFORE_PATHS)}), in a "
            "worktree's process, on the same emulator and events just before. The profiler inflates code that makes "
            "many calls per event (the frame loop before) more than code that makes few: compare the unprofiled "
            "whole-loop rows first. "
            "The decoder rows decode the same captured transfer payloads to the same record batches.\n\n"
            "Why the connector's own decoders: they are the fastest here and pure Python (nothing to compile on a "
            "cluster, the same wheel everywhere Spark runs), and property tests hold both to the SDK's own "
            "decoding on every column. The batch decoder serves the hot path: messages of one partition share "
            "a layout (the same annotations, property names and value types, one data section), so it walks one "
            "message in Python, checks all the others against that layout at once with numpy and cuts the "
            "columns from the batch's one buffer in C; what no layout describes, and chunks of fewer than 64 "
            "messages, go message by message. The C libraries decode into Python objects of their own first "
            "(uamqp's Message, Proton's Message and Data trees), and those objects, not the parsing, are most "
            "of what the SDK's path cost. uamqp is also deprecated by the SDK, and Proton has no binary wheel for "
            "this platform on the package index reached here: pip builds it from source, which needs a C "
            "compiler and headers on every node."
        ),
    )


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "one":
        print(json.dumps(measure(sys.argv[2])))
