"""A Standard namespace's throughput units, metered as the service documents them.

Per throughput unit: ingress up to 1 MB/s or 1,000 events/s, egress up to 2 MB/s or 4,096 events/s,
whichever comes first, shared by every hub of the namespace. Past the limit, "ingress is throttled
and Event Hubs throws a ServerBusyException. Egress doesn't produce throttling exceptions, but is
still limited to the capacity of the purchased throughput units" (Azure docs, *Scaling with Event
Hubs*). So here:

* **Ingress**: a send is refused with ``com.microsoft:server-busy`` (error code 50002, as the service
  words it) while the namespace's short-window running total is over its allowance; a send that finds
  room is taken whole, even when it is larger than what is left (the service keeps a running total and
  throttles the requests that come after), so a batch bigger than one second's allowance is never
  refused forever.
* **Egress**: deliveries wait until the running total is back under the allowance; nothing is refused.

Each running total is a token bucket: it fills at the rate and holds at most ``burst_seconds`` of it
(the short burst a namespace allows).
"""

from __future__ import annotations

import time
from collections.abc import Callable

MB = 1_000_000
INGRESS_BYTES, INGRESS_EVENTS = 1 * MB, 1_000  # per throughput unit and second
EGRESS_BYTES, EGRESS_EVENTS = 2 * MB, 4_096


class Bucket:
    """A running total that refills at ``rate`` per second up to ``rate * burst_seconds``; it may go below
    zero (a request larger than what is left is taken whole), and is open again once back at zero."""

    def __init__(self, rate: float, burst_seconds: float, clock: Callable[[], float]) -> None:
        self.rate = rate
        self.capacity = rate * burst_seconds
        self.clock = clock
        self.level = self.capacity
        self._at = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.level = min(self.capacity, self.level + (now - self._at) * self.rate)
        self._at = now

    def wait(self) -> float:
        """Seconds until the bucket is open (0: now)."""
        self._refill()
        return 0.0 if self.level >= 0 else -self.level / self.rate

    def take(self, amount: float) -> None:
        self._refill()
        self.level -= amount


class Meter:
    """One namespace's ingress and egress allowance for ``throughput_units``; counts what it held back."""

    def __init__(
        self, throughput_units: int, burst_seconds: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if throughput_units < 1:
            raise ValueError(f"throughput units must be at least 1, got {throughput_units}")
        self.throughput_units = throughput_units
        tu = throughput_units
        self.ingress = (
            Bucket(INGRESS_BYTES * tu, burst_seconds, clock),
            Bucket(INGRESS_EVENTS * tu, burst_seconds, clock),
        )
        self.egress = (
            Bucket(EGRESS_BYTES * tu, burst_seconds, clock),
            Bucket(EGRESS_EVENTS * tu, burst_seconds, clock),
        )
        self.throttled_requests = 0  # sends refused
        self.throttled_events = 0
        self.throttled_bytes = 0
        self.egress_waits = 0  # times a delivery waited for the egress allowance
        self.egress_wait_seconds = 0.0

    def admit_ingress(self, events: int, size: int) -> float:
        """0 when a send of ``events`` events and ``size`` bytes is taken (and counted), else the seconds
        until the namespace takes sends again (the send is refused and counted as throttled)."""
        wait = max(self.ingress[0].wait(), self.ingress[1].wait())
        if wait > 0:
            self.throttled_requests += 1
            self.throttled_events += events
            self.throttled_bytes += size
            return wait
        self.ingress[0].take(size)
        self.ingress[1].take(events)
        return 0.0

    def egress_wait(self) -> float:
        """Seconds until deliveries may go on (0: now)."""
        wait = max(self.egress[0].wait(), self.egress[1].wait())
        if wait > 0:
            self.egress_waits += 1
            self.egress_wait_seconds += wait
        return wait

    def sent(self, events: int, size: int) -> None:
        self.egress[0].take(size)
        self.egress[1].take(events)

    def stats(self) -> dict[str, float]:
        return {
            "throughput_units": self.throughput_units,
            "throttled_requests": self.throttled_requests,
            "throttled_events": self.throttled_events,
            "throttled_bytes": self.throttled_bytes,
            "egress_waits": self.egress_waits,
            "egress_wait_seconds": round(self.egress_wait_seconds, 3),
        }
