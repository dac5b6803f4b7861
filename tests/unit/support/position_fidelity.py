"""Helpers shared by the unit tests that came from test_position_fidelity.py."""

from __future__ import annotations

import datetime as dt

from eventhubs_spark.positions.partition_catalog import PartitionInfo

# A partition of 10 events, sequence numbers 0..9. Offsets and times are placeholders filled per
# partition: "O5" is event 5's offset, "T5" its enqueued time.
COUNT = 10


def fill(text: str, offsets: list[str], times: list[dt.datetime]) -> str:
    """Put real offsets and times (of events 5 and 9) into a row's JSON."""
    iso = {i: t.isoformat(timespec="milliseconds").replace("+00:00", "Z") for i, t in enumerate(times)}
    return text.replace('"O5"', f'"{offsets[5]}"').replace('"O9"', f'"{offsets[9]}"').replace('"T5"', f'"{iso[5]}"')


class FakePartition:
    """Events 0..9 with byte offsets and distinct millisecond times, as the emulator stamps them."""

    def __init__(self) -> None:
        base = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
        self.offsets = [str(100 * i + 7) for i in range(COUNT)]
        self.times = [base + dt.timedelta(milliseconds=3 * i) for i in range(COUNT)]
        self.info = PartitionInfo("0", 0, COUNT - 1, self.offsets[-1], self.times[-1], False)

    def first(self, field: str, inclusive: bool, value: object) -> int | None:
        """What a receiver at the filter gets first: the service's selector semantics."""
        for seq in range(COUNT):
            have: object = {"sequence-number": seq, "offset": int(self.offsets[seq]), "enqueued-time": self.times[seq]}[
                field
            ]
            want = int(str(value)) if field == "offset" else value
            if have > want or (inclusive and have == want):  # type: ignore[operator]
                return seq
        return None


CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=n;SharedAccessKey=k;EntityPath=hub"
