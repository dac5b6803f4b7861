"""Unit tests of :mod:`eventhubs_spark.positions.partition_catalog`."""

from __future__ import annotations

import concurrent.futures
import logging
import pickle
import threading

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


class _Gated(Table):
    """A hub whose listings (after the first) wait for the test to let them answer, or fail."""

    def __init__(self, partitions: dict[str, tuple[int, int]]) -> None:
        super().__init__(partitions)
        self.gate = threading.Event()
        self.gate.set()
        self.fail = False

    def partition_ids(self) -> list[str]:
        assert self.gate.wait(10)
        if self.fail:
            raise ConnectionError("the management link dropped")
        return super().partition_ids()


def _settled(catalog: PartitionCatalog) -> None:
    running = catalog._listing
    if running is not None:
        concurrent.futures.wait([running], timeout=10)


def test_a_running_streams_listing_runs_in_the_background_and_is_taken_by_the_call_after_it(caplog):
    """Issue 64: a trigger whose executors vouch for every partition asks Event Hubs nothing else; the listing due
    once a minute must not hold it up. The first listing is the call's own; a later one runs on a thread, the call
    gets the ids listed before, and the call after the listing answered gets its ids."""
    table = _Gated({"0": (0, 1)})
    now = [0.0]
    catalog = PartitionCatalog("hub", lambda: table, clock=lambda: now[0])
    assert catalog.listed(60, background=True) == ["0"] and table.listings == 1  # the first: waited for
    now[0] = 61
    table.gate.clear()
    table.partitions["1"] = (0, 5)  # added to the hub
    assert catalog.listed(60, background=True) == ["0"], "the call does not wait for the listing"
    assert catalog.listed(60, background=True) == ["0"], "still on its way: one listing, not another"
    state = catalog.__getstate__()  # what pickling takes: a listing on its way does not travel
    assert catalog._listing is not None and state["_listing"] is None and state["_ids"] == ["0"]
    pickle.dumps({k: v for k, v in state.items() if k not in ("metadata", "clock")})  # (the test's lambdas)
    table.gate.set()
    _settled(catalog)
    assert table.listings == 2
    assert catalog.listed(60, background=True) == ["0", "1"], "the next call takes what the listing found"
    assert catalog.listed(60) == ["0", "1"] and table.listings == 2, "not due again until 60 s after it began"

    # a listing that fails: logged, the ids before are read, listed again once the interval has passed again
    now[0] = 130
    table.fail = True
    catalog.listed(60, background=True)
    _settled(catalog)
    with caplog.at_level(logging.WARNING, logger="eventhubs_spark.positions.partition_catalog"):
        assert catalog.listed(60, background=True) == ["0", "1"]
    assert "listing its partitions again failed (ConnectionError: the management link dropped)" in caplog.text
    now[0] = 150
    table.fail = False
    catalog.listed(60, background=True)
    assert catalog._listing is None, "not before the interval"
    now[0] = 191
    table.partitions["2"] = (0, 1)
    catalog.listed(60, background=True)
    _settled(catalog)
    assert catalog.listed(60, background=True) == ["0", "1", "2"]
    # without background (a batch read, a trigger that asks every partition anyway) the call lists itself
    now[0] = 252
    table.partitions["3"] = (0, 1)
    assert catalog.listed(60) == ["0", "1", "2", "3"]
