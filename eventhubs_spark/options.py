"""Every option the connector takes, in one table: key, default, parser, one-line doc, example.

Keys are case-insensitive and carry the azure-event-hubs-spark names, so a migration is a package
change. An unknown key, a value that does not parse, or an option that does not apply to the mode
(reading a stream, reading a batch, writing) is an :class:`OptionError` that names the option and
shows a valid example. Nothing is silently ignored.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import OptionError
from .positions import Earliest, Latest, Position, parse_position, parse_positions

STREAM, BATCH, WRITE = "stream", "batch", "write"
READ = frozenset({STREAM, BATCH})
ALL = frozenset({STREAM, BATCH, WRITE})


def parse_bool(option: str, value: str) -> bool:
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise OptionError(f"{option}: expected true or false, got {value!r}. Example: .option({option!r}, 'true')")


def _int(minimum: int) -> Callable[[str, str], int]:
    def parse(option: str, value: str) -> int:
        try:
            number = int(str(value).strip())
        except ValueError:
            number = None
        if number is None or number < minimum:
            raise OptionError(
                f"{option}: expected a whole number >= {minimum}, got {value!r}. Example: .option({option!r}, '1000')"
            )
        return number

    return parse


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|sec|seconds?|m|min|minutes?|h|hours?)?\s*$", re.I)
_ISO = re.compile(r"^P(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)$", re.I)


def parse_duration(option: str, value: str) -> float:
    """Seconds from ``"60"``, ``"60s"``, ``"500ms"``, ``"15m"``, ``"1h"`` or ISO-8601 ``"PT1M"``."""
    text = str(value).strip()
    match = _DURATION.match(text)
    if match:
        number, unit = float(match.group(1)), (match.group(2) or "s").lower()
        scale = 0.001 if unit.startswith(("ms", "milli")) else {"m": 60.0, "h": 3600.0}.get(unit[0], 1.0)
        return number * scale
    iso = _ISO.match(text)
    if iso and any(iso.groups()):
        h, m, s = (float(g) if g else 0.0 for g in iso.groups())
        return h * 3600 + m * 60 + s
    raise OptionError(f"{option}: expected a duration such as '60s', '500ms', '15m' or 'PT1M', got {value!r}")


def _choice(*allowed: str) -> Callable[[str, str], str]:
    def parse(option: str, value: str) -> str:
        text = str(value).strip().lower()
        if text not in allowed:
            raise OptionError(
                f"{option}: expected one of {', '.join(allowed)}, got {value!r}. Example: .option({option!r}, "
                f"{allowed[0]!r})"
            )
        return text

    return parse


def _text(option: str, value: str) -> str:
    if not str(value).strip():
        raise OptionError(f"{option}: must not be empty")
    return str(value)


@dataclass(frozen=True)
class Spec:
    key: str
    default: Any
    parse: Callable[[str, str], Any]
    doc: str
    example: str
    modes: frozenset[str] = ALL
    secret: bool = False


SPECS: tuple[Spec, ...] = (
    Spec(
        "eventhubs.connectionString",
        None,
        _text,
        "Event Hubs connection string with EntityPath (required).",
        "Endpoint=sb://NAMESPACE.servicebus.windows.net/;SharedAccessKeyName=NAME;SharedAccessKey=KEY;EntityPath=HUB",
        secret=True,
    ),
    Spec("eventhubs.consumerGroup", "$Default", _text, "Consumer group to read with.", "$Default", READ),
    Spec(
        "eventhubs.startingPosition",
        None,
        lambda o, v: parse_position(v, o),
        "Where to start when there is no Spark checkpoint, for every partition (stream default: end of "
        "stream; batch default: start of stream).",
        '{"offset": "-1"}',
        READ,
    ),
    Spec(
        "eventhubs.startingPositions",
        None,
        lambda o, v: parse_positions(v, o),
        "Per-partition starting positions; override eventhubs.startingPosition.",
        '{"0": {"seqNo": 100}}',
        READ,
    ),
    Spec(
        "eventhubs.endingPosition",
        None,
        lambda o, v: parse_position(v, o),
        "Batch reads: where to stop, for every partition (default: end of stream).",
        '{"offset": "@latest"}',
        frozenset({BATCH}),
    ),
    Spec(
        "eventhubs.endingPositions",
        None,
        lambda o, v: parse_positions(v, o),
        "Batch reads: per-partition ending positions.",
        '{"0": {"seqNo": 500}}',
        frozenset({BATCH}),
    ),
    Spec(
        "maxEventsPerTrigger",
        None,
        _int(1),
        "Most events per micro-batch, split across partitions by backlog (default on Spark 4.2+: 1000 per partition).",
        "10000",
        frozenset({STREAM}),
    ),
    Spec(
        "minEventsPerTrigger",
        None,
        _int(1),
        "Skip a trigger until this many events are waiting, or maxTriggerDelay has passed.",
        "500",
        frozenset({STREAM}),
    ),
    Spec(
        "maxTriggerDelay",
        900.0,
        parse_duration,
        "With minEventsPerTrigger: the longest a trigger may be skipped.",
        "15m",
        frozenset({STREAM}),
    ),
    Spec(
        "failOnDataLoss",
        True,
        parse_bool,
        "Fail when events the query had not read are gone (retention); false logs and goes on.",
        "true",
        READ,
    ),
    Spec(
        "maxEventsPerPartition",
        None,
        _int(1),
        "Split a partition's range into Spark tasks of at most this many events.",
        "50000",
        READ,
    ),
    Spec("eventhubs.prefetchCount", 500, _int(1), "Events each receiver prefetches.", "500", READ),
    Spec(
        "eventhubs.receiverTimeout",
        60.0,
        parse_duration,
        "How long a receiver may wait for an event it knows exists before the task fails.",
        "60s",
        READ,
    ),
    Spec(
        "eventhubs.operationTimeout",
        300.0,
        parse_duration,
        "Deadline for management calls and sends, retries included.",
        "300s",
    ),
    Spec(
        "eventhubs.useExclusiveReceiver",
        True,
        parse_bool,
        "Owner-level (epoch) receivers, so one reader per partition and consumer group.",
        "true",
        READ,
    ),
    Spec(
        "eventhubs.partitionDiscoveryInterval",
        60.0,
        parse_duration,
        "How often a stream looks for partitions added to the hub.",
        "60s",
        frozenset({STREAM}),
    ),
    Spec(
        "eventhubs.checkpointStore.connectionString",
        None,
        _text,
        "Blob storage connection string: mirror each committed batch into the checkpoint store every Event Hubs "
        "SDK shares.",
        "DefaultEndpointsProtocol=https;AccountName=ACCOUNT;AccountKey=KEY",
        READ,
        secret=True,
    ),
    Spec(
        "eventhubs.checkpointStore.accountUrl",
        None,
        _text,
        "Instead of the connection string: the storage account's blob URL, with eventhubs.checkpointStore.sasToken "
        "or, without one, Microsoft Entra ID through azure-identity's DefaultAzureCredential.",
        "https://ACCOUNT.blob.core.windows.net",
        READ,
    ),
    Spec(
        "eventhubs.checkpointStore.sasToken",
        None,
        _text,
        "A SAS token for eventhubs.checkpointStore.accountUrl (read, write, list, create on the container).",
        "sv=2022-11-02&ss=b&srt=co&sp=rwlc&se=2030-01-01T00:00:00Z&sig=SIGNATURE",
        READ,
        secret=True,
    ),
    Spec(
        "eventhubs.checkpointStore.container",
        None,
        _text,
        "Blob container of the checkpoint store (one per consumer group is usual).",
        "eventhubs-checkpoints",
        READ,
    ),
    Spec(
        "eventhubs.startFromCheckpointStore",
        False,
        parse_bool,
        "With no Spark checkpoint yet, start each partition after its checkpoint in the store (partitions without "
        "one use eventhubs.startingPosition(s)).",
        "true",
        READ,
    ),
    Spec(
        "eventhubs.ownership",
        False,
        parse_bool,
        "Share the consumer group with other queries and processors: read only the partitions this query owns in "
        "the checkpoint store, balancing them with the other owners (needs the checkpoint store).",
        "true",
        frozenset({STREAM}),
    ),
    Spec(
        "eventhubs.ownerId",
        None,
        _text,
        "This query's owner id in the checkpoint store (default: random per run). A stable one lets a restarted "
        "query take its partitions back at once.",
        "orders-query-1",
        frozenset({STREAM}),
    ),
    Spec(
        "eventhubs.loadBalancing.strategy",
        "greedy",
        _choice("greedy", "balanced"),
        "greedy claims a fair share at once; balanced claims one partition per cycle (the SDKs' default).",
        "balanced",
        frozenset({STREAM}),
    ),
    Spec(
        "eventhubs.loadBalancing.updateInterval",
        10.0,
        parse_duration,
        "How often ownership is renewed and rebalanced.",
        "10s",
        frozenset({STREAM}),
    ),
    Spec(
        "eventhubs.loadBalancing.ownershipExpiration",
        60.0,
        parse_duration,
        "How long an ownership not renewed stays valid; a stopped query's partitions are taken over after it.",
        "60s",
        frozenset({STREAM}),
    ),
    Spec(
        "eventhubs.loadBalancing.maxPartitions",
        None,
        _int(1),
        "The most partitions this query owns at once.",
        "8",
        frozenset({STREAM}),
    ),
)

RETIRED = {
    "eventhubs.maxsilenttime": "receivers are recreated on error and after eventhubs.receiverTimeout; remove it "
    "(e.g. .option('eventhubs.receiverTimeout', '60s') bounds the wait instead)",
    "eventhubs.slowpartitionadjustment": "backlog-proportional rate limits replace it; remove it (e.g. "
    ".option('maxEventsPerTrigger', '10000') is split across partitions by backlog)",
    "eventhubs.dynamicpartitiondiscovery": "partitions added at runtime are always picked up; remove it (e.g. "
    ".option('eventhubs.partitionDiscoveryInterval', '60s') sets how often)",
    "eventhubs.threadpoolsize": "not needed: partitions are read by Spark tasks; remove it (e.g. "
    ".option('eventhubs.prefetchCount', '500') tunes each task's receiver)",
}

BY_KEY = {spec.key.lower(): spec for spec in SPECS}
SPARK_OWNED = {"checkpointlocation"}


@dataclass(frozen=True)
class Options:
    """Parsed, validated options for one mode. Holds no secret: the connection string stays apart."""

    mode: str
    values: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.values[key.lower()]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key.lower(), default)

    @property
    def starting_position(self) -> Position:
        pos = self.get("eventhubs.startingPosition")
        if pos is not None:
            return pos
        return Latest() if self.mode == STREAM else Earliest()


def parse_options(raw: Mapping[str, str], mode: str) -> tuple[Options, str]:
    """Validate ``raw`` for ``mode``; returns the options and the connection string (kept apart)."""
    values: dict[str, Any] = {spec.key.lower(): spec.default for spec in SPECS if mode in spec.modes}
    connection: str | None = None
    for key, value in raw.items():
        lower = key.lower()
        if lower in SPARK_OWNED:
            continue  # Spark's own option, consumed by Spark (it passes it on to sources and sinks too)
        if lower == "path":  # spark.read.load(path) passes it; we take no path
            raise OptionError(
                "the eventhubs source takes no path: pass eventhubs.connectionString instead, e.g. "
                "spark.read.format('eventhubs').option('eventhubs.connectionString', conn).load()"
            )
        if lower in RETIRED:
            raise OptionError(f"{key}: not supported by eventhubs-spark: {RETIRED[lower]}")
        spec = BY_KEY.get(lower)
        if spec is None:
            import difflib

            usable = {s.key.lower(): s for s in SPECS if mode in s.modes}
            close = difflib.get_close_matches(lower, list(usable), n=1, cutoff=0.6)
            hint = f" Did you mean {usable[close[0]].key!r}, e.g. {_example(usable[close[0]])}?" if close else ""
            raise OptionError(
                f"unknown option {key!r}.{hint} Known options (e.g. "
                f"{_example(BY_KEY['eventhubs.consumergroup'])}): {', '.join(s.key for s in usable.values())}"
            )
        if mode not in spec.modes:
            where = {STREAM: "streaming reads", BATCH: "batch reads", WRITE: "writes"}
            api = {STREAM: "spark.readStream", BATCH: "spark.read", WRITE: "df.write"}[min(spec.modes)]
            raise OptionError(
                f"{spec.key} applies to {' and '.join(where[m] for m in sorted(spec.modes))}, not to {where[mode]}, "
                f"e.g. {api}.format('eventhubs').option({spec.key!r}, {spec.example!r})"
            )
        value = _with_example(spec, value)
        if spec.key == "eventhubs.connectionString":
            connection = str(value)
            continue
        if spec.secret:
            from .client.settings import Secret

            values[lower] = Secret(value)
            continue
        values[lower] = value
    if not connection or not connection.strip():
        raise OptionError(
            "eventhubs.connectionString is required, e.g. .option('eventhubs.connectionString', "
            "'Endpoint=sb://NAMESPACE.servicebus.windows.net/;SharedAccessKeyName=NAME;SharedAccessKey=KEY;"
            "EntityPath=HUB')"
        )
    store_conn = values.get("eventhubs.checkpointstore.connectionstring")
    store_url = values.get("eventhubs.checkpointstore.accounturl")
    if store_conn and store_url:
        raise OptionError(
            "set eventhubs.checkpointStore.connectionString or eventhubs.checkpointStore.accountUrl, not both, e.g. "
            ".option('eventhubs.checkpointStore.accountUrl', 'https://ACCOUNT.blob.core.windows.net')"
        )
    if values.get("eventhubs.checkpointstore.sastoken") and not store_url:
        raise OptionError(
            "eventhubs.checkpointStore.sasToken goes with eventhubs.checkpointStore.accountUrl, e.g. "
            ".option('eventhubs.checkpointStore.accountUrl', 'https://ACCOUNT.blob.core.windows.net')"
        )
    if bool(store_conn or store_url) != bool(values.get("eventhubs.checkpointstore.container")):
        raise OptionError(
            "the checkpoint store needs eventhubs.checkpointStore.container and either "
            "eventhubs.checkpointStore.connectionString or eventhubs.checkpointStore.accountUrl, e.g. "
            ".option('eventhubs.checkpointStore.container', 'eventhubs-checkpoints')"
        )
    for needs_store in ("eventhubs.startFromCheckpointStore", "eventhubs.ownership"):
        if values.get(needs_store.lower()) and not values.get("eventhubs.checkpointstore.container"):
            raise OptionError(
                f"{needs_store} works on the checkpoint store: also set eventhubs.checkpointStore.container and "
                "eventhubs.checkpointStore.connectionString (or eventhubs.checkpointStore.accountUrl), e.g. "
                ".option('eventhubs.checkpointStore.container', 'eventhubs-checkpoints')"
            )
    interval = values.get("eventhubs.loadbalancing.updateinterval")
    expiry = values.get("eventhubs.loadbalancing.ownershipexpiration")
    if interval is not None and expiry is not None and expiry <= 2 * interval:
        raise OptionError(
            f"eventhubs.loadBalancing.ownershipExpiration ({expiry:g}s) must be more than twice "
            f"eventhubs.loadBalancing.updateInterval ({interval:g}s), or ownership lapses between renewals, e.g. "
            "updateInterval=10s with ownershipExpiration=60s"
        )
    low, high = values.get("mineventspertrigger"), values.get("maxeventspertrigger")
    if low and high and low > high:
        raise OptionError(
            f"minEventsPerTrigger ({low}) must not exceed maxEventsPerTrigger ({high}), e.g. minEventsPerTrigger=1000 "
            "with maxEventsPerTrigger=10000"
        )
    if mode != WRITE and values.get("maxeventsperpartition") and values.get("eventhubs.useexclusivereceiver"):
        raise OptionError(
            "maxEventsPerPartition splits one partition over several concurrent tasks, and owner-level receivers "
            "would take the partition from each other: also set eventhubs.useExclusiveReceiver=false, e.g. "
            ".option('eventhubs.useExclusiveReceiver', 'false')"
        )
    return Options(mode, values), connection


def _example(spec: Spec) -> str:
    return f".option({spec.key!r}, {spec.example!r})"


def _with_example(spec: Spec, value: str) -> Any:
    """Parse one value; an error without an example gets the option's own."""
    try:
        return spec.parse(spec.key, value)
    except OptionError as exc:
        text = str(exc)
        if not re.search(r"e\.g\.|[Ee]xample|such as", text):
            raise OptionError(f"{text}. Example: {_example(spec)}") from None
        raise


def options_table() -> str:
    """The README's options table, generated from :data:`SPECS` (a test keeps them in step)."""
    where = {STREAM: "stream", BATCH: "batch", WRITE: "write"}
    rows = ["| option | default | applies to | meaning | example |", "|---|---|---|---|---|"]
    for spec in SPECS:
        required = spec.key == "eventhubs.connectionString"
        default = "required" if required else "" if spec.default is None else str(spec.default)
        if isinstance(spec.default, bool):
            default = str(spec.default).lower()
        modes = ", ".join(where[m] for m in (STREAM, BATCH, WRITE) if m in spec.modes)
        rows.append(f"| `{spec.key}` | {default} | {modes} | {spec.doc} | `{spec.example}` |")
    return "\n".join(rows)
