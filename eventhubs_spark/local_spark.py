"""Local Spark as the tests and ``eventhubs-spark demo`` start it.

The settings are files of the package (``eventhubs_spark/conf/spark-defaults.conf`` and the
``log4j2.properties`` it points to), read through ``importlib.resources``: the same whether the
package runs from a checkout or from an installed wheel. ``{conf}`` in a value stands for that
directory.
"""

from __future__ import annotations

import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any


def conf_dir() -> Path:
    """The package's ``conf`` directory on disk."""
    return Path(str(resources.files("eventhubs_spark") / "conf"))


def spark_defaults(path: Path | None = None) -> dict[str, str]:
    """``key value`` lines of a spark-defaults file, ``{conf}`` replaced by the package's conf directory."""
    path = path or conf_dir() / "spark-defaults.conf"
    out = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        out[key] = value.strip().replace("{conf}", str(path.parent))
    return out


def local_session(app_name: str, **overrides: str) -> Any:
    """A local SparkSession with the package's defaults (and Python workers on this interpreter)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = {**spark_defaults(), **overrides}
    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
