"""Unit tests of :mod:`eventhubs_spark.positions.partition_catalog`."""

from __future__ import annotations

from eventhubs_spark.positions.partition_catalog import PartitionCatalog
from tests.unit.support.planning import Table


def test_the_catalog_lists_ids_once_for_a_batch_and_again_after_the_interval_for_a_stream():
    table = Table({"0": (0, 1)})
    now = [0.0]
    catalog = PartitionCatalog("hub", lambda: table, clock=lambda: now[0])
    catalog.infos()
    catalog.infos()
    assert table.listings == 1
    now[0] = 30
    catalog.infos(refresh_ids_after=60)
    assert table.listings == 1
    now[0] = 61
    catalog.infos(refresh_ids_after=60)
    assert table.listings == 2 and catalog.ids == ["0"]
