"""Fixtures of the connector's integration tests."""

from __future__ import annotations

import threading
import time

import pytest

from eventhubs_spark.executor import service_files
from eventhubs_spark.executor.receiver_service import ReceiverService
from eventhubs_spark.executor.service_client import _try_connect
from eventhubs_spark.process.runtime import Runtime


@pytest.fixture
def home_service(tmp_path, monkeypatch):
    """An executor's receiver service, run on a thread, and a worker runtime of that executor."""
    local = tmp_path / "blockmgr-home"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(local))
    where = service_files.place()
    assert where is not None
    service = ReceiverService(where.socket_path, str(local), None, idle_exit=600, pool=Runtime(reap_every=0).pool)
    threading.Thread(target=service.run, daemon=True).start()
    deadline = time.monotonic() + 10
    while _try_connect(where.socket_path) is None:  # listening (else the worker would start a service itself)
        assert time.monotonic() < deadline, "the service did not listen"
        time.sleep(0.02)
    yield service, Runtime(reap_every=0)
    local.rmdir() if not any(local.iterdir()) else None
