"""One local-cluster application registers at a time across the test processes, a second apart.

``local-cluster`` names its application ``app-<the second it registered>-0000`` and keeps each executor's work under
``SPARK_HOME/work/<that id>/<executor number>``. The suite's processes run side by side (``./dev test``), and each
starts local-cluster applications: two that register in the same second get the same id, share their executors'
work directories, and find each other's executors in any lookup by id (seen: the homes-cut test of one process found six
receiver services for its three executors and cut the firewall test's homes, whose logs it then removed with its own
work directory). Every test app that starts local-cluster does so inside :func:`distinct_application_id`.
"""

from __future__ import annotations

import fcntl
import math
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

LOCK = os.path.join(tempfile.gettempdir(), "eventhubs-spark-tests-local-cluster.lock")


@contextmanager
def distinct_application_id() -> Iterator[None]:
    """Start a local-cluster application inside: others wait for it, and for its registration's second to pass."""
    with open(LOCK, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
            # the application registered before the session was returned, in this second or an earlier one: the
            # next may register only once this second is over
            time.sleep(max(0.0, math.floor(time.time()) + 1.05 - time.time()))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
