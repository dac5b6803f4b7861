"""Unit tests of :mod:`eventhubs_spark.checkpoints.balancer`."""

from __future__ import annotations

import random

import pytest

from eventhubs_spark.checkpoints import InMemoryCheckpointStore, Ownership
from eventhubs_spark.checkpoints.balancer import (
    BALANCED,
    GREEDY,
    BalancerConfig,
    OwnershipManager,
    fair_share,
    plan,
)
from tests.unit.support.checkpoints import CG, HUB, NS


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("n", "k", "expected"), [(32, 3, (10, 11)), (8, 4, (2, 2)), (3, 5, (0, 1))])
def test_fair_share(n, k, expected):
    assert fair_share(n, k) == expected


def test_plan_greedy_claims_up_to_the_ceiling_and_balanced_one():
    template = Ownership(NS, HUB, CG, "", "a")
    ids = [str(i) for i in range(8)]
    rng = random.Random(1)
    greedy = plan([], ids, "a", template, 0.0, BalancerConfig(strategy=GREEDY), rng)
    balanced = plan([], ids, "a", template, 0.0, BalancerConfig(strategy=BALANCED), rng)
    assert len(greedy) == 8 and len(balanced) == 1


def test_plan_steals_from_an_owner_above_the_ceiling():
    # The Python SDK's stuck state: [12, 10, 10] over 32 partitions. "c" (10) is below the ceiling (11)
    # while "a" holds 12 > 11: c must steal one from a.
    ids = [str(i) for i in range(32)]
    owners = ["a"] * 12 + ["b"] * 10 + ["c"] * 10
    now = 100.0
    current = [Ownership(NS, HUB, CG, str(i), o, now, f"e{i}") for i, o in enumerate(owners)]
    claims = plan(current, ids, "c", Ownership(NS, HUB, CG, "", "c"), now, BalancerConfig(GREEDY), random.Random(0))
    stolen = [c for c in claims if c.partition_id not in {o.partition_id for o in current if o.owner_id == "c"}]
    assert len(stolen) == 1
    victim = next(o for o in current if o.partition_id == stolen[0].partition_id)
    assert victim.owner_id == "a" and stolen[0].etag == victim.etag


def test_expired_and_released_ownerships_are_claimable():
    ids = ["0", "1"]
    current = [Ownership(NS, HUB, CG, "0", "gone", 0.0, "e0"), Ownership(NS, HUB, CG, "1", "", 1000.0, "e1")]
    claims = plan(current, ids, "me", Ownership(NS, HUB, CG, "", "me"), 1000.0, BalancerConfig(GREEDY, expiry=60),
                  random.Random(0))  # fmt: skip
    assert sorted(c.partition_id for c in claims) == ["0", "1"]
    assert {c.partition_id: c.etag for c in claims} == {"0": "e0", "1": "e1"}


class Simulation:
    """Owners sharing one in-memory store, cycling in a random order each round."""

    def __init__(self, partitions: int, strategy: str, seed: int) -> None:
        self.clock = Clock()
        self.store = InMemoryCheckpointStore(clock=self.clock)
        self.ids = [str(i) for i in range(partitions)]
        self.config = BalancerConfig(strategy=strategy, interval=10, expiry=60)
        self.rng = random.Random(seed)
        self.managers: dict[str, OwnershipManager] = {}

    def join(self, name: str) -> None:
        self.managers[name] = OwnershipManager(self.store, NS, HUB, CG, name, lambda: self.ids, self.config,
                                               clock=self.clock, rng=random.Random(self.rng.random()))  # fmt: skip

    def round(self) -> None:
        self.clock.now += self.config.interval
        names = list(self.managers)
        self.rng.shuffle(names)
        for name in names:
            result = self.managers[name].cycle()
            while result.next_delay == 0:  # greedy, gaining and not balanced yet: cycle again at once
                result = self.managers[name].cycle()

    def counts(self) -> dict[str, int]:
        active = [o for o in self.store.list_ownership(NS, HUB, CG)
                  if o.owner_id and o.last_modified_time + self.config.expiry >= self.clock.now]  # fmt: skip
        out = {name: 0 for name in self.managers}
        for o in active:
            out[o.owner_id] = out.get(o.owner_id, 0) + 1
        return out

    def within_one(self, counts: dict[str, int]) -> bool:
        owners = [n for n in counts if n in self.managers]
        if sum(counts[n] for n in owners) != len(self.ids):
            return False
        floor, ceiling = fair_share(len(self.ids), len(owners))
        return all(floor <= counts[n] <= ceiling for n in owners)

    def run_until_balanced(self, rounds: int) -> int:
        for r in range(1, rounds + 1):
            self.round()
            if self.within_one(self.counts()):
                return r
        raise AssertionError(f"not balanced after {rounds} rounds: {self.counts()}")


