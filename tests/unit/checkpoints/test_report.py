"""Unit tests of :mod:`eventhubs_spark.checkpoints.report` (the store and the hub stood in for)."""

from __future__ import annotations

import time

from eventhubs_spark.checkpoints import Checkpoint, Ownership
from eventhubs_spark.positions.partition_catalog import PartitionInfo

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub"


def test_each_partition_shows_its_checkpoint_owner_and_lag_and_an_empty_or_unowned_one_shows_blanks(monkeypatch):
    from eventhubs_spark.checkpoints import blob, report
    from eventhubs_spark.process import runtime

    infos = {
        "0": PartitionInfo("0", 0, 99, "9900", None, False),  # checkpointed at 89: 10 behind
        "1": PartitionInfo("1", 50, 59, "5900", None, False),  # never checkpointed: all 10 retained behind
        "2": PartitionInfo("2", 0, -1, "-1", None, True),  # empty: no lag to show
    }
    now = time.time()
    ns = "ns.servicebus.windows.net"

    class Store:
        def list_checkpoints(self, namespace, hub, group):
            assert (namespace, hub, group) == (ns, "hub", "$Default")
            return [Checkpoint(ns, "hub", group, "0", 89, "8900")]

        def list_ownership(self, namespace, hub, group):
            return [Ownership(ns, "hub", group, "0", "query-a", now - 30), Ownership(ns, "hub", group, "1", "")]

    class Management:
        def partition_ids(self) -> list[str]:
            return ["2", "0", "1"]

        def partition_properties(self, ids: list[str]) -> dict[str, PartitionInfo]:
            return {p: infos[p] for p in ids}

    class Runtime:
        def management(self, settings, timeout):
            assert settings.hub == "hub"
            return Management()

    monkeypatch.setattr(blob.BlobCheckpointStore, "from_connection_string", staticmethod(lambda conn, box: Store()))
    monkeypatch.setattr(runtime, "current", lambda: Runtime())
    rows = report.checkpoints_report(CONN, "UseDevelopmentStorage=true", "checkpoints", "$Default")
    assert [r["partition"] for r in rows] == ["0", "1", "2"], "in partition order"
    assert rows[0] | {"owned for": None} == {"partition": "0", "checkpoint": 89, "offset": "8900", "owner": "query-a",
                                             "owned for": None, "last enqueued": 99, "lag": 10}  # fmt: skip
    assert rows[0]["owned for"] in ("30 s ago", "31 s ago")
    assert rows[1]["checkpoint"] == "" and rows[1]["owner"] == "(released)" and rows[1]["lag"] == 10
    assert rows[2]["last enqueued"] == "" and rows[2]["lag"] == "" and rows[2]["owner"] == ""
