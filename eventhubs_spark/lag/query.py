"""A stream's lag as one object its reader holds: the figures each trigger, and where they are said and kept.

The stream reader plans; what it learns on the way (each trigger's positions, what tasks read) goes here, which
turns it into a log line, a warning per partition newly stalled, the progress's ``"@lag"`` (Spark 4.2+) and the
files ``eventhubs-spark lag`` reads from the checkpoint location.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from eventhubs_spark.lag.files import LagFiles
from eventhubs_spark.lag.tracker import LagReport, LagTracker
from eventhubs_spark.positions import geo_segments
from eventhubs_spark.positions.partition_catalog import PartitionInfo
from eventhubs_spark.process import runtime

_LOG = logging.getLogger("eventhubs_spark.source.stream_reader")  # where users have always found these lines

FILE_EVERY = 60.0  # seconds: a quiet stream still writes its lag figures this often (the command shows their age)


class QueryLag:
    """One stream's lag: the tracker's figures, the last trigger's report, and the lag files (None without a
    checkpoint location). ``stall_cause(partition)``: why a partition may not move, where the reader knows."""

    def __init__(
        self,
        hub: str,
        stalled_after_batches: int,
        stalled_after: float,
        checkpoint_location: str | None,
        stall_cause: Callable[[str], str | None],
    ) -> None:
        self.hub = hub
        self.tracker = LagTracker(hub, stalled_after_batches, stalled_after)
        self.files = LagFiles(checkpoint_location, hub) if checkpoint_location else None
        self.report: LagReport | None = None  # this trigger's figures (reportLatestOffset shows them)
        self._written: tuple[Any, float] | None = None  # what the last lag file said, and when
        self._stall_cause = stall_cause

    def keep_source(self, options: Mapping[str, str]) -> None:
        """Write the query's shareable options beside the lag files: what ``eventhubs-spark lag`` reads back, given
        only the checkpoint location. A failure is said and the query goes on."""
        if self.files is None:
            return
        try:
            self.files.write_source(options)
        except OSError as exc:
            _LOG.warning("eventhubs: hub %s: the query's options could not be written under %s: %s", self.hub,
                         self.files.directory, exc)  # fmt: skip

    def observe(self, begin: Mapping[str, int], infos: Mapping[str, PartitionInfo], planned_batch: bool) -> LagReport:
        """This trigger's figures, from where it begins and the partitions' properties."""
        self.report = self.tracker.observe(begin, infos, planned_batch, self._stall_cause)
        return self.report

    def planned(self, end: Mapping[str, int], infos: Mapping[str, PartitionInfo]) -> None:
        self.tracker.planned(end, infos)

    def running(self, ranges: Mapping[str, tuple[int, int]]) -> None:
        self.tracker.running(ranges)

    def read(self, partition: str, end: int, enqueued_micros: int | None) -> None:
        self.tracker.read(partition, end, enqueued_micros)

    def await_reports(self, timeout: float) -> bool:
        return self.tracker.await_reports(timeout)

    def progress(self, partitions: int) -> dict[str, Any] | None:
        """The figures the progress's ``latestOffset`` carries (None before the first trigger)."""
        return None if self.report is None else self.report.progress(partitions)

    def say(self, report: LagReport, planned: int) -> None:
        """This trigger's lag: a line in the driver's log, a warning for each partition newly stalled, and a
        file in the checkpoint location (when a batch is planned, the figures changed, or a minute passed)."""
        if _LOG.isEnabledFor(logging.INFO):  # the line sorts and formats every partition: only when it is logged
            _LOG.info("hub %s: planned %d events; %s", self.hub, planned, report.log_line())
        for lag in self.tracker.newly_stalled(report):
            _LOG.warning("eventhubs: hub %s partition %s is stalled: %s", self.hub, lag.partition, lag.stalled)
        if self.files is None:
            return
        figures = report.figures()
        now = time.monotonic()
        last = self._written
        if planned or last is None or last[0] != figures or now - last[1] >= FILE_EVERY:
            if last is None:  # the files still waiting are written before Spark ends the runner (SIGTERM)
                runtime.flush_on_termination(self.files.flush)
            self.files.write_later(report)  # off the trigger: Spark waits on it for the plan, not the file
            self._written = (figures, now)

    def flush(self, timeout: float) -> None:
        """Write the lag files still waiting (within ``timeout`` seconds)."""
        if self.files is not None:
            self.files.flush(timeout)

    def watch(self, alive: Callable[[], bool]) -> None:
        """While ``alive()`` (the query's driver lives): say by name each partition whose range a running batch has
        not read within eventhubs.lag.stalledAfter (such a batch never reaches the next trigger's lag figures); and
        keep the times of what the tasks read in the lag files' reads.json, for the command. Runs on a thread."""
        every = min(10.0, max(0.5, self.tracker.stalled_after / 4))
        written: dict[str, tuple[int, int]] = {}
        while alive():
            time.sleep(every)
            reads = self.tracker.known_reads()
            if self.files is not None and reads != written:
                with contextlib.suppress(OSError):
                    self.files.write_reads(reads)
                    written = reads
            stalled: dict[str, str] = {}
            for partition, start, end, waited in self.tracker.overdue():
                why = self._stall_cause(partition) or (
                    "cause unknown: no failure was reported for it (a slow or throttled read, or a task Spark cannot "
                    "schedule?)"
                )
                stalled[partition] = (f"the batch reading [{geo_segments.show(start)}, {geo_segments.show(end)}) began "
                                      f"{waited:.0f} s ago and no task has read that range; {why}")  # fmt: skip
                _LOG.warning("eventhubs: hub %s partition %s is stalled: %s", self.hub, partition, stalled[partition])
            last = self.report
            if stalled and last is not None and self.files is not None:
                marked = {p: dataclasses.replace(v, stalled=stalled.get(p, v.stalled))
                          for p, v in last.partitions.items()}  # fmt: skip
                self.files.write_later(LagReport(self.hub, datetime.datetime.now(datetime.timezone.utc), marked))
