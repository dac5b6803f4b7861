"""Unit tests of how ``./dev test`` deals the suite's files to its side-by-side processes (tests/conftest.py)."""

from __future__ import annotations

import json

from tests.conftest import UNKNOWN_MINUTES, shard_of_files
from tests.durations import WEIGHTS


def test_files_are_dealt_longest_first_to_the_process_with_the_fewest_minutes_and_alike_in_every_process():
    weights = {"a.py": 7.0, "b.py": 5.0, "c.py": 4.0, "d.py": 3.0, "e.py": 1.0}
    dealt = shard_of_files(["e.py", "d.py", "c.py", "b.py", "a.py", "new.py"], weights, 3)
    # a to 0, b to 1, c to 2, d to 2 (4 < 5 < 7), e to 1 (5 < 7), new (0.3) to 1 (6 < 7)
    assert dealt == {"a.py": 0, "b.py": 1, "c.py": 2, "d.py": 2, "e.py": 1, "new.py": 1}
    assert shard_of_files(list(reversed(list(dealt))), weights, 3) == dealt, "the order collected does not matter"
    assert set(shard_of_files(list(dealt), weights, 1).values()) == {0}
    assert UNKNOWN_MINUTES > 0


def test_the_recorded_minutes_deal_the_suite_into_three_parts_within_a_few_minutes_of_each_other():
    weights = json.loads(WEIGHTS.read_text())
    assert weights and all(name.startswith("tests/") and name.endswith(".py") for name in weights)
    dealt = shard_of_files(list(weights), weights, 3)
    totals = [sum(weights[f] for f, k in dealt.items() if k == i) for i in range(3)]
    assert max(totals) - min(totals) <= max(weights.values()), totals
