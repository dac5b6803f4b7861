"""Every option the connector takes: the table of specs, their parsers, the typed options they fill, the checks.

:mod:`~eventhubs_spark.options.specs` is the table (the docs' Options page is generated from it by
:mod:`~eventhubs_spark.options.docs_table`); :mod:`~eventhubs_spark.options.parsers` parses values;
:mod:`~eventhubs_spark.options.typed` builds :class:`ReadOptions` and :class:`WriteOptions`;
:mod:`~eventhubs_spark.options.checks` checks combinations and suggests a known key for an unknown one.
"""

from __future__ import annotations

from eventhubs_spark.options.checks import HABITS, edit_distance, suggestion
from eventhubs_spark.options.docs_table import options_table
from eventhubs_spark.options.parsers import ALL, BATCH, READ, STREAM, WRITE, parse_bool, parse_duration, parse_size
from eventhubs_spark.options.retired import ALIASES, RETIRED
from eventhubs_spark.options.spec import Spec
from eventhubs_spark.options.specs import BY_KEY, SPECS
from eventhubs_spark.options.typed import (
    OwnershipOptions,
    ReadOptions,
    StoreOptions,
    WriteOptions,
    check_read_options,
    parse_options,
    read_options,
    shareable_options,
    write_options,
)

__all__ = [
    "ALIASES",
    "ALL",
    "BATCH",
    "BY_KEY",
    "HABITS",
    "READ",
    "RETIRED",
    "SPECS",
    "STREAM",
    "WRITE",
    "OwnershipOptions",
    "ReadOptions",
    "Spec",
    "StoreOptions",
    "WriteOptions",
    "check_read_options",
    "edit_distance",
    "options_table",
    "parse_bool",
    "parse_duration",
    "parse_options",
    "parse_size",
    "read_options",
    "shareable_options",
    "suggestion",
    "write_options",
]
