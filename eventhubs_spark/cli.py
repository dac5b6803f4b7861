"""The ``eventhubs-spark`` command: ``demo``, ``emulator``, ``send``, ``checkpoints`` and ``lag``.

``demo`` is the README's first command: it starts the embedded emulator, produces sample events and
runs a Spark streaming query on them with ``spark.readStream.format("eventhubs")``, showing a live
per-partition table of events read, rate and lag. Connection strings can come from the environment
(``EVENTHUBS_CONNECTION_STRING``, ``CHECKPOINT_STORE_CONNECTION_STRING``) so they stay out of shell
history; they are never printed.
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
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from eventhubs_emulator import Emulator
from eventhubs_emulator import __main__ as emulator_cli


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    lines = ["  ".join(str(h).rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(str(c).rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


# -- demo --------------------------------------------------------------------------------------------
def _demo(args: argparse.Namespace, argv: Sequence[str]) -> int:
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
        noise = _ShutdownNoise(self.stopping)
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


class _ShutdownNoise:
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

        from eventhubs_spark.amqp import sdk_internals

        def produce() -> None:
            with EventHubProducerClient.from_connection_string(conn) as producer:
                n = 0
                while not stop.is_set() and n < args.events:
                    batch = producer.create_batch()
                    for _ in range(min(max(1, args.rate // 10), args.events - n)):
                        batch.add(EventData(json.dumps({"id": n, "temperature": 20 + n % 7})))
                        n += 1
                    sdk_internals.send_once(producer, batch, 30.0)  # the embedded emulator: no repeat to hide or tell
                    time.sleep(0.1)

        from eventhubs_spark.local_spark import local_session

        print("starting Spark (20-40 s on a 2-core machine; its JVM and Python workers start)...", flush=True)
        spark_started = time.monotonic()
        spark = local_session("eventhubs-spark demo")  # eventhubs_spark/conf/spark-defaults.conf
        print(f"Spark started in {time.monotonic() - spark_started:.0f} s; starting the query...", flush=True)
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
                text = _table(("partition", "events read", "events/s", "lag"), rows)
                header = f"{time.monotonic() - started:5.1f} s   {total} of {args.events} events read"
                if not first_batch_done:  # the query's planner and first Python workers start: 5-20 s here
                    header += f"   (waiting for the query's first micro-batch: {time.monotonic() - started:.0f} s)"
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


# -- send --------------------------------------------------------------------------------------------
def _bodies(args: argparse.Namespace) -> tuple[int | None, Iterator[str]]:
    if args.file:
        handle: TextIO = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
        count = None
        if handle is not sys.stdin:
            count = sum(1 for line in handle if line.strip())
            handle.seek(0)
        return count, (line.rstrip("\n") for line in handle if line.strip())

    def generated() -> Iterator[str]:
        for i in range(args.count):
            yield json.dumps({"id": i, "ts": time.time(), "pad": "x" * max(0, args.size - 40)})

    return args.count, generated()


def _progress(done: int, total: int | None, out: TextIO) -> None:
    if total:
        filled = int(30 * done / total)
        out.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{total}")
    else:
        out.write(f"\r{done} events")
    out.flush()


def _send(args: argparse.Namespace) -> int:
    from azure.eventhub import EventData, EventHubProducerClient

    from eventhubs_spark.auth.settings import parse_connection_string
    from eventhubs_spark.errors import EventHubsError
    from eventhubs_spark.process import runtime

    conn = _secret(args.connection_string, "EVENTHUBS_CONNECTION_STRING", "--connection-string")
    if not args.send_timeout > 0:
        print(f"error: --send-timeout must be more than 0 seconds (e.g. --send-timeout 30), not {args.send_timeout:g}",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        # One management call without the SDK's retries first: a wrong hub name or key is answered at
        # once, in one line, instead of after the producer's retries and a traceback.
        settings = parse_connection_string(conn, option="--connection-string", hub=args.hub, hub_option="--hub")
        partition_ids = runtime.current().management(settings, 30.0).partition_ids()
    except EventHubsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    total, bodies = _bodies(args)
    options: dict[str, Any] = {}
    if args.partition is not None:
        options["partition_id"] = args.partition
    if args.partition_key is not None:
        options["partition_key"] = args.partition_key
    started = time.monotonic()
    sender = _Sender(lambda: EventHubProducerClient.from_connection_string(conn, eventhub_name=settings.hub,
                                                                         retry_total=0), args.send_timeout)  # fmt: skip
    # Neither a partition nor a key: the events are dealt over the partitions one by one, as the sink does (a
    # batch sent without either lands on one partition the service picks: all of a small run on one partition).
    targets = [options] if options else [{"partition_id": p} for p in partition_ids]
    try:
        batches = [sender.client.create_batch(**target) for target in targets]
        for i, body in enumerate(bodies):
            slot = i % len(targets)
            event = EventData(body)
            try:
                batches[slot].add(event)
            except ValueError:
                sender.send(batches[slot])
                _progress(sender.sent, total, sys.stderr)
                batches[slot] = sender.client.create_batch(**targets[slot])
                batches[slot].add(event)
        for batch in batches:
            if len(batch):
                sender.send(batch)
    except _SendFailed as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        return 1
    finally:
        sender.close()
    _progress(sender.sent, total, sys.stderr)
    elapsed = time.monotonic() - started
    print(f"\nsent {sender.sent} events in {elapsed:.1f} s", file=sys.stderr)
    if sender.resent:
        print(f"warning: {sender.resent} of them were sent again after a send that went unanswered for "
              f"{args.send_timeout:g} s, which may have been stored all the same: the hub may hold those twice",
              file=sys.stderr)  # fmt: skip
    return 0


class _SendFailed(Exception):
    pass


class _Sender:
    """The ``send`` command's producer: each batch is sent with
    :func:`~eventhubs_spark.amqp.sdk_internals.send_once` and retried here, so a repeat is known and said.
    (``send_batch`` sends a batch a second time after any failure, silently; after a send that timed out, the first
    copy may have been stored all the same.) A send that goes unanswered
    moves to a new connection, as a black-holed one would answer nothing more."""

    ATTEMPTS = 3

    def __init__(self, new_client: Any, timeout: float) -> None:
        self.new_client = new_client
        self.timeout = timeout
        self.client = new_client()
        self.sent = 0  # events stored (acknowledged)
        self.resent = 0  # of them, sent again after an unanswered send

    def send(self, batch: Any) -> None:
        from azure.eventhub.exceptions import EventHubError, OperationTimeoutError

        from eventhubs_spark.amqp import sdk_internals

        unanswered = False
        for attempt in range(1, self.ATTEMPTS + 1):
            try:
                sdk_internals.send_once(self.client, batch, self.timeout)
                break
            except (EventHubError, TimeoutError) as exc:
                timed_out = isinstance(exc, OperationTimeoutError | TimeoutError)
                unanswered = unanswered or timed_out
                if attempt == self.ATTEMPTS:
                    first = self.sent + 1
                    doubt = ("an attempt went unanswered, so the hub may hold them all the same: look before sending "
                             "them again" if unanswered else "each attempt was refused or failed")  # fmt: skip
                    raise _SendFailed(f"events {first}-{first + len(batch) - 1} were not acknowledged after {attempt} "
                                      f"attempts ({doubt}): {exc}. The {self.sent} events before them were "
                                      "sent.") from exc  # fmt: skip
                if timed_out:  # a new connection: the old one may be a black hole
                    self.close()
                    self.client = self.new_client()
                else:
                    time.sleep(attempt)  # refused (busy, a detach): nothing stored; a moment, then again
        self.sent += len(batch)
        if unanswered:
            self.resent += len(batch)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()


# -- checkpoints -------------------------------------------------------------------------------------
def checkpoints_report(
    connection_string: str, store_connection_string: str, container: str, consumer_group: str
) -> list[dict[str, Any]]:
    """Per partition: the store's checkpoint, owner and ownership age, the partition's end, and the lag."""
    from eventhubs_spark.auth.settings import parse_connection_string
    from eventhubs_spark.checkpoints.blob import BlobCheckpointStore
    from eventhubs_spark.process import runtime

    settings = parse_connection_string(connection_string)
    store = BlobCheckpointStore.from_connection_string(store_connection_string, container)
    management = runtime.current().management(settings, 60.0)
    infos = management.partition_properties(management.partition_ids())
    ns, hub = settings.namespace, settings.hub
    checkpoints = {c.partition_id: c for c in store.list_checkpoints(ns, hub, consumer_group)}
    owners = {o.partition_id: o for o in store.list_ownership(ns, hub, consumer_group)}
    now = time.time()
    rows = []
    for pid in sorted(infos, key=int):
        info, checkpoint, owner = infos[pid], checkpoints.get(pid), owners.get(pid)
        seq = checkpoint.sequence_number if checkpoint else None
        last = info.last_enqueued_sequence_number if not info.is_empty else None
        rows.append(
            {
                "partition": pid,
                "checkpoint": "" if seq is None else seq,
                "offset": (checkpoint.offset or "") if checkpoint else "",
                "owner": (owner.owner_id or "(released)") if owner else "",
                "owned for": "" if owner is None or owner.last_modified_time is None
                else f"{now - owner.last_modified_time:.0f} s ago",
                "last enqueued": "" if last is None else last,
                "lag": "" if last is None else last - (seq if seq is not None else info.beginning_sequence_number - 1),
            }
        )  # fmt: skip
    return rows


def _checkpoints(args: argparse.Namespace) -> int:
    conn = _secret(args.connection_string, "EVENTHUBS_CONNECTION_STRING", "--connection-string")
    store = _secret(args.storage_connection_string, "CHECKPOINT_STORE_CONNECTION_STRING", "--storage-connection-string")
    try:
        rows = checkpoints_report(conn, store, args.container, args.consumer_group)
    except Exception as exc:  # the blob service's or the hub's failure: one line, not the storage SDK's traceback
        from eventhubs_spark.checkpoints.blob import describe_store_error
        from eventhubs_spark.errors import EventHubsError

        said = (
            str(exc).splitlines()[0] if isinstance(exc, EventHubsError) else describe_store_error(exc, args.container)
        )
        print(f"error: {said}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"consumer group {args.consumer_group!r}, container {args.container!r}")
        print(_table(list(rows[0]) if rows else ["partition"], [list(r.values()) for r in rows]))
    return 0


# -- lag ---------------------------------------------------------------------------------------------
def lag_report(
    options: dict[str, str],
    checkpoint_location: str,
    storage: str | None = None,
    now: float | None = None,
    folder: Any = None,
) -> dict[str, Any]:
    """How far behind a query is now, per partition: where its Spark checkpoint's last committed batch left each
    partition, the partition's latest event (asked of the hub now), the lag in events and in time, the age of
    the last commit, and stalled partitions (as its driver last called them in the lag files, or events waiting
    with no batch committed for ``eventhubs.lag.stalledAfter``). ``storage``: a storage account's connection
    string, for a checkpoint location in Azure Storage (``abfss://``, ``wasbs://``, ``https://``); ``folder``: the
    location already opened (:func:`checkpoint_folder`), as ``lag --watch`` keeps it between refreshes."""
    from eventhubs_spark.options import STREAM, read_options
    from eventhubs_spark.planning.lag import LagFiles, LagTracker, last_commit
    from eventhubs_spark.positions import geo_segments
    from eventhubs_spark.process import runtime

    typed = read_options(options, STREAM)
    hub = typed.settings.hub
    folder = checkpoint_folder(checkpoint_location, storage) if folder is None else folder
    commit = last_commit(folder, hub)
    management = runtime.current().management(typed.settings, typed.operation_timeout)
    infos = management.partition_properties(management.partition_ids())
    committed = dict(commit.positions) if commit else {}
    files = LagFiles(checkpoint_location, hub, folder)
    recent = files.reports(last=10)
    tracker = LagTracker(hub)
    said: dict[str, str | None] = {}
    for p, (end, micros) in files.reads().items():  # what the tasks read since the newest trigger file
        tracker.read(p, end, micros)
    for report in recent:  # the driver's figures where they stand where the checkpoint does
        for p, lag in report.partitions.items():
            if committed.get(p) == lag.committed:
                if lag.last_read is not None:
                    tracker.read(p, lag.committed, int(lag.last_read.timestamp() * 1_000_000))
                said[p] = lag.stalled
    figures = tracker.observe(committed, infos, batch_planned=False)
    now = time.time() if now is None else now
    age = None if commit is None else max(0.0, now - commit.committed_at.timestamp())
    partitions: dict[str, Any] = {}
    for p in sorted(infos, key=int):
        row = figures.partitions.get(p)
        stalled = said.get(p) if row is not None and row.events else None
        if row is not None and row.events and not stalled and age is not None and age >= typed.stalled_after:
            stalled = f"{row.events} events waiting, no batch committed for {age:.0f} s (is the query running?)"
        partitions[p] = {"committed": None, "latest": geo_segments.show(infos[p].end), "eventsBehind": None,
                         "secondsBehind": None, "lastEnqueuedTime": None, "lastReadEnqueuedTime": None,
                         "stalled": None}  # fmt: skip
        if row is not None:
            partitions[p] = {**row.to_json(), "stalled": stalled}
    summary = figures.summary()
    summary["stalledPartitions"] = [p for p, v in partitions.items() if v["stalled"]]
    return {
        "hub": hub,
        "checkpointLocation": checkpoint_location,
        "batch": None if commit is None else commit.batch,
        "committedAt": None if commit is None else commit.committed_at.isoformat(),
        "commitAgeSeconds": None if age is None else round(age, 3),
        **summary,
        "partitions": partitions,
    }


def checkpoint_folder(location: str, storage: str | None = None) -> Any:
    """A checkpoint location to read: a local path (``file:``, ``dbfs:/`` through ``/dbfs``), or one in Azure
    Storage read with ``storage`` (a connection string): ``abfss://container@account.dfs.core.windows.net/path``,
    ``wasbs://container@account.blob.core.windows.net/path``, ``https://account.blob.core.windows.net/container/
    path``, or Azurite's ``http://127.0.0.1:10000/devstoreaccount1/container/path``."""
    from eventhubs_spark.checkpoints.blob import BlobFolder, blob_location
    from eventhubs_spark.planning.lag import LocalFolder

    try:
        return LocalFolder(location)
    except ValueError:
        pass
    container, prefix = blob_location(location)
    if not storage:
        raise ValueError(f"{location!r} is in Azure Storage: pass --storage-connection-string (or set "
                         "CHECKPOINT_STORE_CONNECTION_STRING) for its account")  # fmt: skip
    return BlobFolder.from_connection_string(storage, container, prefix, location)


def _lag_text(report: dict[str, Any]) -> str:
    def shown(value: Any, unit: str = "") -> str:
        return "-" if value is None else f"{value:.1f}{unit}" if isinstance(value, float) else f"{value}{unit}"

    batch = report["batch"]
    seconds = shown(report["maxSecondsBehindLatest"], " s")
    known = [v["secondsBehind"] for v in report["partitions"].values() if v["secondsBehind"] is not None]
    if report["maxSecondsBehindLatest"] is None and known:
        # a partition's time unknown (nothing read from it yet): the max over the others is a floor, said so
        unknown = [p for p, v in report["partitions"].items() if v["secondsBehind"] is None]
        seconds = f"at least {max(known):.1f} s (no time yet for partition{'s' if len(unknown) > 1 else ''} " \
                  f"{', '.join(unknown)})"  # fmt: skip
    head = (f"hub {report['hub']!r}: " + ("no batch committed yet" if batch is None else
            f"batch {batch} committed {shown(report['commitAgeSeconds'], ' s')} ago") +
            f"; behind latest: max {report['maxOffsetsBehindLatest']} events, max {seconds}")  # fmt: skip
    headers = ["partition", "committed", "latest", "events behind", "seconds behind", "last read enqueued"]
    rows = [[p, shown(v["committed"]), v["latest"], shown(v["eventsBehind"]), shown(v["secondsBehind"]),
             shown(v["lastReadEnqueuedTime"])] for p, v in report["partitions"].items()]  # fmt: skip
    lines = [head, _table(headers, rows)]
    lines += [f"STALLED partition {p}: {v['stalled']}" for p, v in report["partitions"].items() if v["stalled"]]
    return "\n".join(lines)


def _lag_options(args: argparse.Namespace) -> dict[str, str]:
    """The options the user gave: a JSON file of them (as the query was started with) and each --option."""
    options: dict[str, str] = {}
    if args.options:
        with open(args.options, encoding="utf-8") as f:
            options.update({str(k): str(v) for k, v in json.load(f).items() if not str(k).startswith("_")})
    for item in args.option or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(
                f"error: --option takes KEY=VALUE, e.g. --option eventhubs.consumerGroup=spark; got {item!r}"
            )
        options[key.strip()] = value
    return options


def _entity_path(connection_string: str) -> str | None:
    from eventhubs_spark.auth.settings import connection_string_parts

    return connection_string_parts(connection_string, "--connection-string").get("entitypath") or None


def _with_stored(given: dict[str, str], stored: dict[str, dict[str, str]], connection: str | None,
                 location: str) -> dict[str, str]:  # fmt: skip
    """The query's options as its driver stored them under the checkpoint location (``source.json``, secrets
    left out), under the ones given here; the connection string (flag, else environment) where the query
    signed in with a key, which is never stored."""
    lower = {k.lower(): v for k, v in given.items()}
    hub = lower.get("eventhubs.name") or (_entity_path(connection) if connection else None)
    base: dict[str, str] = {}
    if stored:
        if hub is None and len(stored) > 1:
            raise SystemExit(f"error: {location} holds the lag of hubs {', '.join(sorted(stored))}: name one, e.g. "
                             f"--option eventhubs.name={sorted(stored)[0]}")  # fmt: skip
        base = dict(stored.get(hub, {}) if hub is not None else next(iter(stored.values())))
    signed = base.pop("_signIn", None)
    options = {**base, **given}
    names = {k.lower() for k in options}
    if "eventhubs.connectionstring" in names:
        return options
    with_key = signed in ("connectionString", "sasToken") or (signed is None and "eventhubs.namespace" not in names)
    if connection is None and with_key:
        known = f" (its hub {base['eventhubs.name']!r} is known from {location}; its key is not stored)" if base else ""
        raise SystemExit(f"error: pass --connection-string or set EVENTHUBS_CONNECTION_STRING{known}")
    if connection is not None:
        for key in [k for k in options if k.lower() in ("eventhubs.namespace", "eventhubs.usedevelopmentemulator")]:
            options.pop(key)  # the connection string names them
        if _entity_path(connection):
            for key in [k for k in options if k.lower() == "eventhubs.name"]:
                options.pop(key)
        options["eventhubs.connectionString"] = connection
    return options


def _lag(args: argparse.Namespace) -> int:
    from eventhubs_spark.errors import OptionError
    from eventhubs_spark.planning.lag import stored_sources

    given = _lag_options(args)
    location = args.checkpoint_location or next(
        (v for k, v in given.items() if k.lower() == "eventhubs.checkpointlocation"), None
    )
    if not location:
        raise SystemExit("error: pass --checkpoint-location (the query's Spark checkpoint location)")
    storage = args.storage_connection_string or os.environ.get("CHECKPOINT_STORE_CONNECTION_STRING")
    connection = args.connection_string or os.environ.get("EVENTHUBS_CONNECTION_STRING") or None
    try:
        folder = checkpoint_folder(location, storage)  # opened once: a refresh reads it again, not reconnects
        options = _with_stored(given, stored_sources(folder), connection, location)
    except (OptionError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    shown = 0
    while True:
        try:
            report = lag_report(options, location, storage, folder=folder)
        except (OptionError, ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(json.dumps(report, indent=2) if args.json else _lag_text(report), flush=True)
        shown += 1
        if args.watch is None or (args.iterations and shown >= args.iterations):
            return 0
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0
        if not args.json:
            print()


def _secret(value: str | None, env: str, flag: str) -> str:
    found = value or os.environ.get(env)
    if not found:
        raise SystemExit(f"error: pass {flag} or set {env}")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="eventhubs-spark", description="Azure Event Hubs for Spark 4")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="a Spark streaming query on sample events in the embedded emulator",
        description="Starts the embedded emulator, produces sample events and reads them with a Spark streaming "
        "query, showing events read, rate and lag per partition. It ends by itself; Ctrl-C stops it (exit 130).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    demo.add_argument("--partitions", type=int, default=4, help="partitions of the demo hub")
    demo.add_argument("--events", type=int, default=2000, help="events to produce; the demo ends once all are read")
    demo.add_argument("--rate", type=int, default=500, help="events per second to produce")
    demo.add_argument("--seconds", type=float, default=90.0, help="stop after this long")
    demo.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # the process doing the work
    emu = sub.add_parser("emulator", help="run the local Event Hubs emulator")
    emulator_cli.add_arguments(emu)
    send = sub.add_parser("send", help="send generated events, or the lines of a JSON-lines file, to a hub")
    send.add_argument("--connection-string", help="with EntityPath (default: $EVENTHUBS_CONNECTION_STRING)")
    send.add_argument("--hub", help="the event hub, for a connection string without EntityPath")
    send.add_argument("--file", help="a JSON-lines file (one event body per line; - for stdin)")
    send.add_argument("--count", type=int, default=1000, help="generated events (without --file)")
    send.add_argument("--size", type=int, default=100, help="approximate bytes per generated event")
    send.add_argument(
        "--send-timeout", type=float, default=60.0, metavar="SECONDS",
        help="how long one send of a batch may go unanswered before it is sent again (default 60)",
    )  # fmt: skip
    target = send.add_mutually_exclusive_group()
    target.add_argument("--partition", help="send every event to this partition id")
    target.add_argument("--partition-key", help="send every event with this partition key")
    cps = sub.add_parser("checkpoints", help="a consumer group's checkpoints, owners and lag, from the blob store")
    cps.add_argument("--connection-string", help="Event Hubs, with EntityPath (default: $EVENTHUBS_CONNECTION_STRING)")
    cps.add_argument("--storage-connection-string", help="blob storage (default: $CHECKPOINT_STORE_CONNECTION_STRING)")
    cps.add_argument("--container", required=True, help="the checkpoint store's blob container")
    cps.add_argument("--consumer-group", default="$Default")
    cps.add_argument("--json", action="store_true", help="print JSON instead of a table")
    lag = sub.add_parser(
        "lag",
        help="how far behind a streaming query is, per partition, from its checkpoint location and the hub",
        description="Reads the query's Spark checkpoint (the last committed batch) and the lag files its driver "
        "writes there (with eventhubs.checkpointLocation), asks the hub for each partition's latest event, and "
        "prints the lag in events and in time, the last commit's age and any stalled partition.",
    )
    lag.add_argument("--checkpoint-location", help="the query's checkpoint location: a local path, file:, dbfs:/, or "
                     "Azure Storage (abfss://, wasbs://, https://)")  # fmt: skip
    lag.add_argument("--connection-string", help="Event Hubs, for a query that signed in with a key (default: "
                     "$EVENTHUBS_CONNECTION_STRING); without EntityPath, the query's stored hub")  # fmt: skip
    lag.add_argument("--storage-connection-string", help="for a checkpoint location in Azure Storage (abfss://, "
                     "wasbs://, https://; default: $CHECKPOINT_STORE_CONNECTION_STRING)")  # fmt: skip
    lag.add_argument("--options", help="a JSON file of the options the query was started with (conf/*.json)")
    lag.add_argument("--option", action="append", metavar="KEY=VALUE", help="an option of the query (repeatable)")
    lag.add_argument("--json", action="store_true", help="print JSON instead of a table")
    lag.add_argument("--watch", type=float, nargs="?", const=5.0, metavar="SECONDS",
                     help="refresh every SECONDS (default 5) until Ctrl-C")  # fmt: skip
    lag.add_argument("--iterations", type=int, default=0, help="with --watch: stop after this many refreshes")
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(arguments)
    if args.command == "demo":
        return _demo(args, arguments)
    if args.command == "send":
        return _send(args)
    if args.command == "checkpoints":
        return _checkpoints(args)
    if args.command == "lag":
        return _lag(args)
    try:
        emulator = emulator_cli.build(args)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return emulator_cli.serve(emulator)


if __name__ == "__main__":
    sys.exit(main())
