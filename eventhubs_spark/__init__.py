"""Azure Event Hubs for Spark 4, in pure Python on Spark's Python Data Source API.

``spark.readStream.format("eventhubs")`` and ``spark.read.format("eventhubs")`` work once the package
is installed (through the ``pyspark_eventhubs`` module Spark discovers); :func:`register` does the
same explicitly, e.g. for Spark Connect, where the class is shipped to the server.

Importing the package also points Spark's Python workers at this interpreter when nothing else
does (see :func:`_python_for_spark_workers`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

__version__ = "0.1.0"
# The public surface: register, and the version. The source and the sink Spark finds by name ("eventhubs"); the error
# types a user may catch are eventhubs_spark.errors'; the options' table is eventhubs_spark.options.
__all__ = ["__version__", "register"]


def _python_for_spark_workers() -> None:
    """Make Spark start its Python workers with this interpreter, unless the user chose one.

    Spark starts them with ``spark.pyspark.python``, else ``PYSPARK_PYTHON``, else ``python3`` from
    ``PATH``. A script run as ``.venv/bin/python job.py`` without activating the venv would get
    workers without this package, and ``format("eventhubs")`` would fail with
    ``DATA_SOURCE_NOT_FOUND``. The variable is read when a SparkContext starts, so this helps when
    the package is imported first (as ``import eventhubs_spark`` at the top of a script); a
    configured ``spark.pyspark.python`` still wins.
    """
    if sys.executable and "PYSPARK_PYTHON" not in os.environ:
        os.environ["PYSPARK_PYTHON"] = sys.executable


_python_for_spark_workers()


def register(spark: Any) -> None:
    """Register the ``eventhubs`` data source with ``spark`` (classic or Spark Connect).

    Needed only where Spark cannot find the installed package by itself (Spark Connect with the
    package on the client only). Where Spark already found it, nothing is done: registering again
    makes Spark warn that it replaced the statically registered source (Spark Connect 4.0 refuses it
    with ``DATA_SOURCE_ALREADY_EXISTS``, which is taken as done).
    """
    from eventhubs_spark.source import EventHubsDataSource

    session = getattr(spark, "_jsparkSession", None)  # classic Spark; absent under Spark Connect
    if session is not None:
        try:
            if session.sessionState().dataSourceManager().dataSourceExists(EventHubsDataSource.name()):
                return
        except Exception:  # another Spark version's internals: register as usual
            pass
    try:
        spark.dataSource.register(EventHubsDataSource)
    except Exception as exc:
        # Spark Connect 4.0 refuses to register a name the server found by itself (4.1+ replaces it):
        # the source is there either way.
        if "DATA_SOURCE_ALREADY_EXISTS" in str(getattr(exc, "getErrorClass", lambda: "")() or exc):
            return
        if "No module named 'eventhubs_spark'" in str(exc) or "No module named 'pyspark_eventhubs'" in str(exc):
            raise RuntimeError(
                "eventhubs_spark.register: the Spark server's Python cannot import eventhubs_spark, so it can "
                "neither register the eventhubs source nor run it (a query would fail with DATA_SOURCE_NOT_FOUND or "
                "this same error): install the package where the Spark Connect server and its Python workers run "
                "(on Databricks, a cluster library), not only on this client"
            ) from exc
        raise
