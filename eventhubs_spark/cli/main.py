"""The ``eventhubs-spark`` command's arguments, and which command runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from eventhubs_emulator import __main__ as emulator_cli
from eventhubs_spark.cli.demo import run_demo
from eventhubs_spark.cli.json_schema import run_json_schema
from eventhubs_spark.cli.reports import run_checkpoints, run_lag
from eventhubs_spark.cli.send import run_send


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="eventhubs-spark", description="Azure Event Hubs for Spark 4")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="a Spark streaming query on sample events in the embedded emulator",
        description="Starts the embedded emulator, produces sample events and reads them with a Spark streaming "
        "query, showing events read, rate and lag per partition. It ends by itself; Ctrl-C stops it (exit 130).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    demo.add_argument("--partitions", type=int, default=4, help="partitions of the demo hub")
    demo.add_argument("--events", type=int, default=2000, help="events to produce; the demo ends once all are read")
    demo.add_argument("--rate", type=int, default=500, help="events per second to produce")
    demo.add_argument("--seconds", type=float, default=90.0, help="stop after this long")
    demo.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # the process doing the work
    emu = sub.add_parser("emulator", help="run the local Event Hubs emulator")
    emulator_cli.add_arguments(emu)
    send = sub.add_parser("send", help="send generated events, or the lines of a JSON-lines file, to a hub")
    send.add_argument("--connection-string", help="with EntityPath (default: $EVENTHUBS_CONNECTION_STRING)")
    send.add_argument("--hub", help="the event hub, for a connection string without EntityPath")
    send.add_argument("--file", help="a JSON-lines file (one event body per line; - for stdin)")
    send.add_argument("--count", type=int, default=1000, help="generated events (without --file)")
    send.add_argument("--size", type=int, default=100, help="approximate bytes per generated event")
    send.add_argument(
        "--send-timeout", type=float, default=60.0, metavar="SECONDS",
        help="how long one send of a batch may go unanswered before it is sent again (default 60)",
    )  # fmt: skip
    target = send.add_mutually_exclusive_group()
    target.add_argument("--partition", help="send every event to this partition id")
    target.add_argument("--partition-key", help="send every event with this partition key")
    cps = sub.add_parser("checkpoints", help="a consumer group's checkpoints, owners and lag, from the blob store")
    cps.add_argument("--connection-string", help="Event Hubs, with EntityPath (default: $EVENTHUBS_CONNECTION_STRING)")
    cps.add_argument("--storage-connection-string", help="blob storage (default: $CHECKPOINT_STORE_CONNECTION_STRING)")
    cps.add_argument("--container", required=True, help="the checkpoint store's blob container")
    cps.add_argument("--consumer-group", default="$Default")
    cps.add_argument("--json", action="store_true", help="print JSON instead of a table")
    lag = sub.add_parser(
        "lag",
        help="how far behind a streaming query is, per partition, from its checkpoint location and the hub",
        description="Reads the query's Spark checkpoint (the last committed batch) and the lag files its driver "
        "writes there (with eventhubs.checkpointLocation), asks the hub for each partition's latest event, and "
        "prints the lag in events and in time, the last commit's age and any stalled partition.",
    )
    lag.add_argument("--checkpoint-location", help="the query's checkpoint location: a local path, file:, dbfs:/, or "
                     "Azure Storage (abfss://, wasbs://, https://)")  # fmt: skip
    lag.add_argument("--connection-string", help="Event Hubs, for a query that signed in with a key (default: "
                     "$EVENTHUBS_CONNECTION_STRING); without EntityPath, the query's stored hub")  # fmt: skip
    lag.add_argument("--storage-connection-string", help="for a checkpoint location in Azure Storage (abfss://, "
                     "wasbs://, https://; default: $CHECKPOINT_STORE_CONNECTION_STRING)")  # fmt: skip
    lag.add_argument("--options", help="a JSON file of the options the query was started with (conf/*.json)")
    lag.add_argument("--option", action="append", metavar="KEY=VALUE", help="an option of the query (repeatable)")
    lag.add_argument("--json", action="store_true", help="print JSON instead of a table")
    lag.add_argument("--watch", type=float, nargs="?", const=5.0, metavar="SECONDS",
                     help="refresh every SECONDS (default 5) until Ctrl-C")  # fmt: skip
    lag.add_argument("--iterations", type=int, default=0, help="with --watch: stop after this many refreshes")
    schema = sub.add_parser(
        "json-schema",
        help="the schema a JSON read infers for a hub's bodies (DDL, or --json), to pin with eventhubs.json.schema",
        description="Samples the hub as a stream's JSON read would (eventhubs.json.sampleEvents, from the starting "
        "position; at the end: the latest events) and prints the inferred schema.",
    )
    schema.add_argument("--connection-string", help="with EntityPath (default: $EVENTHUBS_CONNECTION_STRING)")
    schema.add_argument("--hub", help="the event hub, for a connection string without EntityPath")
    schema.add_argument("--sample", type=int, default=1000, help="events to sample, over all partitions")
    schema.add_argument("--starting-position", help='where to sample from, e.g. \'{"offset": "-1"}\' (default: the '
                        "latest events)")  # fmt: skip
    schema.add_argument("--json", action="store_true", help="print the schema as Spark's JSON instead of DDL")
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(arguments)
    if args.command == "demo":
        return run_demo(args, arguments)
    if args.command == "send":
        return run_send(args)
    if args.command == "checkpoints":
        return run_checkpoints(args)
    if args.command == "lag":
        return run_lag(args)
    if args.command == "json-schema":
        return run_json_schema(args)
    try:
        emulator = emulator_cli.build(args)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return emulator_cli.serve(emulator)


if __name__ == "__main__":
    sys.exit(main())
