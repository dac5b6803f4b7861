"""What the blob checkpoint store holds for a hub now: per partition its checkpoint, owner and lag.

``eventhubs-spark checkpoints`` prints it; it reads the store and asks the hub, and writes nothing.
"""

from __future__ import annotations

import time
from typing import Any


# -- checkpoints -------------------------------------------------------------------------------------
def checkpoints_report(
    connection_string: str, store_connection_string: str, container: str, consumer_group: str
) -> list[dict[str, Any]]:
    """Per partition: the store's checkpoint, owner and ownership age, the partition's end, and the lag."""
    from eventhubs_spark.auth.settings import parse_connection_string
    from eventhubs_spark.checkpoints.blob import BlobCheckpointStore
    from eventhubs_spark.process import runtime

    settings = parse_connection_string(connection_string)
    store = BlobCheckpointStore.from_connection_string(store_connection_string, container)
    management = runtime.current().management(settings, 60.0)
    infos = management.partition_properties(management.partition_ids())
    ns, hub = settings.namespace, settings.hub
    checkpoints = {c.partition_id: c for c in store.list_checkpoints(ns, hub, consumer_group)}
    owners = {o.partition_id: o for o in store.list_ownership(ns, hub, consumer_group)}
    now = time.time()
    rows = []
    for pid in sorted(infos, key=int):
        info, checkpoint, owner = infos[pid], checkpoints.get(pid), owners.get(pid)
        seq = checkpoint.sequence_number if checkpoint else None
        last = info.last_enqueued_sequence_number if not info.is_empty else None
        rows.append(
            {
                "partition": pid,
                "checkpoint": "" if seq is None else seq,
                "offset": (checkpoint.offset or "") if checkpoint else "",
                "owner": (owner.owner_id or "(released)") if owner else "",
                "owned for": "" if owner is None or owner.last_modified_time is None
                else f"{now - owner.last_modified_time:.0f} s ago",
                "last enqueued": "" if last is None else last,
                "lag": "" if last is None else last - (seq if seq is not None else info.beginning_sequence_number - 1),
            }
        )  # fmt: skip
    return rows
