"""``eventhubs-spark demo``: the embedded emulator, sample events and a Spark stream reading them, shown live.

The README's first command. Ctrl-C stops it cleanly (exit 130); the shutdown noise of pyspark's daemon threads is
kept off the terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

from eventhubs_emulator import Emulator
from eventhubs_emulator import __main__ as emulator_cli
from eventhubs_spark.cli.tables import table


# -- demo --------------------------------------------------------------------------------------------
def run_demo(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Run the demo in a child process of its own session, and turn Ctrl-C into a clean stop.

    Ctrl-C in a terminal reaches its whole foreground process group, and Spark's Python workers
    restore Python's SIGINT handler: the running tasks would die mid-batch (and PySpark's own handler
    raises ``KeyboardInterrupt`` in the middle of the loop). Here only this process gets it; it asks
    the child to stop (SIGTERM), which stops the query, Spark and the emulator, prints one line and
    exits 130. A second Ctrl-C ends the child at once.
    """
    if args.child:
        return _demo_run(args)
    import signal
    import subprocess

    child = subprocess.Popen([sys.executable, "-m", "eventhubs_spark.cli", *argv, "--child"], start_new_session=True)
    interrupted = 0

    def on_interrupt(signum: int, frame: Any) -> None:
        nonlocal interrupted
        interrupted += 1
        with contextlib.suppress(ProcessLookupError):  # it has ended already
            if interrupted == 1:  # the child alone: its JVM would run its shutdown hooks on a SIGTERM
                os.kill(child.pid, signal.SIGTERM)
            else:
                os.killpg(child.pid, signal.SIGKILL)

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        code = child.wait()  # resumed after the handler runs (PEP 475)
    finally:
        signal.signal(signal.SIGINT, previous)
    return 130 if interrupted else code


