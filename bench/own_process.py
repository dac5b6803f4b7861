"""A measurement in a process of its own: for what is set once per Spark process.

A pyspark process starts one JVM and keeps it, so a Spark context setting (the workers' socket) or the
environment the JVM and its workers inherit (EVENTHUBS_SPARK_GC_FREEZE) is measured in a child
``python -m bench.<module> ARGS...`` that prints its figures as JSON on its last line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

# Spark 4.1+: Python workers talk to their executor over a Unix domain socket instead of TCP on localhost
UNIX_SOCKET_CONF = "spark.python.unix.domain.socket.enabled"


def measure(module: str, *args: str, env: dict[str, str] | None = None) -> Any:
    """Run ``python -m module args`` (with ``env``, else this process's environment) and return the JSON
    on the last line it printed."""
    child = subprocess.run(
        [sys.executable, "-m", module, *args], env=env, check=True, stdout=subprocess.PIPE, text=True
    )
    return json.loads(child.stdout.strip().splitlines()[-1])
