"""A running stream's partition ends from its executors' links, and from Event Hubs only where none vouches.

:class:`KnownEnds` takes the ends the services' links vouch for (:mod:`eventhubs_spark.interprocess.partition_ends`)
and asks Event Hubs for every other partition, and for each partition again now and then, so nothing rests on the
links alone.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from eventhubs_spark.positions import geo_segments
from eventhubs_spark.positions.partition_catalog import PartitionInfo, quick_info

if TYPE_CHECKING:
    from eventhubs_spark.interprocess.partition_ends import Vouch

# Seconds a partition may go on vouched ends before Event Hubs is asked for it again, at most one partition in
# REFRESH_SHARE a trigger, so no trigger asks for many at once (bench `planning`).
# What it guards against is slow to matter: a beginning moved by retention (a task finds that too), a link that
# stopped bringing events without ending (the SDKs' own processors trust their links as long).
REFRESH_AFTER = 300.0
REFRESH_SHARE = 64


class KnownEnds:
    """The partition properties a running stream planned from last, and when Event Hubs answered for each."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.last: dict[str, PartitionInfo] = {}
        self.asked_at: dict[str, float] = {}
        self.vouched = 0  # partitions the last trigger took from the executors
        self.asked = 0  # partitions the last trigger asked Event Hubs for
        # the ids and vouches of the last trigger when it took every partition from them (see infos)
        self._all_vouched: tuple[list[str], Mapping[str, Vouch]] | None = None

    def asked_all(self, infos: Mapping[str, PartitionInfo]) -> None:
        """A trigger asked Event Hubs for every partition: these are the properties to compare vouches with."""
        now = self.clock()
        self.last = dict(infos)
        self.asked_at = dict.fromkeys(infos, now)
        self.vouched, self.asked = 0, len(infos)
        self._all_vouched = None

    def infos(
        self,
        ids: list[str],
        vouches: Mapping[str, Vouch],
        ask: Callable[[list[str]], dict[str, PartitionInfo]],
    ) -> dict[str, PartitionInfo]:
        """Every partition's properties for this trigger: from ``vouches`` where they hold, from Event Hubs
        (``ask``, once, for all the others) elsewhere; in the order of ``ids``.

        A quiet stream's trigger, whose executors vouch for every partition as they did the trigger before, gets the
        properties it planned from then (the same objects: what planning worked out from them is kept too)."""
        now = self.clock()
        same = self._all_vouched
        if (
            same is not None and same[0] == ids and same[1] == vouches
            and now - min(self.asked_at.values(), default=now) < REFRESH_AFTER
        ):  # fmt: skip
            self.vouched, self.asked = len(ids), 0
            return self.last
        self._all_vouched = None
        taken: dict[str, PartitionInfo] = {}
        to_ask: list[str] = []
        last = self.last
        plain = geo_segments.SEQ_MASK
        utc = dt.timezone.utc
        for pid in ids:  # one pass, no call a partition that did not move: 1,024 partitions every trigger
            info = last.get(pid)
            vouch = vouches.get(pid)
            if info is None or vouch is None or info.is_empty:
                to_ask.append(pid)  # nothing to compare with, nothing vouched, or empty before: asked
                continue
            end, offset, ms = vouch
            known = info.last_enqueued_sequence_number
            if end == known + 1:
                taken[pid] = info  # nothing new (most partitions of a big hub, most triggers): as planned last
            elif end <= known or known > plain or end - 1 > plain:
                # the link is behind what Event Hubs said before (still reading towards it), or positions with a
                # replication segment (asked, as the planning of segments needs)
                to_ask.append(pid)
            else:
                when = None if ms is None else dt.datetime.fromtimestamp(ms / 1000, tz=utc)
                taken[pid] = quick_info(info.id, info.beginning_sequence_number, end - 1, offset, when, False)
        asked_at = self.asked_at
        if taken and not (taken.keys() <= asked_at.keys() and now - min(asked_at.values()) < REFRESH_AFTER):
            share = math.ceil(len(ids) / REFRESH_SHARE)
            due = sorted((asked_at.get(p, 0.0), p) for p in taken if now - asked_at.get(p, 0.0) >= REFRESH_AFTER)
            for _, pid in due[:share]:
                del taken[pid]
                to_ask.append(pid)
        if not to_ask and len(taken) == len(ids):
            out = taken  # every partition vouched for, none due: already in the order of ids
        else:
            fresh = ask(to_ask) if to_ask else {}
            for pid in fresh:
                asked_at[pid] = now
            out = {pid: taken[pid] if pid in taken else fresh[pid] for pid in ids if pid in taken or pid in fresh}
        self.last = out
        self.vouched, self.asked = len(taken), len(to_ask)
        if not to_ask and len(taken) == len(ids):
            self._all_vouched = (list(ids), dict(vouches))
        return out
