"""A streaming query in a Spark of its own: ``local-cluster[3,1,1024]`` or Spark Connect ``local[2]``.

Run as ``python -m tests.integration.spark_app MODE CONNECTION_STRING OUT_DIR`` by the tests, because
one process holds one Spark context and the suite's shared session is plain ``local[2]``. It streams
the hub from its start with ``Trigger.AvailableNow`` in several micro-batches into parquet, then
writes ``result.json`` with the rows read and, for local-cluster, the receiver pool figures parsed
from the executors' logs.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

CLUSTER_MODES = ("local-cluster", "local-cluster-kill", "local-cluster-homes-cut", "local-cluster-kills")
KILL_EVERY = 12.0  # local-cluster-kills: seconds between SIGKILLs of an executor JVM (issue 64's cadence)


def connect_session() -> Any:
    """A Spark Connect client on a ``local[2]`` server of this process's own, on a free port.

    ``remote("local[2]")`` does the same but serves on Spark Connect's fixed port 15002 (its client
    finds another only under ``SPARK_TESTING``, which changes the JVM's defaults), so two Sparks'
    test runs side by side (``./dev test-compat all``) failed to bind. The server here is what
    ``remote("local[...]")`` starts (a Spark with the Connect plugin); the client is the one a user
    of a remote cluster holds, reaching it at ``sc://localhost:PORT``.
    """
    import socket

    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    with socket.socket() as probe:  # a free port: the server binds it a moment later
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (
        SparkSession.builder.master("local[2]")
        .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
        .config("spark.connect.grpc.binding.port", str(port))
        .config("spark.sql.artifact.isolation.enabled", "true")  # as remote("local[...]") sets them
        .config("spark.sql.artifact.isolation.alwaysApplyClassloader", "true")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    return ConnectSession.builder.remote(f"sc://localhost:{port}").getOrCreate()


def main(mode: str, connection: str, out: str, batch_size: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["EVENTHUBS_SPARK_LOG_LEVEL"] = "INFO"
    import pyspark
    from pyspark.sql import SparkSession

    if mode in CLUSTER_MODES:
        from tests.integration.cluster_start import distinct_application_id

        executors = 2 if mode == "local-cluster-kills" else 3
        with distinct_application_id():
            spark = (
                SparkSession.builder.master(f"local-cluster[{executors},1,1024]")
                .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
                .config("spark.executorEnv.EVENTHUBS_SPARK_LOG_LEVEL", "INFO")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .getOrCreate()
            )
        executors_up(spark, executors)
    elif mode == "connect":
        spark = connect_session()
        assert spark.__module__ == "pyspark.sql.connect.session", spark  # the query goes through Connect
        import eventhubs_spark

        eventhubs_spark.register(spark)  # ships the class to the server, as on a remote cluster
    else:
        raise SystemExit(f"unknown mode {mode!r}")

    def run() -> int:
        """One Trigger.AvailableNow run; returns its batches that read events."""
        query = (
            spark.readStream.format("eventhubs")
            .option("eventhubs.connectionString", connection)
            .option("eventhubs.startingPosition", '{"offset": "-1"}')
            .option("maxEventsPerTrigger", batch_size)
            .options(**json.loads(os.environ.get("SPARK_APP_OPTIONS") or "{}"))  # a test's own (e.g. Capture's)
            # homes cut: a task per partition, so every executor runs tasks and serves as a home (packed by default,
            # the 60 events of a batch would be one task on one executor, and the other two never start a service)
            .options(**({"eventhubs.minEventsPerTask": "0"} if mode == "local-cluster-homes-cut" else {}))
            .load()
            .selectExpr("cast(body as string) as body", "partition", "sequenceNumber")
            .writeStream.format("parquet")
            .option("path", os.path.join(out, "data"))
            .option("checkpointLocation", os.path.join(out, "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return sum(1 for p in query.recentProgress if (getattr(p, "numInputRows", None) or p["numInputRows"] or 0) > 0)

    if mode == "local-cluster-kill":
        killer = threading.Thread(target=kill_an_executor, args=(spark, out), daemon=True)
        killer.start()
    done = threading.Event()
    kills: list[float] = []
    if mode == "local-cluster-kills":
        threading.Thread(target=keep_killing, args=(spark, done, kills), daemon=True).start()
    faults: dict[str, object] = {}
    if mode == "local-cluster-homes-cut":
        cutter = threading.Thread(target=cut_the_homes, args=(spark, out, faults), daemon=True)
        cutter.start()
    batches = run()
    if tuple(int(x) for x in pyspark.__version__.split(".")[:2]) < (4, 2):
        # no admission control for Python sources: each AvailableNow run reads one capped batch
        while more := run():
            batches += more
    done.set()
    rows = [r.body for r in spark.read.parquet(os.path.join(out, "data")).collect()]
    result: dict[str, object] = {"rows": rows, "batches": batches}
    if mode == "local-cluster-kills":
        result["kills"] = kills
    if mode == "local-cluster-kill":
        result["killed"] = Path(out, "killed").read_text() if Path(out, "killed").exists() else ""
    if mode == "local-cluster-homes-cut":
        cutter.join(timeout=60)
        result["faults"] = faults
        result["service_logs"] = [Path(log).read_text(errors="replace") for _, log in services(spark)]
    if mode in CLUSTER_MODES:
        # local-cluster workers keep each executor's log under SPARK_HOME/work/<application id>/<executor>/
        home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
        work = os.path.join(home, "work", spark.sparkContext.applicationId)
        logs = [log for _, log in services(spark)]  # while the executors live: their services are found by them
        spark.stop()
        result["executors"] = len([e for e in glob.glob(os.path.join(work, "*")) if os.path.isdir(e)])
        result["pool"] = pool_figures(work)
        result["notes"] = notable([*glob.glob(os.path.join(work, "*", "stderr")), *logs])
        shutil.rmtree(work, ignore_errors=True)
    else:
        spark.stop()
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(result, f)


def executors_up(spark: object, count: int, timeout: float = 180.0) -> None:
    """Wait until ``count`` executors have registered, as on a cluster that is up before its query starts. A
    loaded machine can start one executor's JVM seconds after the others; the first batch's homes would then be
    placed over the executors already there, and the late one's service would take its share a batch later,
    throwing away that partition's read-ahead (what the product does when an executor joins a running query,
    not what these tests check)."""
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout
    while status().size() < count + 1:  # the driver's block manager is listed too
        if time.monotonic() > deadline:
            raise SystemExit(f"{status().size() - 1} of {count} executors registered in {timeout:.0f} s")
        time.sleep(0.2)


def kill_an_executor(spark: object, out: str) -> None:
    """Once the query has committed two micro-batches, SIGKILL one executor's JVM (its Python workers and its
    receiver service go with it); notes the pid killed in ``out``/killed."""
    app = spark.sparkContext.applicationId  # type: ignore[attr-defined]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        commits = glob.glob(os.path.join(out, "checkpoint", "commits", "[0-9]*"))
        if len(commits) >= 2:
            break
        time.sleep(0.1)
    for pid in executor_pids(app)[:1]:
        os.kill(pid, signal.SIGKILL)
        Path(out, "killed").write_text(str(pid))


def keep_killing(spark: object, done: threading.Event, kills: list[float]) -> None:
    """Until ``done``: SIGKILL one of the application's executor JVMs at random (seeded) while the first batch's
    tasks run, then every KILL_EVERY seconds, noting when. With Spark's default of 4 attempts a task, the query
    fails when a task is lost four times, so a replacement executor's first tasks must finish well inside the
    cadence (issue 64: after a kill in the first batch, that batch's tasks once waited 10 s each, and the query
    failed)."""
    import random

    rng = random.Random(64)
    app = spark.sparkContext.applicationId  # type: ignore[attr-defined]
    tracker = spark.sparkContext.statusTracker()  # type: ignore[attr-defined]
    started = time.monotonic()
    while not tracker.getActiveStageIds() and not done.wait(0.05):
        pass  # the first batch's stage has not started yet
    wait = 0.5  # the first kill: half a second into the first batch, as its tasks ask where their homes are
    while not done.wait(wait):
        wait = KILL_EVERY
        pids = executor_pids(app)
        if pids:
            os.kill(rng.choice(pids), signal.SIGKILL)
            kills.append(round(time.monotonic() - started, 1))


def executor_pids(app: str) -> list[int]:
    """The pids of application ``app``'s executor JVMs on this machine (local-cluster's), lowest first."""
    pids = []
    for entry in sorted(os.listdir("/proc"), key=lambda e: int(e) if e.isdigit() else -1):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if b"CoarseGrainedExecutorBackend" in cmd and app.encode() in cmd:
            pids.append(int(entry))
    return pids


def services(spark: object) -> list[tuple[int, str]]:
    """The receiver services of this application's executors: (pid, log file), each found by the executor JVM
    it watches (``--watch-pid``) and its ``--local-dir``."""
    app = spark.sparkContext.applicationId.encode()  # type: ignore[attr-defined]
    procs = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                procs[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
    jvms = {str(pid).encode() for pid, args in procs.items()
            if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in args and app in args}  # fmt: skip
    found = []
    for pid, args in sorted(procs.items()):
        watched = args[args.index(b"--watch-pid") + 1] if b"--watch-pid" in args else None
        if b"eventhubs_spark.executor.receiver_service" in args and watched in jvms:
            local_dir = args[args.index(b"--local-dir") + 1].decode()
            found.append((pid, os.path.join(local_dir, "eventhubs-receiver-service.log")))
    return found


def service_port(log: str) -> int | None:
    ports = re.findall(r"serving other executors on port (\d+)", Path(log).read_text(errors="replace"))
    return int(ports[-1]) if ports else None


def cut_the_homes(spark: object, out: str, faults: dict[str, object]) -> None:
    """Once two micro-batches are committed: knock on one home with a wrong key, an unknown query and no
    protocol at all; cut every home's TCP port (its listening socket and connections, ``ss -K``; the
    executors live on); then stop one home's service (SIGSTOP: it neither answers nor closes, as behind a
    firewall that drops) until a task away from home has found it unreachable, as its executor's log says,
    and let it go on. Notes what happened in ``faults``."""
    import socket
    import subprocess

    from eventhubs_spark.auth.secret import Secret
    from eventhubs_spark.interprocess.sealed_socket import RefusedError, client_handshake
    from eventhubs_spark.interprocess.task_ranges import QueryKey, new_query_key

    work = os.path.join(os.environ.get("SPARK_HOME") or os.path.dirname(__import__("pyspark").__file__), "work",
                        spark.sparkContext.applicationId)  # type: ignore[attr-defined]  # fmt: skip
    deadline = time.monotonic() + 300
    while len(glob.glob(os.path.join(out, "checkpoint", "commits", "[0-9]*"))) < 2:
        if time.monotonic() > deadline:
            return
        time.sleep(0.1)
    found = services(spark)
    faults["services"] = len(found)
    if not found:
        return
    victim, log = found[0]
    port = service_port(log)
    queries = re.findall(r"serves query ([0-9a-f]+)", Path(log).read_text(errors="replace"))
    assert port is not None and queries, Path(log).read_text(errors="replace")

    def knock(key: QueryKey) -> str:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            try:
                client_handshake(sock, key)
                return "accepted"
            except RefusedError as exc:
                return str(exc)

    faults["wrong_key"] = knock(QueryKey(queries[0], Secret("not-the-querys-key")))
    faults["unknown_query"] = knock(new_query_key())
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: a-stranger\r\n\r\n".ljust(64, b" "))
        try:
            faults["no_protocol"] = "closed" if sock.recv(100) == b"" else "answered"
        except ConnectionResetError:
            faults["no_protocol"] = "closed"
    for _, log in found:  # every home's port, cut
        cut = service_port(log)
        subprocess.run(["ss", "-K", "-tan", f"( sport = :{cut} or dport = :{cut} )"], capture_output=True, check=True)
        try:
            socket.create_connection(("127.0.0.1", cut), timeout=1).close()
            faults["still_open"] = cut  # ss -K did not cut it: the test fails on this
        except OSError:
            pass
    time.sleep(1.0)
    os.kill(victim, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        while time.monotonic() - stopped < 60 and not faults.get("unreachable"):
            for path in glob.glob(os.path.join(work, "*", "stderr")):
                if "cannot serve it" in Path(path).read_text(errors="replace"):
                    faults["unreachable"] = True
            time.sleep(0.1)
    finally:
        os.kill(victim, signal.SIGCONT)
    faults["stopped_for"] = round(time.monotonic() - stopped, 1)


LINE = re.compile(r"pid=(\d+) pool_hits=(\d+) pool_repositions=(\d+) pool_creates=(\d+)")


# What the executors and their services said about a link opened again or a partition read away from its home: a
# cluster test's failure message shows them (why a partition was attached again is otherwise lost with the logs).
NOTABLE = re.compile(r"displaced while|reopening|connection to \S+ ended|cannot serve it|reading in this worker")
# each task's read line ends with its reading process's links (a home service's, logged by tasks on every executor)
LINKS = re.compile(r"pid=(\d+) .*?(link_attaches=\d+ displaced_idle=\d+ displaced_reading=\d+ closed_idle=\d+ "
                   r"reconnects=\d+)")  # fmt: skip


def notable(paths: list[str]) -> list[str]:
    """The lines of ``paths`` that match :data:`NOTABLE`, each with its file's last two path parts, then each
    reading process's link counters at their highest (they only grow; the files are not in time order: tasks on
    several executors log the same home's, as in :func:`pool_figures`)."""
    lines: list[str] = []
    links: dict[str, tuple[int, str]] = {}
    for path in paths:
        try:
            text = Path(path).read_text(errors="replace")
        except OSError:
            continue
        where = os.path.join(*Path(path).parts[-2:])
        for line in text.splitlines():
            if NOTABLE.search(line):
                lines.append(f"{where}: {line.strip()[:300]}")
            elif m := LINKS.search(line):
                total = sum(int(n) for n in re.findall(r"=(\d+)", m.group(2)))
                if total >= links.get(m.group(1), (-1, ""))[0]:
                    links[m.group(1)] = (total, m.group(2))
    return lines + [f"pid {pid}: {counts}" for pid, (_, counts) in sorted(links.items())]


def pool_figures(work: str) -> dict[str, float]:
    """Sum the last pool figures of each process that read (a worker, or a receiver service: with homes, tasks
    on every executor log the figures of the home's service that served them), each process once, by pid."""
    last: dict[str, tuple[int, int, int]] = {}
    for path in glob.glob(os.path.join(work, "*", "stderr")):
        with open(path, errors="replace") as f:
            for line in f:
                m = LINE.search(line)
                if m:
                    figures = (int(m.group(2)), int(m.group(3)), int(m.group(4)))
                    if sum(figures) >= sum(last.get(m.group(1), (0, 0, 0))):  # a pool's counts only grow
                        last[m.group(1)] = figures
    hits = sum(v[0] for v in last.values())
    used = sum(sum(v) for v in last.values())
    return {"tasks": used, "hits": hits, "reuse_rate": hits / used if used else 0.0, "workers": len(last)}


if __name__ == "__main__":
    main(*sys.argv[1:])
