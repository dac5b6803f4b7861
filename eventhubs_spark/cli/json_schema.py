"""The ``json-schema`` command: the schema a JSON read would infer for a hub, printed to pin it.

Why: a stream that infers its schema keeps it where ``eventhubs.json.schemaLocation`` says; a user who would
rather fix it (``eventhubs.json.schema``) wants the same inference, on the same sample, without starting a query.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile

from eventhubs_spark.cli.inputs import secret
from eventhubs_spark.errors import EventHubsError


def run_json_schema(args: argparse.Namespace) -> int:
    from eventhubs_spark.json_bodies import types
    from eventhubs_spark.options import read_options
    from eventhubs_spark.options.parsers import STREAM
    from eventhubs_spark.source.json_schema import infer
    from eventhubs_spark.source.planner import Planner

    raw = {"eventhubs.connectionString": secret(args.connection_string, "EVENTHUBS_CONNECTION_STRING",
                                                 "--connection-string")}  # fmt: skip
    if args.hub:
        raw["eventhubs.name"] = args.hub
    if args.starting_position:
        raw["eventhubs.startingPosition"] = args.starting_position
    # a read with a schema location, so the sample's size is taken; nothing is written there
    raw["eventhubs.json.schemaLocation"] = tempfile.gettempdir()
    raw["eventhubs.json.sampleEvents"] = str(args.sample)
    try:
        options = read_options(raw, STREAM)
        schema = infer(Planner(raw, STREAM), options)
    except EventHubsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(types.to_spark_json(schema), indent=2))
    else:
        print(types.to_text(schema))
    return 0
