"""Unit tests of :mod:`eventhubs_spark.planning.executor_ends`: which partitions a running stream's trigger takes
from its executors' word, and which it asks Event Hubs for."""

from __future__ import annotations

import datetime as dt

from eventhubs_spark.interprocess.partition_ends import Vouch
from eventhubs_spark.planning.executor_ends import REFRESH_AFTER, REFRESH_SHARE, KnownEnds
from eventhubs_spark.positions import geo_segments
from eventhubs_spark.positions.partition_catalog import PartitionInfo


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _info(pid: str, end: int, begin: int = 0, empty: bool = False) -> PartitionInfo:
    when = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=end % 100_000)
    return PartitionInfo(pid, begin, end - 1, str(end * 100), None if empty else when, empty)


class Hub:
    """Event Hubs' answers (each partition's end, as set) and the partitions asked, per call."""

    def __init__(self, ends: dict[str, int]) -> None:
        self.ends = dict(ends)
        self.calls: list[list[str]] = []

    def ask(self, ids: list[str]) -> dict[str, PartitionInfo]:
        self.calls.append(list(ids))
        return {pid: _info(pid, self.ends[pid], begin=3) for pid in ids}


def test_vouched_partitions_are_not_asked_and_take_the_vouched_event_as_their_last():
    clock, hub = Clock(), Hub({"0": 10, "1": 20, "2": 30})
    known = KnownEnds(clock)
    known.asked_all(hub.ask(["0", "1", "2"]))
    hub.ends = {"0": 15, "1": 25, "2": 35}
    infos = known.infos(["0", "1", "2"], {"0": Vouch(14, "1400", 1_767_225_600_000), "1": Vouch(20, "x", None)},
                        hub.ask)  # fmt: skip
    assert hub.calls[-1] == ["2"], "only the partition nobody vouched for is asked"
    assert list(infos) == ["0", "1", "2"], "in the order of the ids"
    assert infos["0"] == PartitionInfo("0", 3, 13, "1400", dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), False)
    assert infos["1"] is known.last["1"] and infos["1"].end == 20, "nothing new: the last answer stands as it was"
    assert infos["2"].end == 35
    assert (known.vouched, known.asked) == (2, 1)
    infos = known.infos(["0", "1", "2"], {"0": Vouch(14, "1400", 0), "1": Vouch(20, "x", None),
                                          "2": Vouch(35, "3500", None)}, hub.ask)  # fmt: skip
    assert len(hub.calls) == 2 and (known.vouched, known.asked) == (3, 0), "nothing asked: every one vouched for"


def test_a_vouch_behind_what_was_known_an_empty_partition_and_positions_with_a_segment_are_asked():
    clock = Clock()
    segmented = geo_segments.pack(2, 50)
    hub = Hub({"0": 10, "1": 1, "2": segmented + 1, "3": 8})
    known = KnownEnds(clock)
    first = hub.ask(["0", "1", "2", "3"])
    first["1"] = _info("1", 0, empty=True)
    known.asked_all(first)
    vouches = {"0": Vouch(9, "900", None), "1": Vouch(1, "0", None), "2": Vouch(segmented + 5, "2:5000", None),
               "3": Vouch(8, "800", None)}  # fmt: skip
    known.infos(["0", "1", "2", "3"], vouches, hub.ask)
    assert hub.calls[-1] == ["0", "1", "2"], "behind the known end (0), empty (1), with a segment (2)"


def test_partitions_on_vouched_ends_are_asked_again_once_their_answer_is_old_a_share_a_trigger():
    clock = Clock()
    ids = [str(p) for p in range(3 * REFRESH_SHARE)]  # three a trigger at most
    hub = Hub(dict.fromkeys(ids, 5))
    known = KnownEnds(clock)
    known.asked_all(hub.ask(ids))
    vouches = {pid: Vouch(5, "500", None) for pid in ids}
    clock.now += REFRESH_AFTER - 1
    known.infos(ids, vouches, hub.ask)
    assert len(hub.calls) == 1, "young answers: nothing asked"
    clock.now += 1
    refreshed: list[str] = []
    for _ in range(REFRESH_SHARE):
        known.infos(ids, vouches, hub.ask)
        assert len(hub.calls[-1]) == 3, "a share a trigger, never all at once"
        refreshed += hub.calls[-1]
        clock.now += 0.1
    assert sorted(refreshed) == sorted(ids), "each old answer asked once, oldest first"
    calls = len(hub.calls)
    known.infos(ids, vouches, hub.ask)
    assert len(hub.calls) == calls, "all young again"


def test_a_quiet_trigger_vouched_for_as_the_last_one_gets_the_same_properties_until_a_refresh_is_due():
    clock, hub = Clock(), Hub({"0": 10, "1": 20})
    known = KnownEnds(clock)
    known.asked_all(hub.ask(["0", "1"]))
    ids = ["0", "1"]
    vouches = {"0": Vouch(12, "1200", 1_767_225_600_000), "1": Vouch(20, "x", None)}
    first = known.infos(ids, dict(vouches), hub.ask)
    assert first["0"].end == 12 and known.asked == 0
    again = known.infos(list(ids), dict(vouches), hub.ask)
    assert again is first and (known.vouched, known.asked) == (2, 0), "nothing new: the same objects, nothing asked"
    moved = known.infos(ids, {**vouches, "1": Vouch(21, "2100", None)}, hub.ask)
    assert moved is not first and moved["1"].end == 21 and moved["0"] is first["0"]
    assert known.infos(ids, {"0": vouches["0"]}, hub.ask)["1"].end == 20 and hub.calls[-1] == ["1"], "unvouched: asked"
    steady = {"0": vouches["0"], "1": Vouch(20, "x", None)}
    known.infos(ids, steady, hub.ask)
    assert known.infos(ids, dict(steady), hub.ask) is known.last
    calls = len(hub.calls)
    clock.now += REFRESH_AFTER
    known.infos(ids, dict(steady), hub.ask)
    assert len(hub.calls) == calls + 1, "a refresh due: the oldest answer is asked again, vouches or not"
