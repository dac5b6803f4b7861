"""Which executor is a partition's home: a balanced rendezvous placement, a pure function.

Spark gives a Python source's tasks no preferred locations, so each micro-batch a partition's task lands
on whichever executor has a free slot. The connector can still decide where each partition is *read
from Event Hubs*: its home, the one executor whose receiver service keeps the partition's link and
read-ahead. :func:`homes` says which, from nothing but the hub's name, the partition ids and the sorted
list of live executors, so every process that knows the same three things (the driver planning a batch,
a task) gets the same answer (how: :func:`homes`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping


def _rank(*parts: str) -> int:
    """A stable 64-bit hash (the same in every process and Python version, unlike ``hash()``)."""
    digest = hashlib.blake2b("\0".join(parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def homes(hub: str, partitions: Iterable[str], executors: Iterable[str]) -> dict[str, str]:
    """Each partition's home executor (an empty mapping without executors).

    * **Balanced.** With ``P`` partitions over ``E`` executors every executor is home to ``P // E`` or
      ``P // E + 1`` partitions: no executor more than one partition above another. Which executors take
      the one more is decided by a hash of the hub and the executor.
    * **Stable.** Each partition ranks the executors by a hash of (hub, partition, executor), rendezvous
      hashing's way, and takes the best-ranked one that still has room; partitions take their turn in an
      order of their own hash. When an executor joins or leaves, a partition keeps its home unless that
      executor was its home, or the room it relied on moved: measured over random hubs (``tests/unit/
      test_placement.py``), about 1.2x the partitions that must move at the least.
    """
    live = sorted(set(executors))
    wanted = sorted(set(partitions), key=lambda p: (_rank(hub.lower(), "turn", p), p))
    if not live:
        return {}
    quota = _quotas(hub, len(wanted), live)
    out: dict[str, str] = {}
    for partition in wanted:
        ranked = sorted(live, key=lambda e: (_rank(hub.lower(), partition, e), e), reverse=True)
        home = next(e for e in ranked if quota[e] > 0)
        quota[home] -= 1
        out[partition] = home
    return out


def _quotas(hub: str, partitions: int, live: list[str]) -> dict[str, int]:
    """How many partitions each executor is home to: ``partitions // len(live)``, one more for the first
    ``partitions % len(live)`` executors in the order of a hash of (hub, executor)."""
    each, extra = divmod(partitions, len(live))
    order = sorted(live, key=lambda e: (_rank(hub.lower(), "extra", e), e), reverse=True)
    return {e: each + (1 if i < extra else 0) for i, e in enumerate(order)}


def loads(placement: Mapping[str, str]) -> dict[str, int]:
    """How many partitions each executor is home to (for logs and tests)."""
    out: dict[str, int] = {}
    for executor in placement.values():
        out[executor] = out.get(executor, 0) + 1
    return out
