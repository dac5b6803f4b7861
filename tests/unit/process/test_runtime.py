"""Unit tests of :mod:`eventhubs_spark.process.runtime`."""

from __future__ import annotations

import json
import os

import pytest

from eventhubs_spark.errors import OptionError
from eventhubs_spark.executor import service_files
from eventhubs_spark.process import runtime
from eventhubs_spark.process.runtime import Runtime
from tests.unit.support.service import request, scripted


def test_the_process_pool_reaps_on_a_thread():
    from eventhubs_spark.process.runtime import Runtime

    assert Runtime().pool.reap_every > 0  # a process's runtime closes idle receivers even when no task comes


def test_nothing_is_frozen_outside_a_spark_task_or_when_the_environment_says_so(monkeypatch):
    import gc

    from pyspark import TaskContext

    from eventhubs_spark.process import runtime

    frozen: list[bool] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    monkeypatch.setattr(runtime, "_tasks_started", 0)
    TaskContext._setTaskContext(None)
    for _ in range(3):
        runtime.task_started()  # a direct call, as in these tests, not a Spark task
    assert frozen == [] and runtime._tasks_started == 0
    TaskContext(attemptNumber=0, partitionId=0, stageId=0, taskAttemptId=0)
    try:
        for value in ("false", "0", " Off "):
            monkeypatch.setenv(runtime.GC_FREEZE_ENV, value)
            monkeypatch.setattr(runtime, "_tasks_started", 0)
            for _ in range(3):
                runtime.task_started()
            assert frozen == [], value
        monkeypatch.setenv(runtime.GC_FREEZE_ENV, "true")
        monkeypatch.setattr(runtime, "_tasks_started", 0)
        for _ in range(3):
            runtime.task_started()
        assert frozen == [True]
    finally:
        TaskContext._setTaskContext(None)


def test_a_misspelt_gc_freeze_setting_fails_each_task_naming_the_variable(monkeypatch):
    from pyspark import TaskContext

    from eventhubs_spark.process import runtime

    monkeypatch.setattr(runtime, "_tasks_started", 0)
    monkeypatch.setenv(runtime.GC_FREEZE_ENV, "flase")
    TaskContext(attemptNumber=0, partitionId=0, stageId=0, taskAttemptId=0)
    try:
        for _ in range(2):  # not only the task that would freeze: every one
            with pytest.raises(OptionError) as caught:
                runtime.task_started()
            message = str(caught.value)
            assert "EVENTHUBS_SPARK_GC_FREEZE" in message and "'flase'" in message
            assert "spark.executorEnv.EVENTHUBS_SPARK_GC_FREEZE=false" in message
        for value, wanted in (("yes", True), (" ON ", True), ("1", True), ("no", False), ("0", False)):
            monkeypatch.setenv(runtime.GC_FREEZE_ENV, value)
            assert runtime.gc_freeze_wanted() is wanted, value
        monkeypatch.delenv(runtime.GC_FREEZE_ENV)
        assert runtime.gc_freeze_wanted() is True
    finally:
        TaskContext._setTaskContext(None)


def test_without_a_service_the_worker_reads_for_itself(monkeypatch):
    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)
    worker = Runtime(reap_every=0)
    read_here, starts = scripted()
    monkeypatch.setattr(runtime, "read_here", read_here)
    stats: dict = {}
    assert sum(b.num_rows for b in worker.read(request(0, 25), True, stats)) == 25
    assert stats["via"] == "worker" and starts == [0]


def test_a_socket_directory_with_a_wrong_mode_is_not_used_and_the_worker_reads_for_itself(
    tmp_path, monkeypatch, caplog
):
    import tempfile

    private = tmp_path / f"ehs-{os.getuid()}"
    private.mkdir(mode=0o755)
    os.chmod(private, 0o755)
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    local = tmp_path / "blockmgr-z"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(local))
    worker = Runtime(reap_every=0)
    with pytest.raises(PermissionError, match="mode 0700"):
        service_files.place()
    read_here, starts = scripted()
    monkeypatch.setattr(runtime, "read_here", read_here)
    stats: dict = {}
    with caplog.at_level("WARNING", logger="eventhubs_spark"):
        assert sum(b.num_rows for b in worker.read(request(0, 25), True, stats)) == 25
    assert stats["via"] == "worker" and starts == [0]
    assert any("mode 0700" in r.getMessage() for r in caplog.records)


