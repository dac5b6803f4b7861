"""Fixtures several unit test files share."""

from __future__ import annotations

import builtins
import json
import os
import sys
import threading
import time
from typing import Any

import pytest

from eventhubs_spark.executor import receiver_service, service_client, service_files
from eventhubs_spark.process.runtime import Runtime
from eventhubs_spark.registry import client as registry_module
from tests.unit.support.avro import NAMESPACE
from tests.unit.support.service_credential import STANDIN


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    """Schemas by id, as if fetched from a registry (the process cache the decoder asks first)."""
    monkeypatch.setattr(registry_module, "_SCHEMAS", {})
    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)
    from eventhubs_spark.avro import decode

    monkeypatch.setattr(decode, "_DECODERS", {})

    def register(sid: str, schema: Any) -> None:
        registry_module._SCHEMAS[(NAMESPACE, sid)] = json.dumps(schema)

    return register


@pytest.fixture
def in_spark_task():
    """What a Spark Python worker has while it runs a task: a TaskContext."""
    from pyspark import TaskContext

    TaskContext._setTaskContext(None)
    context = TaskContext(attemptNumber=0, partitionId=0, stageId=0, taskAttemptId=0)
    yield context
    TaskContext._setTaskContext(None)


@pytest.fixture
def no_databricks(monkeypatch):
    monkeypatch.setitem(sys.modules, "databricks", None)  # import fails, as off Databricks
    monkeypatch.setitem(sys.modules, "databricks.service_credentials", None)
    monkeypatch.delattr(builtins, "dbutils", raising=False)


@pytest.fixture
def standin(monkeypatch):
    monkeypatch.syspath_prepend(STANDIN)
    for name in ("databricks", "databricks.service_credentials"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setenv("EVENTHUBS_TEST_SERVICE_CREDENTIALS", '{"eventhubs-reader": {"tenant": "t", "client": "c", '
                       '"secret": "s", "authority": "https://127.0.0.1:1"}}')  # fmt: skip


@pytest.fixture
def running(tmp_path, monkeypatch):
    """A service on a socket in tmp_path, run on a thread, and the client's place pointing at it."""
    local = tmp_path / "blockmgr-x"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(local))
    where = service_files.place()
    assert where is not None
    svc = receiver_service.ReceiverService(
        where.socket_path, str(local), None, idle_exit=600, pool=Runtime(reap_every=0).pool
    )
    thread = threading.Thread(target=svc.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while service_client._try_connect(where.socket_path) is None:
        assert time.monotonic() < deadline, "the service did not listen"
        time.sleep(0.02)
    worker = Runtime(reap_every=0)  # a worker of that executor: it finds the service by SPARK_LOCAL_DIRS
    yield where, svc, worker
    os.rmdir(local) if local.exists() and not any(local.iterdir()) else None
    thread.join(5)
