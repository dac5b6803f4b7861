"""Unit tests of :mod:`eventhubs_spark.lag.report` (the report itself, against a hub and a Spark
checkpoint, in ``tests/integration/spark/test_lag_spark.py``)."""

from __future__ import annotations

import pytest

from eventhubs_spark.lag import LocalFolder
from eventhubs_spark.lag.report import checkpoint_folder


def test_a_checkpoint_location_is_a_local_folder_or_one_in_azure_storage_that_needs_its_account(tmp_path):
    assert isinstance(checkpoint_folder(str(tmp_path)), LocalFolder)
    assert isinstance(checkpoint_folder(f"file://{tmp_path}"), LocalFolder)
    with pytest.raises(ValueError, match="--storage-connection-string"):
        checkpoint_folder("abfss://checkpoints@acct.dfs.core.windows.net/queries/q1")