def test_the_stream_runner_freezes_once_after_its_first_trigger_and_nowhere_else(monkeypatch):
    """Spark's stream runner process (one per streaming source) freezes what it holds once its first trigger is
    planned (issue 64: a full collection there took 22 ms of a 1,024-partition trigger); a reader planned in any
    other process (these tests) changes nothing, and EVENTHUBS_SPARK_GC_FREEZE=false leaves the runner alone."""
    import gc
    import sys
    import types

    frozen: list[bool] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    monkeypatch.delenv(runtime.GC_FREEZE_ENV, raising=False)
    monkeypatch.setattr(runtime, "_runner_frozen", False)
    for _ in range(3):
        runtime.stream_runner_planned()  # pytest's process: not the runner
    assert frozen == [] and runtime._runner_frozen is False

    runner = types.ModuleType("__main__")
    runner.__file__ = f"/opt/spark/python/lib/pyspark.zip/pyspark/sql/streaming/{runtime.STREAM_RUNNER}"
    monkeypatch.setitem(sys.modules, "__main__", runner)
    for _ in range(3):
        runtime.stream_runner_planned()
    assert frozen == [True], "frozen once, at the first trigger"

    monkeypatch.setattr(runtime, "_runner_frozen", False)
    monkeypatch.setenv(runtime.GC_FREEZE_ENV, "false")
    runtime.stream_runner_planned()
    assert frozen == [True], "the environment said no"

    monkeypatch.setattr(runtime, "_runner_frozen", False)
    monkeypatch.setenv(runtime.GC_FREEZE_ENV, "flase")
    with pytest.raises(OptionError) as caught:
        runtime.stream_runner_planned()
    assert "EVENTHUBS_SPARK_GC_FREEZE" in str(caught.value) and "'flase'" in str(caught.value)
    runtime.stream_runner_planned()  # said once: later triggers go on
    assert frozen == [True]


_RUNNER_SCRIPT = """
import json, pathlib, sys, time
sys.path.insert(0, {root!r})
from eventhubs_spark.process import runtime
from tests.unit.checkpoints.test_mirror import infos, mirror_with

class Store:  # a storage account taking its time over a trigger's blobs
    def update_checkpoints(self, checkpoints):
        items = list(checkpoints)
        print("writing", flush=True)
        time.sleep(1.5)
        pathlib.Path({out!r}).write_text(json.dumps({{c.partition_id: c.sequence_number for c in items}}))

mirror = mirror_with(Store())
if sys.argv[1] == "flush":
    runtime.flush_on_termination(mirror.settle)  # as stream_runner_planned does at the reader's first trigger
mirror.mirror({{"0": 5}}, infos({{"0": 5}}), background=True)  # the next batch runs while this is written
sys.stdin.read()  # the runner waits for Spark's next call
"""


@pytest.mark.parametrize("flush", [True, False])
def test_the_stream_runner_ended_by_spark_finishes_its_checkpoint_write_first(tmp_path, flush):
    """Spark ends the stream runner with SIGTERM; a checkpoint-store write on its way then was lost (the store
    stayed a batch behind the query, and whoever resumed from it read that batch again). The runner now finishes
    the write, then ends as SIGTERM ends it. Without the flush (the control) the write is lost, as before."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "written.json"
    script = tmp_path / runtime.STREAM_RUNNER  # the name pyspark's runner has: where the connector flushes
    script.write_text(_RUNNER_SCRIPT.format(root=str(Path(__file__).resolve().parents[3]), out=str(out)))
    proc = subprocess.Popen([sys.executable, str(script), "flush" if flush else "no"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "writing", proc.stderr
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, proc.stderr.read() if proc.stderr else "")
    if flush:
        assert out.exists(), "the write on its way was lost"
        assert json.loads(out.read_text()) == {"0": 4}
    else:
        assert not out.exists()


def test_a_task_read_from_its_ranges_homes_still_has_its_own_service_told_of_the_query_once(monkeypatch):
    """Issue 87: packed tasks are few, so a task whose ranges all have a home elsewhere still tells its own
    executor's service of the query (which tells the driver, so the executor can become a home): once per process
    and query, and a service that cannot be told does not stop the read."""
    import dataclasses

    from eventhubs_spark.interprocess.task_ranges import DriverAddress, Home, new_query_key

    home = Home("b", ("127.0.0.1",), 4000)
    query = new_query_key()
    homed = dataclasses.replace(request(0, 10), homes=True, query=query, driver=DriverAddress(("127.0.0.1",), 1),
                                home=home)  # fmt: skip

    class Client:
        executor = "a"
        hellos: list[str] = []

        def hello(self, req):
            self.hellos.append(req.partition)
            raise OSError("the service went away")

    client = Client()
    rt = Runtime(reap_every=0)
    monkeypatch.setattr(runtime.driver_channel.REACH, "reachable", lambda address: True)
    assert rt._home_of(homed, client) == home
    assert rt._home_of(dataclasses.replace(homed, partition="4"), client) == home
    assert client.hellos == ["3"], "told once, though the telling failed"
    other = dataclasses.replace(homed, query=new_query_key())
    assert rt._home_of(other, client) == home and client.hellos == ["3", "3"], "another query: told again"
