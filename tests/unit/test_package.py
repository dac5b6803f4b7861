"""Unit tests of :mod:`eventhubs_spark`."""

from __future__ import annotations

import pytest


def test_register_says_when_the_spark_server_cannot_import_the_package():
    """Under Spark Connect with the package on the client only, registering makes the server unpickle the
    source's class, which fails there: the error says where to install it (a later query's
    DATA_SOURCE_NOT_FOUND says nothing of the kind)."""
    import types

    import eventhubs_spark

    def refuse(_source: object) -> None:
        raise Exception("[PYTHON_DATA_SOURCE_ERROR] ModuleNotFoundError: No module named 'eventhubs_spark'")

    spark = types.SimpleNamespace(dataSource=types.SimpleNamespace(register=refuse))
    with pytest.raises(RuntimeError, match="install the package where the Spark Connect server"):
        eventhubs_spark.register(spark)
    done = types.SimpleNamespace(dataSource=types.SimpleNamespace(register=lambda _s: None))
    eventhubs_spark.register(done)  # a server that has it: nothing to say