@pytest.mark.parametrize("strategy", [GREEDY, BALANCED])
@pytest.mark.parametrize("seed", range(5))
def test_joining_leaving_and_crashing_owners_converge_within_one(strategy, seed):
    sim = Simulation(32, strategy, seed)
    for name in ("a", "b", "c"):
        sim.join(name)
    sim.run_until_balanced(60)
    # hold steady: more rounds change nothing and keep everyone within one
    before = sim.counts()
    for _ in range(5):
        sim.round()
    assert sim.within_one(sim.counts()) and sim.counts() == before
    # a fourth joins
    sim.join("d")
    sim.run_until_balanced(60)
    # one leaves cleanly (releases): the others take its partitions without waiting for expiry
    sim.managers["b"].release()
    del sim.managers["b"]
    rounds = sim.run_until_balanced(60)
    assert rounds < 60
    # one crashes (stops renewing): after expiry the rest take over
    del sim.managers["c"]
    sim.run_until_balanced(60)
    assert set(sim.counts()) >= {"a", "d"}


def test_greedy_first_owner_takes_everything_then_shares():
    sim = Simulation(8, GREEDY, 3)
    sim.join("a")
    sim.round()
    assert sim.counts() == {"a": 8}
    sim.join("b")
    sim.run_until_balanced(20)
    assert sim.counts() == {"a": 4, "b": 4}


def test_max_partitions_caps_an_owner():
    sim = Simulation(8, GREEDY, 0)
    sim.config = BalancerConfig(strategy=GREEDY, interval=10, expiry=60, max_partitions=3)
    sim.join("a")
    sim.round()
    assert sim.counts()["a"] == 3


def test_bad_strategy():
    with pytest.raises(ValueError, match="balanced' or 'greedy"):
        BalancerConfig(strategy="fast")


# -- ownership mode: tenures and hand-over --
def test_tenures_say_who_a_partition_was_taken_from_and_whether_it_was_ours():
    from eventhubs_spark.checkpoints.balancer import BalancerConfig, OwnershipManager

    clock = Clock()
    store = InMemoryCheckpointStore(clock)
    config = BalancerConfig(strategy="greedy", interval=10, expiry=60)

    def manager(name: str) -> OwnershipManager:
        return OwnershipManager(store, "ns", "hub", "$default", name, lambda: ["0", "1"], config, clock=clock)

    a = manager("a")
    a.cycle()
    assert set(a.tenures) == {"0", "1"} and all(t.taken_from is None and not t.resumed for t in a.tenures.values())
    first = dict(a.tenures)
    clock.now += 5
    a.cycle()
    assert a.tenures == first, "a renewal continues the tenure"
    b = manager("b")
    clock.now += 1
    b.cycle()
    (stolen,) = b.tenures.values()
    assert stolen.taken_from == "a" and stolen.since == float(int(clock.now))
    # a restarted "a" (new manager, same owner id) resumes what the store still names it owner of
    again = manager("a")
    clock.now += 1
    again.cycle()
    (kept,) = again.tenures.values()
    assert kept.resumed and kept.taken_from is None
