"""Partition ownership and load balancing, the Event Hubs processors' cycle, with a fix.

Each cycle: list ownership; treat expired or released ones as unowned; count active owners (this
one included); the fair share is ``floor(N/k)`` to ``ceil(N/k)``; renew what this owner holds;
claim unowned partitions (greedy: up to the ceiling at once; balanced: one per cycle); with nothing
unowned, steal one from the owner holding the most. Claims are conditional on etags, so a lost race
drops the claim. Greedy runs its next cycle at once while unbalanced and gaining; otherwise after the interval.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from eventhubs_spark import defaults
from eventhubs_spark.checkpoints import CheckpointStore, Ownership

GREEDY, BALANCED = "greedy", "balanced"


@dataclass(frozen=True)
class BalancerConfig:
    strategy: str = defaults.LOAD_BALANCING_STRATEGY
    interval: float = defaults.LOAD_BALANCING_INTERVAL
    expiry: float = defaults.OWNERSHIP_EXPIRATION
    max_partitions: int | None = None

    def __post_init__(self) -> None:
        if self.strategy not in (GREEDY, BALANCED):
            raise ValueError(f"load balancing strategy must be 'balanced' or 'greedy', got {self.strategy!r}")


def active_ownerships(ownerships: Sequence[Ownership], now: float, expiry: float) -> dict[str, Ownership]:
    """Ownerships neither released nor expired, by partition."""
    return {
        o.partition_id: o
        for o in ownerships
        if not o.released and o.last_modified_time is not None and o.last_modified_time + expiry >= now
    }


def fair_share(partitions: int, owners: int, max_partitions: int | None = None) -> tuple[int, int]:
    floor, ceiling = partitions // owners, math.ceil(partitions / owners)
    if max_partitions is not None:
        floor, ceiling = min(floor, max_partitions), min(ceiling, max_partitions)
    return floor, ceiling


def plan(
    ownerships: Sequence[Ownership],
    partition_ids: Sequence[str],
    owner_id: str,
    template: Ownership,
    now: float,
    config: BalancerConfig,
    rng: random.Random,
) -> list[Ownership]:
    """The claims ``owner_id`` makes this cycle: renewals, new claims, and at most one steal."""
    known = {o.partition_id: o for o in ownerships}
    active = active_ownerships(ownerships, now, config.expiry)
    by_owner: dict[str, list[Ownership]] = {owner_id: []}
    for o in active.values():
        if o.partition_id in partition_ids:
            by_owner.setdefault(o.owner_id, []).append(o)
    floor, ceiling = fair_share(len(partition_ids), len(by_owner), config.max_partitions)
    mine = by_owner[owner_id]
    claims = [replace(o, owner_id=owner_id) for o in mine]
    want = ceiling - len(mine)
    if want <= 0:
        return claims
    claimable = sorted((p for p in partition_ids if p not in active), key=_pid_order)
    if claimable:
        count = min(len(claimable), want if config.strategy == GREEDY else 1)
        for pid in rng.sample(claimable, count):
            base = known.get(pid)
            claims.append(
                replace(
                    template,
                    partition_id=pid,
                    owner_id=owner_id,
                    etag=base.etag if base else None,
                    last_modified_time=None,
                )
            )
        return claims
    others = [(len(v), k) for k, v in by_owner.items() if k != owner_id and v]
    if not others:
        return claims
    most = max(n for n, _ in others)
    if len(mine) < floor or most > ceiling:
        victim_owner = rng.choice(sorted(k for n, k in others if n == most))
        victim = rng.choice(sorted(by_owner[victim_owner], key=lambda o: _pid_order(o.partition_id)))
        claims.append(replace(victim, owner_id=owner_id))  # keeps its etag: 412 if the owner renewed first
    return claims


def _pid_order(pid: str) -> tuple[int, str]:
    return (int(pid), "") if pid.isascii() and pid.isdigit() else (1 << 62, pid)


@dataclass(frozen=True)
class Tenure:
    """One uninterrupted holding of a partition by this owner, as the cycles saw it.

    ``since`` is the store's time of the claim that began it. ``taken_from`` names the live owner it
    was stolen from (that owner may still be reading it), None when it was unowned, released or
    expired. ``resumed`` says the store already named this owner when the tenure began (a restart
    under the same owner id), so nobody else held it in between.
    """

    since: float
    taken_from: str | None = None
    resumed: bool = False


@dataclass
class CycleResult:
    owned: list[str]
    balanced: bool
    next_delay: float


class OwnershipManager:
    """Runs the cycle for one owner against a store; the clock and random source are injected."""

    def __init__(
        self,
        store: CheckpointStore,
        namespace: str,
        hub: str,
        consumer_group: str,
        owner_id: str,
        partition_ids: Callable[[], Sequence[str]],
        config: BalancerConfig | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.owner_id = owner_id
        self.partition_ids = partition_ids
        self.config = config or BalancerConfig()
        self.clock = clock
        self.rng = rng or random.Random()
        self.template = Ownership(namespace, hub, consumer_group, "", owner_id)
        self.owned: dict[str, Ownership] = {}
        self.tenures: dict[str, Tenure] = {}

    def _list(self) -> list[Ownership]:
        t = self.template
        return self.store.list_ownership(t.fully_qualified_namespace, t.eventhub_name, t.consumer_group)

    def cycle(self) -> CycleResult:
        ids = list(self.partition_ids())
        current = self._list()
        now = self.clock()
        claims = plan(current, ids, self.owner_id, self.template, now, self.config, self.rng)
        won = self.store.claim_ownership(claims)
        gained = len(set(o.partition_id for o in won) - set(self.owned))
        listed = {o.partition_id: o for o in current}
        live = active_ownerships(current, now, self.config.expiry)
        tenures = {}
        for o in won:
            held = self.tenures.get(o.partition_id)
            if held is None:
                before = listed.get(o.partition_id)
                resumed = before is not None and before.owner_id == self.owner_id
                victim = live.get(o.partition_id)
                taken_from = victim.owner_id if victim is not None and victim.owner_id != self.owner_id else None
                since = o.last_modified_time if o.last_modified_time is not None else now
                held = Tenure(since, taken_from, resumed)
            tenures[o.partition_id] = held
        self.owned = {o.partition_id: o for o in won}
        self.tenures = tenures
        after = active_ownerships(self._list(), self.clock(), self.config.expiry)
        owners = {o.owner_id for o in after.values()} | {self.owner_id}
        floor, ceiling = fair_share(len(ids), len(owners), self.config.max_partitions)
        counts = [sum(1 for o in after.values() if o.owner_id == owner) for owner in owners]
        balanced = all(floor <= c <= ceiling for c in counts) and len(after) == len(ids)
        # Greedy cycles again at once while it is unbalanced and still gaining partitions.
        delay = 0.0 if self.config.strategy == GREEDY and not balanced and gained else self.config.interval
        return CycleResult(sorted(self.owned, key=_pid_order), balanced, delay)

    def release(self) -> None:
        """Give up every partition (on shutdown), so others take them without waiting for expiry."""
        self.store.claim_ownership([replace(o, owner_id="") for o in self.owned.values()])
        self.owned = {}
        self.tenures = {}
