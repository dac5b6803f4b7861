"""``eventhubs-spark checkpoints`` and ``eventhubs-spark lag``: their arguments, and the reports printed.

The reports themselves are :func:`~eventhubs_spark.checkpoints.report.checkpoints_report` and
:func:`~eventhubs_spark.lag.report.lag_report`; here they are asked and shown.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from eventhubs_spark.checkpoints.report import checkpoints_report
from eventhubs_spark.cli.inputs import secret
from eventhubs_spark.cli.tables import table
from eventhubs_spark.lag.report import checkpoint_folder, lag_report


def run_checkpoints(args: argparse.Namespace) -> int:
    conn = secret(args.connection_string, "EVENTHUBS_CONNECTION_STRING", "--connection-string")
    store = secret(args.storage_connection_string, "CHECKPOINT_STORE_CONNECTION_STRING", "--storage-connection-string")
    try:
        rows = checkpoints_report(conn, store, args.container, args.consumer_group)
    except Exception as exc:  # the blob service's or the hub's failure: one line, not the storage SDK's traceback
        from eventhubs_spark.checkpoints.blob import describe_store_error
        from eventhubs_spark.errors import EventHubsError

        said = (
            str(exc).splitlines()[0] if isinstance(exc, EventHubsError) else describe_store_error(exc, args.container)
        )
        print(f"error: {said}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"consumer group {args.consumer_group!r}, container {args.container!r}")
        print(table(list(rows[0]) if rows else ["partition"], [list(r.values()) for r in rows]))
    return 0


def lag_text(report: dict[str, Any]) -> str:
    def shown(value: Any, unit: str = "") -> str:
        return "-" if value is None else f"{value:.1f}{unit}" if isinstance(value, float) else f"{value}{unit}"

    batch = report["batch"]
    seconds = shown(report["maxSecondsBehindLatest"], " s")
    known = [v["secondsBehind"] for v in report["partitions"].values() if v["secondsBehind"] is not None]
    if report["maxSecondsBehindLatest"] is None and known:
        # a partition's time unknown (nothing read from it yet): the max over the others is a floor, said so
        unknown = [p for p, v in report["partitions"].items() if v["secondsBehind"] is None]
        seconds = f"at least {max(known):.1f} s (no time yet for partition{'s' if len(unknown) > 1 else ''} " \
                  f"{', '.join(unknown)})"  # fmt: skip
    head = (f"hub {report['hub']!r}: " + ("no batch committed yet" if batch is None else
            f"batch {batch} committed {shown(report['commitAgeSeconds'], ' s')} ago") +
            f"; behind latest: max {report['maxOffsetsBehindLatest']} events, max {seconds}")  # fmt: skip
    headers = ["partition", "committed", "latest", "events behind", "seconds behind", "last read enqueued"]
    rows = [[p, shown(v["committed"]), v["latest"], shown(v["eventsBehind"]), shown(v["secondsBehind"]),
             shown(v["lastReadEnqueuedTime"])] for p, v in report["partitions"].items()]  # fmt: skip
    lines = [head, table(headers, rows)]
    lines += [f"STALLED partition {p}: {v['stalled']}" for p, v in report["partitions"].items() if v["stalled"]]
    return "\n".join(lines)


def _lag_options(args: argparse.Namespace) -> dict[str, str]:
    """The options the user gave: a JSON file of them (as the query was started with) and each --option."""
    options: dict[str, str] = {}
    if args.options:
        with open(args.options, encoding="utf-8") as f:
            options.update({str(k): str(v) for k, v in json.load(f).items() if not str(k).startswith("_")})
    for item in args.option or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(
                f"error: --option takes KEY=VALUE, e.g. --option eventhubs.consumerGroup=spark; got {item!r}"
            )
        options[key.strip()] = value
    return options


def _entity_path(connection_string: str) -> str | None:
    from eventhubs_spark.auth.settings import connection_string_parts

    return connection_string_parts(connection_string, "--connection-string").get("entitypath") or None


def with_stored_options(given: dict[str, str], stored: dict[str, dict[str, str]], connection: str | None,
                 location: str) -> dict[str, str]:  # fmt: skip
    """The query's options as its driver stored them under the checkpoint location (``source.json``, secrets
    left out), under the ones given here; the connection string (flag, else environment) where the query
    signed in with a key, which is never stored."""
    lower = {k.lower(): v for k, v in given.items()}
    hub = lower.get("eventhubs.name") or (_entity_path(connection) if connection else None)
    base: dict[str, str] = {}
    if stored:
        if hub is None and len(stored) > 1:
            raise SystemExit(f"error: {location} holds the lag of hubs {', '.join(sorted(stored))}: name one, e.g. "
                             f"--option eventhubs.name={sorted(stored)[0]}")  # fmt: skip
        base = dict(stored.get(hub, {}) if hub is not None else next(iter(stored.values())))
    signed = base.pop("_signIn", None)
    options = {**base, **given}
    names = {k.lower() for k in options}
    if "eventhubs.connectionstring" in names:
        return options
    with_key = signed in ("connectionString", "sasToken") or (signed is None and "eventhubs.namespace" not in names)
    if connection is None and with_key:
        known = f" (its hub {base['eventhubs.name']!r} is known from {location}; its key is not stored)" if base else ""
        raise SystemExit(f"error: pass --connection-string or set EVENTHUBS_CONNECTION_STRING{known}")
    if connection is not None:
        for key in [k for k in options if k.lower() in ("eventhubs.namespace", "eventhubs.usedevelopmentemulator")]:
            options.pop(key)  # the connection string names them
        if _entity_path(connection):
            for key in [k for k in options if k.lower() == "eventhubs.name"]:
                options.pop(key)
        options["eventhubs.connectionString"] = connection
    return options


def run_lag(args: argparse.Namespace) -> int:
    from eventhubs_spark.errors import OptionError
    from eventhubs_spark.lag import stored_sources

    given = _lag_options(args)
    location = args.checkpoint_location or next(
        (v for k, v in given.items() if k.lower() == "eventhubs.checkpointlocation"), None
    )
    if not location:
        raise SystemExit("error: pass --checkpoint-location (the query's Spark checkpoint location)")
    storage = args.storage_connection_string or os.environ.get("CHECKPOINT_STORE_CONNECTION_STRING")
    connection = args.connection_string or os.environ.get("EVENTHUBS_CONNECTION_STRING") or None
    try:
        folder = checkpoint_folder(location, storage)  # opened once: a refresh reads it again, not reconnects
        options = with_stored_options(given, stored_sources(folder), connection, location)
    except (OptionError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    shown = 0
    while True:
        try:
            report = lag_report(options, location, storage, folder=folder)
        except (OptionError, ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(json.dumps(report, indent=2) if args.json else lag_text(report), flush=True)
        shown += 1
        if args.watch is None or (args.iterations and shown >= args.iterations):
            return 0
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0
        if not args.json:
            print()
