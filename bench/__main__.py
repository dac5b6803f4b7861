"""``python -m bench [NAME ...]``: run the named benchmarks (all by default)."""

from __future__ import annotations

import argparse
import sys

from . import (
    ab_read,
    avro,
    capture,
    capture_slices,
    ceiling,
    checkpoint_mirror,
    cluster,
    defaults,
    emulator_sdk,
    first_batch,
    json_bodies,
    jvm,
    latency,
    load,
    memory,
    networks,
    partitions,
    planning,
    pushback,
    read,
    read_profile,
    receivers,
    sandbox,
    sink,
    soak,
    start_lookups,
    task_cost,
)

BENCHMARKS = {
    "emulator_sdk": emulator_sdk.run,
    "read": read.run,
    "read_profile": read_profile.run,  # issue 16: where a read's microseconds go
    "ab_read": ab_read.run,  # issue 50: a read-path change A/B'd against the code before it, alternating runs
    "sink": sink.run,
    "load": load.run,  # issue 87: the first .load() in a fresh process, against a trivial Python source's
    "first_batch": first_batch.run,  # issue 87: a fresh query's first batch against a trivial source's, its steps
    "json_registry": json_bodies.run_registry,  # issue 90: JSON Schema from the registry, against from_json
    "json": json_bodies.run,  # issue 68: JSON bodies into columns, against Spark's from_json on the same bodies
    "planning": planning.run,
    "latency": latency.run,
    "receivers": receivers.run,  # issue 15: attaches per partition, reuse, memory; with and without the service
    "networks": networks.run,  # issue 25: read throughput over TLS and WebSockets beside plain TCP
    "task_cost": task_cost.run,  # issue 28: what a task of a quiet stream costs, beside Spark's own floor
    "ceiling": ceiling.run,  # issue 28: Spark's own ceiling for a Python source, beside the connector
    "memory": memory.run,  # issue 28: the receiver service's read-ahead at 32 partitions, against its bound
    "cluster": cluster.run,  # issue 37: attaches and egress per event read on one executor and on three
    "jvm": jvm.run,  # issue 47: the old Scala connector on Spark 3.5 beside this one, same emulator and events
    "cluster_kill": cluster.run_kills,  # issues 37 and 64: executors SIGKILLed every 15 s and 12 s, exactly once
    "defaults": defaults.run,  # issue 87: a micro-batch with no option set, 4 to 1,024 partitions, beside Kafka's
    "partitions": partitions.run,  # issue 64: 4 to 1,024 partitions beside Spark's floor; first batch, attaches
    "checkpoint_mirror": checkpoint_mirror.run,  # issue 64: triggers with the checkpoint store at 1,024 partitions
    "start_lookups": start_lookups.run,  # issue 64: a start by enqueued time at 32 and 1,024 partitions, and the SDK
    "sandbox": sandbox.run,  # issue 46: a stream whose driver port a firewall drops, homes and the service off
    "avro": avro.run,  # issue 40: Avro bodies into the value struct, against the official encoder's decode
    "capture": capture.run,  # issue 48: a partition's history from Capture files in Azurite, against the hub
    "capture_slices": capture_slices.run,  # a rate-limited stream through one large Capture file, slice by slice
    "soak": soak.run,  # ten minutes: run it on its own (./dev bench soak)
    "pushback": pushback.run,  # issue 38, ten minutes: throttled, detached, black-holed; on its own
}


def main() -> int:
    parser = argparse.ArgumentParser(prog="./dev bench")
    parser.add_argument("names", nargs="*", choices=[*BENCHMARKS, []], help="benchmarks to run (default: all)")
    args = parser.parse_args()
    for name in args.names or [n for n in BENCHMARKS if n not in ("soak", "pushback")]:
        print(f"running {name} ...", flush=True)
        BENCHMARKS[name]()
    print("results in bench/results.json and bench/RESULTS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
