"""Local Spark as the tests and ``eventhubs-spark demo`` start it, from ``conf/spark-defaults.conf``.

The settings live in the source tree's ``conf/`` so there is one place to change them; an installed
package without the tree falls back to the same values built in.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FALLBACK = {
    "spark.master": "local[2]",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.memory": "1g",
}


def spark_defaults(path: Path | None = None) -> dict[str, str]:
    """``key value`` lines of a spark-defaults file; ``conf/...`` paths in values are made absolute."""
    path = path or ROOT / "conf" / "spark-defaults.conf"
    if not path.exists():
        return dict(FALLBACK)
    out = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        out[key] = value.strip().replace("=conf/", f"={ROOT}/conf/")
    return out


def local_session(app_name: str, **overrides: str) -> Any:
    """A local SparkSession with the project's defaults (and Python workers on this interpreter)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = {**spark_defaults(), **overrides}
    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
