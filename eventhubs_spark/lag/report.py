"""How far behind a query is now, read from its Spark checkpoint location and the hub: ``eventhubs-spark lag``.

The figures are the ones its driver works out each trigger (:mod:`~eventhubs_spark.lag`), from the last
committed batch, the lag files the driver writes and the partitions' properties asked now.
"""

from __future__ import annotations

import time
from typing import Any


# -- lag ---------------------------------------------------------------------------------------------
def lag_report(
    options: dict[str, str],
    checkpoint_location: str,
    storage: str | None = None,
    now: float | None = None,
    folder: Any = None,
) -> dict[str, Any]:
    """How far behind a query is now, per partition: where its Spark checkpoint's last committed batch left each
    partition, the partition's latest event (asked of the hub now), the lag in events and in time, the age of
    the last commit, and stalled partitions (as its driver last called them in the lag files, or events waiting
    with no batch committed for ``eventhubs.lag.stalledAfter``). ``storage``: a storage account's connection
    string, for a checkpoint location in Azure Storage (``abfss://``, ``wasbs://``, ``https://``); ``folder``: the
    location already opened (:func:`checkpoint_folder`), as ``lag --watch`` keeps it between refreshes."""
    from eventhubs_spark.lag import LagFiles, LagTracker, last_commit
    from eventhubs_spark.options import STREAM, read_options
    from eventhubs_spark.positions import geo_segments
    from eventhubs_spark.process import runtime

    typed = read_options(options, STREAM)
    hub = typed.settings.hub
    folder = checkpoint_folder(checkpoint_location, storage) if folder is None else folder
    commit = last_commit(folder, hub)
    management = runtime.current().management(typed.settings, typed.operation_timeout)
    infos = management.partition_properties(management.partition_ids())
    committed = dict(commit.positions) if commit else {}
    files = LagFiles(checkpoint_location, hub, folder)
    recent = files.reports(last=10)
    tracker = LagTracker(hub)
    said: dict[str, str | None] = {}
    for p, (end, micros) in files.reads().items():  # what the tasks read since the newest trigger file
        tracker.read(p, end, micros)
    for report in recent:  # the driver's figures where they stand where the checkpoint does
        for p, lag in report.partitions.items():
            if committed.get(p) == lag.committed:
                if lag.last_read is not None:
                    tracker.read(p, lag.committed, int(lag.last_read.timestamp() * 1_000_000))
                said[p] = lag.stalled
    figures = tracker.observe(committed, infos, batch_planned=False)
    now = time.time() if now is None else now
    age = None if commit is None else max(0.0, now - commit.committed_at.timestamp())
    partitions: dict[str, Any] = {}
    for p in sorted(infos, key=int):
        row = figures.partitions.get(p)
        stalled = said.get(p) if row is not None and row.events else None
        if row is not None and row.events and not stalled and age is not None and age >= typed.stalled_after:
            stalled = f"{row.events} events waiting, no batch committed for {age:.0f} s (is the query running?)"
        partitions[p] = {"committed": None, "latest": geo_segments.show(infos[p].end), "eventsBehind": None,
                         "secondsBehind": None, "lastEnqueuedTime": None, "lastReadEnqueuedTime": None,
                         "stalled": None}  # fmt: skip
        if row is not None:
            partitions[p] = {**row.to_json(), "stalled": stalled}
    summary = figures.summary()
    summary["stalledPartitions"] = [p for p, v in partitions.items() if v["stalled"]]
    return {
        "hub": hub,
        "checkpointLocation": checkpoint_location,
        "batch": None if commit is None else commit.batch,
        "committedAt": None if commit is None else commit.committed_at.isoformat(),
        "commitAgeSeconds": None if age is None else round(age, 3),
        **summary,
        "partitions": partitions,
    }


def checkpoint_folder(location: str, storage: str | None = None) -> Any:
    """A checkpoint location to read: a local path (``file:``, ``dbfs:/`` through ``/dbfs``), or one in Azure
    Storage read with ``storage`` (a connection string): ``abfss://container@account.dfs.core.windows.net/path``,
    ``wasbs://container@account.blob.core.windows.net/path``, ``https://account.blob.core.windows.net/container/
    path``, or Azurite's ``http://127.0.0.1:10000/devstoreaccount1/container/path``."""
    from eventhubs_spark.checkpoints.blob import BlobFolder, blob_location
    from eventhubs_spark.lag import LocalFolder

    try:
        return LocalFolder(location)
    except ValueError:
        pass
    container, prefix = blob_location(location)
    if not storage:
        raise ValueError(f"{location!r} is in Azure Storage: pass --storage-connection-string (or set "
                         "CHECKPOINT_STORE_CONNECTION_STRING) for its account")  # fmt: skip
    return BlobFolder.from_connection_string(storage, container, prefix, location)
