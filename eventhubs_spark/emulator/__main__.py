"""``python -m eventhubs_spark.emulator``: run the emulator until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from . import DEFAULT_KEY, DEFAULT_KEY_NAME, Emulator, EmulatorConfig, load_official_config, parse_hub_flag


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The emulator's flags, shared with ``eventhubs-spark emulator``."""
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=5672, help="AMQP port (default 5672; 0 picks a free one)")
    parser.add_argument(
        "--hub",
        action="append",
        default=[],
        metavar="NAME:PARTITIONS",
        help="an event hub with consumer group $Default, e.g. --hub telemetry:8 (repeatable)",
    )
    parser.add_argument("--config", help="the official Event Hubs emulator's Config.json")
    parser.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="NAME=KEY",
        help="check SAS tokens against this policy key (repeatable); without it any key is accepted",
    )
    parser.add_argument(
        "--max-message-size", type=int, default=1024 * 1024, help="largest event or batch in bytes (default 1 MiB)"
    )


def build(args: argparse.Namespace) -> Emulator:
    config = load_official_config(args.config) if args.config else EmulatorConfig()
    config.hubs.extend(parse_hub_flag(text) for text in args.hub)
    for text in args.key:
        name, sep, key = text.partition("=")
        if not sep or not name or not key:
            raise ValueError(f"--key {text!r}: expected NAME=KEY, e.g. --key RootManageSharedAccessKey=secret")
        config.keys[name] = key
    if not config.hubs:
        raise ValueError("no event hub configured: add --hub NAME:PARTITIONS (e.g. --hub telemetry:4) or --config")
    config.max_message_size = args.max_message_size
    return Emulator(config=config, host=args.host, port=args.port)


def serve(emulator: Emulator) -> int:
    """Start, print the connection strings, block until SIGINT/SIGTERM, stop."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    emulator.start()
    shown_key = DEFAULT_KEY if not emulator.config.keys else "<your key>"
    shown_name = DEFAULT_KEY_NAME if not emulator.config.keys else next(iter(emulator.config.keys))
    print(f"Event Hubs emulator listening on {emulator.host}:{emulator.port}", flush=True)
    for hub in emulator.config.hubs:
        print(
            f"  {hub.name} ({hub.partitions} partitions, consumer groups {', '.join(hub.consumer_groups)}): "
            f"{emulator.connection_string(hub.name, key_name=shown_name, key=shown_key)}",
            flush=True,
        )
    while not stop.wait(0.5):
        pass
    emulator.stop()
    print("emulator stopped", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eventhubs_spark.emulator", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        emulator = build(args)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return serve(emulator)


if __name__ == "__main__":
    sys.exit(main())
