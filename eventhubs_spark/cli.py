"""The ``eventhubs-spark`` command: ``demo`` and ``emulator`` (more verbs come with the connector).

``demo`` is the README's first command. Until the Spark reader lands it streams sample events
through the embedded emulator with the plain SDK and shows a live per-partition table, which proves
the set-up (Python, packages, emulator) on a fresh machine.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence

from .emulator import Emulator
from .emulator import __main__ as emulator_cli


def _demo(args: argparse.Namespace) -> int:
    from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient

    hub = "demo"
    with Emulator({hub: args.partitions}) as emu:
        conn = emu.connection_string(hub)
        print(f"emulator on {emu.host}:{emu.port}; hub '{hub}' with {args.partitions} partitions")
        counts = {str(p): 0 for p in range(args.partitions)}
        latest = {str(p): -1 for p in range(args.partitions)}
        lock = threading.Lock()
        stop = threading.Event()

        def produce() -> None:
            with EventHubProducerClient.from_connection_string(conn) as producer:
                n = 0
                while not stop.is_set() and n < args.events:
                    batch = producer.create_batch()
                    for _ in range(min(args.rate // 10 or 1, args.events - n)):
                        batch.add(EventData(f'{{"id": {n}, "temperature": {20 + n % 7}}}'))
                        n += 1
                    producer.send_batch(batch)
                    time.sleep(0.1)

        def on_event_batch(ctx: object, events: list[object]) -> None:
            with lock:
                for ev in events:
                    pid = ctx.partition_id  # type: ignore[attr-defined]
                    counts[pid] += 1
                    latest[pid] = ev.sequence_number  # type: ignore[attr-defined]

        consumer = EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default")
        threads = [
            threading.Thread(target=produce, daemon=True),
            threading.Thread(
                target=consumer.receive_batch,
                kwargs={"on_event_batch": on_event_batch, "starting_position": "-1", "max_wait_time": 0.5},
                daemon=True,
            ),
        ]
        for t in threads:
            t.start()
        started = time.monotonic()
        last_total = 0
        try:
            while time.monotonic() - started < args.seconds:
                time.sleep(1.0)
                with lock:
                    total = sum(counts.values())
                    rows = [(p, counts[p], latest[p]) for p in sorted(counts, key=int)]
                lag = {p: emu.partition_properties(hub, p)["last_enqueued_sequence_number"] - s for p, _, s in rows}
                print(f"\n{time.monotonic() - started:5.1f}s  {total - last_total} events/s")
                print(f"  {'partition':>9} {'read':>8} {'lag':>6}")
                for p, n, _ in rows:
                    print(f"  {p:>9} {n:>8} {lag[p]:>6}")
                last_total = total
                if total >= args.events:
                    break
        finally:
            stop.set()
            consumer.close()
        print(f"\nread {sum(counts.values())} of {args.events} events")
        return 0 if sum(counts.values()) == args.events else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="eventhubs-spark", description="Azure Event Hubs for Spark 4")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="stream sample events through the embedded emulator")
    demo.add_argument("--partitions", type=int, default=4)
    demo.add_argument("--events", type=int, default=2000)
    demo.add_argument("--rate", type=int, default=500, help="events per second to produce")
    demo.add_argument("--seconds", type=float, default=30.0, help="stop after this long")
    emu = sub.add_parser("emulator", help="run the local Event Hubs emulator")
    emulator_cli.add_arguments(emu)
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    try:
        emulator = emulator_cli.build(args)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return emulator_cli.serve(emulator)


if __name__ == "__main__":
    sys.exit(main())