class _QuietStop:
    """The demo's standard error, passed on as it comes, except Spark's shutdown noise once it stops.

    With Python workers on a Unix domain socket (the package's Spark conf), Spark closes its workers'
    sockets at stop while some still read or write, and they print ``EOFError`` / ``BrokenPipeError``
    tracebacks (pyspark's daemon and stream runner: Spark's own, docs/pages/troubleshooting.md). Once the demo
    stops, those tracebacks (and only those) are left out, so Ctrl-C ends with its one line. Everything
    goes through a pipe read by a thread: the JVM and its Python workers inherit the descriptor.
    """

    def __init__(self) -> None:
        self.stopping = threading.Event()
        sys.stderr.flush()
        self._original = os.dup(2)
        self._sink = os.dup(self._original)  # the pump's own, closed with it
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
        self._thread = threading.Thread(target=self._pump, args=(read_end,), name="demo-stderr", daemon=True)
        self._thread.start()

    def _pump(self, read_end: int) -> None:
        noise = ShutdownNoise(self.stopping)
        with os.fdopen(read_end, "rb") as source, os.fdopen(self._sink, "wb", buffering=0) as sink:
            for line in source:
                sink.write(noise.feed(line))
            sink.write(noise.flush())

    def __enter__(self) -> _QuietStop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Standard error as it was; what is still in the pipe is passed on (briefly waited for)."""
        sys.stderr.flush()
        os.dup2(self._original, 2)  # the pipe ends when the last process holding it (Spark's) has ended
        os.close(self._original)
        self._thread.join(2.0)


class ShutdownNoise:
    """Line by line, what of a stream to pass on: everything, except Python tracebacks that end in a closed
    socket's error (once ``stopping`` is set, or from pyspark's daemon at any time), with the lines that chain
    them together."""

    ERRORS = ("EOFError", "BrokenPipeError", "ConnectionResetError")
    DAEMON = b"pyspark/daemon.py"

    def __init__(self, stopping: threading.Event) -> None:
        self.stopping = stopping
        self.held: list[bytes] = []  # a traceback being read, until its exception says what it is
        self.dropping = False  # just dropped one: the blank and "During handling..." lines that follow go too

    def feed(self, line: bytes) -> bytes:
        """What to pass on now for ``line`` (maybe nothing, maybe lines held before it)."""
        text = line.decode(errors="replace")
        joining = not text.strip() or text.startswith(("During handling", "The above exception"))
        if text.startswith("Traceback (most recent call last)"):
            self.held.append(line)  # held until its exception line says what it is
            return b""
        if self.held:
            self.held.append(line)
            if joining or text.startswith((" ", "\t")):
                return b""
            block, self.held = b"".join(self.held), []  # its exception line: the traceback is whole
            # A closed socket's error is noise at stop from any of Spark's Python processes, and at any time from
            # pyspark's daemon (it forks the workers, and Spark closes their sockets as it retires them: a healthy
            # run printed three of those). Any other traceback, and every other error, is passed on.
            closed_socket = text.startswith(self.ERRORS)
            self.dropping = closed_socket and (self.stopping.is_set() or self.DAEMON in block)
            return b"" if self.dropping else block
        if self.dropping and joining:
            return b""
        self.dropping = False
        return line

    def flush(self) -> bytes:
        """What is still held when the stream ends (a traceback cut short is passed on)."""
        block, self.held = b"".join(self.held), []
        return block


def _demo_run(args: argparse.Namespace) -> int:
    import signal

    from azure.eventhub import EventData, EventHubProducerClient

    hub = "demo"
    stop_requested = emulator_cli.SignalFlag()  # set by a signal handler: no lock (see SignalFlag)
    # standard error restored (and what Spark left in the pipe passed on) however the demo ends
    with Emulator({hub: args.partitions}) as emu, tempfile.TemporaryDirectory() as tmp, _QuietStop() as quiet:
        conn = emu.connection_string(hub)
        print(
            f"emulator on {emu.host}:{emu.port}; hub '{hub}' with {args.partitions} partitions. The demo ends by "
            f"itself after {args.events} events or {args.seconds:g} s; Ctrl-C stops it.",
            flush=True,
        )
        stop = threading.Event()

        from eventhubs_spark.amqp import sdk
        from eventhubs_spark.cli.send import now_iso

        def produce() -> None:
            with EventHubProducerClient.from_connection_string(conn) as producer:
                n = 0
                while not stop.is_set() and n < args.events:
                    batch = producer.create_batch()
                    for _ in range(min(max(1, args.rate // 10), args.events - n)):
                        batch.add(EventData(json.dumps({"id": n, "device": f"sensor-{n % 4}", "temperature": 20 + n % 7,
                                                        "ts": now_iso()})))  # fmt: skip
                        n += 1
                    sdk.send_once(producer, batch, 30.0)  # the embedded emulator: no repeat to hide or tell
                    time.sleep(0.1)

        from eventhubs_spark.local_spark import local_session

        print("starting Spark (20-40 s on a 2-core machine; its JVM and Python workers start)...", flush=True)
        spark_started = time.monotonic()
        spark = local_session("eventhubs-spark demo")  # eventhubs_spark/conf/spark-defaults.conf
        print(f"Spark started in {time.monotonic() - spark_started:.0f} s; starting the query (Spark starts Python "
              "processes to ask the source its schema and to plan: 5-20 s more)...", flush=True)  # fmt: skip
        for sig in (signal.SIGTERM, signal.SIGINT):  # after Spark, whose SparkContext sets its own
            signal.signal(sig, stop_requested.set)
        from eventhubs_spark import register

        register(spark)  # a no-op where Spark found the installed package by itself
        spark.sparkContext.setLogLevel("ERROR")
        read: dict[str, int] = {str(p): 0 for p in range(args.partitions)}
        last_seq: dict[str, int] = {str(p): -1 for p in range(args.partitions)}
        batches = [0]
        lock = threading.Lock()

        def on_batch(df: Any, batch_id: int) -> None:
            if stop_requested.is_set():
                return  # stopping: let the trigger end at once (see _stop_between_triggers)
            rows = df.groupBy("partition").agg({"sequenceNumber": "max", "*": "count"}).collect()
            with lock:
                batches[0] += 1
                for r in rows:
                    read[r["partition"]] += r["count(1)"]
                    last_seq[r["partition"]] = max(last_seq[r["partition"]], r["max(sequenceNumber)"])

        query = (
            spark.readStream.format("eventhubs")
            .option("eventhubs.connectionString", conn)
            .option("eventhubs.startingPosition", '{"offset": "-1"}')
            .load()
            .selectExpr("partition", "sequenceNumber", "cast(body as string) as body")
            .writeStream.foreachBatch(on_batch)
            .option("checkpointLocation", os.path.join(tmp, "checkpoint"))
            .trigger(processingTime="1 second")
            .start()
        )
        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        started = time.monotonic()
        print("the query started; its first micro-batch comes once its first Python workers are up (10-30 s on a "
              "2-core machine), then one a second", flush=True)  # fmt: skip
        before = dict(read)
        live = sys.stdout.isatty()
        try:
            while time.monotonic() - started < args.seconds:
                if stop_requested.wait(1.0):
                    break
                if query.exception() is not None:
                    print(f"the query failed: {query.exception()}", file=sys.stderr)
                    return 1
                with lock:
                    now = dict(read)
                    seqs = dict(last_seq)
                    first_batch_done = batches[0] > 0
                props = {p: emu.partition_properties(hub, p) for p in now}
                rows = [
                    (p, now[p], now[p] - before[p], props[p]["last_enqueued_sequence_number"] - seqs[p])
                    for p in sorted(now, key=int)
                ]
                before = now
                total = sum(now.values())
                text = table(("partition", "events read", "events/s", "lag"), rows)
                header = f"{time.monotonic() - started:5.1f} s   {total} of {args.events} events read"
                if not first_batch_done:  # the query's planner and first Python workers start: 10-30 s here
                    header += "   (waiting for the query's first micro-batch: its Python workers start)"
                print(("\033[H\033[J" if live else "\n") + header + "\n" + text, flush=True)
                if total >= args.events:
                    break
        finally:
            stop.set()
            quiet.stopping.set()
            _stop_between_triggers(query)
            spark.stop()
        total = sum(read.values())
        if stop_requested.is_set():
            print(f"\nstopped: the Spark query read {total} of {args.events} events", flush=True)
            return 130
        print(f"\nthe Spark query read {total} of {args.events} events")
        return 0 if total == args.events else 1


def _stop_between_triggers(query: Any, wait: float = 15.0) -> None:
    """Stop a foreachBatch query while no trigger runs.

    Stopping interrupts the stream thread; if that lands inside the Python foreachBatch callback, the
    callback's Py4J error reaches Spark's check for "interrupted by stop", whose regular expression
    recurses over the long message until the thread dies with a StackOverflowError (1,000 lines of
    Java on the terminal). Between triggers there is nothing to interrupt.
    """
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and query.isActive:
        try:
            if not query.status.get("isTriggerActive", False):
                break
        except Exception:  # the query ended meanwhile
            break
        time.sleep(0.02)
    query.stop()
