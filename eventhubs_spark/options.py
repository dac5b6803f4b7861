"""Every option the connector takes, in one table: key, default, parser, one-line doc, example.

Keys are case-insensitive and carry the azure-event-hubs-spark names, so a migration is a package
change. An unknown key, a value that does not parse, or an option that does not apply to the mode
(reading a stream, reading a batch, writing) is an :class:`OptionError` that names the option and
shows a valid example. Nothing is silently ignored.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .client.settings import (
    ENTRA_METHODS,
    ConnectionSettings,
    EntraSettings,
    Secret,
    host_and_port,
    parse_connection_string,
)
from .errors import OptionError
from .positions import Earliest, Latest, Position, parse_position, parse_positions

_LOG = logging.getLogger("eventhubs_spark")

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


def _auth_method(option: str, value: str) -> str:
    from .client.settings import AUTH_METHODS

    by_lower = {m.lower(): m for m in AUTH_METHODS}
    text = str(value).strip().lower()
    if text not in by_lower:
        raise OptionError(
            f"{option}: expected one of {', '.join(AUTH_METHODS)}, got {value!r}. Example: .option({option!r}, "
            "'servicePrincipal')"
        )
    return by_lower[text]


def _namespace(option: str, value: str) -> str:
    """``NAMESPACE.servicebus.windows.net`` (host[:port]); a pasted ``sb://.../`` endpoint is accepted."""
    namespace = host_and_port(str(value).strip(), allow_path=False)
    if namespace is None:
        raise OptionError(
            f"{option}: expected a fully qualified namespace, got {value!r}. Example: .option({option!r}, "
            "'NAMESPACE.servicebus.windows.net')"
        )
    return namespace


def _sas_token(option: str, value: str) -> str:
    """A ``SharedAccessSignature sr=..&sig=..&se=..&skn=..`` token; the prefix may be left out. An
    expired token is refused here, not after a minute of failed connection attempts."""
    import time
    import urllib.parse

    text = str(value).strip()
    body = text.removeprefix("SharedAccessSignature").strip()
    fields = dict(urllib.parse.parse_qsl(body, keep_blank_values=True))
    example = "SharedAccessSignature sr=NAMESPACE.servicebus.windows.net%2Fhub&sig=SIG&se=1900000000&skn=listen"
    missing = [f for f in ("sr", "sig", "se") if not fields.get(f)]
    if missing:
        raise OptionError(
            f"{option}: the token lacks {', '.join(missing)} (the token is not shown). Example: "
            f".option({option!r}, {example!r})"
        )
    try:
        expiry = int(fields["se"])
    except ValueError:
        raise OptionError(f"{option}: se= must be a Unix time in seconds. Example: .option({option!r}, "
                          f"{example!r})") from None  # fmt: skip
    if expiry <= time.time():
        import datetime as dt

        when = dt.datetime.fromtimestamp(expiry, tz=dt.timezone.utc).isoformat()
        raise OptionError(
            f"{option}: the token expired at {when} (se={expiry}); issue one that outlives the query, or sign in "
            f"with Microsoft Entra ID, e.g. .option('eventhubs.auth', 'managedIdentity')"
        )
    return "SharedAccessSignature " + body


def _authority(option: str, value: str) -> str:
    text = str(value).strip().rstrip("/")
    if "://" in text and not text.startswith("https://"):
        raise OptionError(f"{option}: the authority must be https, got {value!r}. Example: "
                          f".option({option!r}, 'https://login.microsoftonline.us')")  # fmt: skip
    return text


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
        "Event Hubs connection string (shared access key or SharedAccessSignature). Without EntityPath, name the "
        "hub with eventhubs.name. Either this or eventhubs.namespace is required.",
        "Endpoint=sb://NAMESPACE.servicebus.windows.net/;SharedAccessKeyName=NAME;SharedAccessKey=KEY;EntityPath=HUB",
        secret=True,
    ),
    Spec(
        "eventhubs.namespace",
        None,
        _namespace,
        "Instead of a connection string: the fully qualified namespace, signed in with eventhubs.sasToken or "
        "Microsoft Entra ID (eventhubs.auth).",
        "NAMESPACE.servicebus.windows.net",
    ),
    Spec(
        "eventhubs.name",
        None,
        _text,
        "The event hub (with eventhubs.namespace, or a namespace-level connection string).",
        "telemetry",
    ),
    Spec(
        "eventhubs.auth",
        None,
        _auth_method,
        "How to sign in: connectionString, sasToken, servicePrincipal (secret or certificate), managedIdentity, "
        "workloadIdentity or defaultAzureCredential. Default: what the other options imply (a namespace alone "
        "uses defaultAzureCredential).",
        "servicePrincipal",
    ),
    Spec(
        "eventhubs.sasToken",
        None,
        _sas_token,
        "A shared access signature for the namespace or hub, with eventhubs.namespace. It cannot be renewed: "
        "it must outlive the query.",
        "SharedAccessSignature sr=NAMESPACE.servicebus.windows.net%2Fhub&sig=SIG&se=1900000000&skn=listen",
        secret=True,
    ),
    Spec(
        "eventhubs.entra.tenantId",
        None,
        _text,
        "Microsoft Entra tenant (directory) ID of the service principal or workload identity.",
        "00000000-0000-0000-0000-000000000000",
    ),
    Spec(
        "eventhubs.entra.clientId",
        None,
        _text,
        "Application (client) ID of the service principal or workload "
        "identity, or of a user-assigned managed identity.",
        "00000000-0000-0000-0000-000000000000",
    ),
    Spec("eventhubs.entra.clientSecret", None, _text, "Service principal client secret.", "CLIENT_SECRET", secret=True),
    Spec(
        "eventhubs.entra.certificatePath",
        None,
        _text,
        "Service principal certificate: a PEM or PKCS12 file present on every node (e.g. a Unity Catalog volume path).",
        "/Volumes/main/secrets/certs/sp.pem",
    ),
    Spec(
        "eventhubs.entra.certificate",
        None,
        _text,
        "Service principal certificate as PEM text (private key and certificate), e.g. from a secret scope.",
        "-----BEGIN PRIVATE KEY-----...",
        secret=True,
    ),
    Spec(
        "eventhubs.entra.certificatePassword",
        None,
        _text,
        "Password of the certificate's private key, if any.",
        "PASSWORD",
        secret=True,
    ),
    Spec(
        "eventhubs.entra.federatedTokenFile",
        None,
        _text,
        "Workload identity: the federated token file (default: AZURE_FEDERATED_TOKEN_FILE).",
        "/var/run/secrets/azure/tokens/azure-identity-token",
    ),
    Spec(
        "eventhubs.entra.authorityHost",
        None,
        _authority,
        "Microsoft Entra authority for sovereign or private clouds (default: login.microsoftonline.com).",
        "https://login.microsoftonline.us",
    ),
    Spec(
        "eventhubs.entra.disableInstanceDiscovery",
        False,
        parse_bool,
        "Skip Entra instance discovery (private clouds, Azure Stack).",
        "true",
    ),
    Spec(
        "eventhubs.useDevelopmentEmulator",
        False,
        parse_bool,
        "Plain AMQP without TLS to a local emulator, as UseDevelopmentEmulator=true in a connection string.",
        "true",
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
        "or, without one, Microsoft Entra ID: the eventhubs.entra.* identity, else DefaultAzureCredential.",
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

# Every key of azure-event-hubs-spark 2.3.x's EventHubsConf (its key constants) that this connector
# does not take as it is gets an answer: an alias, or an error that names what replaces it.
ALIASES = {
    "eventhubs.maxeventspertrigger": "maxEventsPerTrigger",
}

_AAD = (
    "sign in with Microsoft Entra ID through eventhubs.auth and the eventhubs.entra.* options instead of a JVM "
    "callback class; remove it (e.g. .option('eventhubs.auth', 'servicePrincipal')"
    ".option('eventhubs.entra.tenantId', 'TENANT').option('eventhubs.entra.clientId', 'CLIENT')"
    ".option('eventhubs.entra.clientSecret', SECRET))"
)
_SLOW = (
    "slow-partition adjustment is replaced by rate limits that follow each partition's backlog; remove it "
    "(e.g. .option('maxEventsPerTrigger', '10000') is split across partitions by backlog)"
)
_PER_PARTITION_RATE = (
    "per-partition caps are replaced by maxEventsPerTrigger, a budget per micro-batch split across partitions in "
    "proportion to their backlog; remove it (e.g. maxRatePerPartition=1000 on 8 partitions becomes "
    ".option('maxEventsPerTrigger', '8000'))"
)
RETIRED = {
    "eventhubs.maxsilenttime": "receivers are recreated on error and after eventhubs.receiverTimeout; remove it "
    "(e.g. .option('eventhubs.receiverTimeout', '60s') bounds the wait instead)",
    "eventhubs.slowpartitionadjustment": _SLOW,
    "eventhubs.maxacceptablebatchreceivetime": _SLOW,
    "eventhubs.maxbatchreceivetime": _SLOW,
    "eventhubs.throttlingstatusplugin": _SLOW,
    "eventhubs.dynamicpartitiondiscovery": "partitions added at runtime are always picked up; remove it (e.g. "
    ".option('eventhubs.partitionDiscoveryInterval', '60s') sets how often)",
    "eventhubs.threadpoolsize": "not needed: partitions are read by Spark tasks; remove it (e.g. "
    ".option('eventhubs.prefetchCount', '500') tunes each task's receiver)",
    "eventhubs.maxrateperpartition": _PER_PARTITION_RATE,
    "eventhubs.maxratesperpartition": _PER_PARTITION_RATE,
    "eventhubs.metricplugin": "a JVM plugin class cannot load into a Python source; each task logs its counts and "
    "the driver the events behind latest per trigger; remove it (e.g. "
    "spark.executorEnv.EVENTHUBS_SPARK_LOG_LEVEL=INFO shows the task counts in the executor logs)",
    "eventhubs.useaadauth": _AAD,
    "eventhubs.aadauthcallback": _AAD,
    "eventhubs.aadauthcallbackparams": _AAD,
    "partitionpreferredlocationstrategy": "Spark lets no Python source ask for task placement; receivers are "
    "kept per executor instead and a move costs one link attach; remove it (e.g. drop "
    ".option('partitionPreferredLocationStrategy', 'Hash'))",
    "usesimulatedclient": "the old connector's test switch; test against the local emulator instead "
    "(python -m eventhubs_spark.emulator); remove it (e.g. .option('eventhubs.connectionString', "
    "'Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub;"
    "UseDevelopmentEmulator=true'))",
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


def check_read_options(raw: Mapping[str, str]) -> None:
    """Raise the first error that options would meet as a stream *and* as a batch read.

    Spark calls a source's ``schema()`` at ``.load()``, before it knows which of the two the user
    builds; an option that suits only one of them is left for the reader to judge.
    """
    try:
        parse_options(raw, STREAM)
    except OptionError:
        parse_options(raw, BATCH)  # fine as a batch read, or this error is the one to show


def parse_options(raw: Mapping[str, str], mode: str) -> tuple[Options, ConnectionSettings]:
    """Validate ``raw`` for ``mode``; returns the options and the connection settings, where the
    secrets live (wrapped in :class:`~eventhubs_spark.client.settings.Secret`)."""
    values: dict[str, Any] = {spec.key.lower(): spec.default for spec in SPECS if mode in spec.modes}
    connection: str | None = None
    ignored: list[str] = []
    for key, value in raw.items():
        lower = key.lower()
        if lower in ALIASES:
            if ALIASES[lower].lower() in {k.lower() for k in raw if k.lower() != lower}:
                raise OptionError(
                    f"{key} is another name for {ALIASES[lower]}: set one of them, e.g. "
                    f"{_example(BY_KEY[ALIASES[lower].lower()])}"
                )
            lower = ALIASES[lower].lower()
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
            if close:
                hint = f"did you mean {usable[close[0]].key!r}, e.g. {_example(usable[close[0]])}?"
            else:
                hint = (
                    f"the options are listed in the README's options table (e.g. "
                    f"{_example(BY_KEY['eventhubs.consumergroup'])})"
                )
            raise OptionError(f"unknown option {key!r}: {hint}")
        if mode == WRITE and WRITE not in spec.modes:
            # The old connector took one EventHubsConf for reads and writes, so read options come along.
            _with_example(spec, value)  # a bad value is still an error: it would fail the reader too
            ignored.append(key)
            continue
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
            values[lower] = Secret(value)
            continue
        values[lower] = value
    if ignored:
        _LOG.warning("eventhubs: %s only appl%s to reads; ignored on this write", ", ".join(sorted(ignored)),
                     "ies" if len(ignored) == 1 else "y")  # fmt: skip
    settings = connection_settings(values, connection)
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
    return Options(mode, values), settings


_CONN_EXAMPLE = (
    ".option('eventhubs.connectionString', 'Endpoint=sb://NAMESPACE.servicebus.windows.net/;"
    "SharedAccessKeyName=NAME;SharedAccessKey=KEY;EntityPath=HUB'), or .option('eventhubs.namespace', "
    "'NAMESPACE.servicebus.windows.net').option('eventhubs.name', 'HUB').option('eventhubs.auth', 'managedIdentity')"
)
# The identity options that name something (not the disableInstanceDiscovery switch), from the table above.
_ENTRA_KEYS = tuple(s.key for s in SPECS if s.key.startswith("eventhubs.entra.") and s.default is None)


def connection_settings(values: Mapping[str, Any], connection: str | None) -> ConnectionSettings:
    """Where the hub is and how to sign in, from the connection and ``eventhubs.auth`` options.

    Every combination that would leave an option unused, or a method without what it needs, is an
    error naming the options: a credential mix-up found on the driver costs nothing; found by a
    failing executor sign-in it costs a stack trace per task.
    """
    namespace, name = values.get("eventhubs.namespace"), values.get("eventhubs.name")
    sas = values.get("eventhubs.sastoken")
    entra_set = [k for k in _ENTRA_KEYS if values.get(k.lower())]
    method = values.get("eventhubs.auth")
    if connection and namespace:
        raise OptionError(
            "set eventhubs.connectionString or eventhubs.namespace, not both, e.g. "
            ".option('eventhubs.namespace', 'NAMESPACE.servicebus.windows.net').option('eventhubs.name', 'HUB')"
        )
    if not connection and not namespace:
        raise OptionError(f"eventhubs.connectionString (or eventhubs.namespace) is required, e.g. {_CONN_EXAMPLE}")
    if method is None:
        if connection:
            method = "connectionString"
        elif sas:
            method = "sasToken"
        else:
            method = _implied_entra_method(values)
    if (method == "connectionString") != bool(connection):
        raise OptionError(
            "eventhubs.auth=connectionString signs in with eventhubs.connectionString, and a connection string "
            "carries its own credentials: drop eventhubs.auth or the connection string, e.g. "
            f"{_CONN_EXAMPLE}"
        )
    if sas and method != "sasToken":
        raise OptionError(
            "eventhubs.sasToken goes with eventhubs.namespace (and eventhubs.auth=sasToken, or no eventhubs.auth), "
            "e.g. .option('eventhubs.namespace', 'NAMESPACE.servicebus.windows.net').option('eventhubs.sasToken', "
            "'SharedAccessSignature sr=...&sig=...&se=...&skn=...')"
        )
    if method == "sasToken" and not sas:
        raise OptionError(
            "eventhubs.auth=sasToken needs eventhubs.sasToken, e.g. .option('eventhubs.sasToken', "
            "'SharedAccessSignature sr=NAMESPACE.servicebus.windows.net%2Fhub&sig=SIG&se=1900000000&skn=listen')"
        )
    store_uses_entra = bool(
        values.get("eventhubs.checkpointstore.accounturl") and not values.get("eventhubs.checkpointstore.sastoken")
    )
    entra = None
    if method in ENTRA_METHODS or store_uses_entra:
        entra = _entra_settings(values, method if method in ENTRA_METHODS else _implied_entra_method(values))
    elif entra_set:
        raise OptionError(
            f"{', '.join(entra_set)} would be unused: eventhubs.auth is {method} "
            "and nothing else signs in with Microsoft Entra ID. Use the identity with e.g. "
            ".option('eventhubs.auth', 'servicePrincipal'), or drop the option"
        )
    if connection:
        settings = parse_connection_string(connection, hub=name)
        return dataclasses.replace(
            settings, entra=entra, emulator=settings.emulator or bool(values.get("eventhubs.usedevelopmentemulator"))
        )
    if not name:
        raise OptionError(
            "eventhubs.namespace needs eventhubs.name (the event hub), e.g. .option('eventhubs.name', 'telemetry')"
        )
    return ConnectionSettings(
        namespace=str(namespace),
        hub=name,
        sas_token=sas,  # set only with eventhubs.auth=sasToken (checked above)
        entra=entra,
        emulator=bool(values.get("eventhubs.usedevelopmentemulator")),
    )


def _implied_entra_method(values: Mapping[str, Any]) -> str:
    if (
        values.get("eventhubs.entra.clientsecret")
        or values.get("eventhubs.entra.certificatepath")
        or values.get("eventhubs.entra.certificate")
    ):
        return "servicePrincipal"
    if values.get("eventhubs.entra.federatedtokenfile"):
        return "workloadIdentity"
    return "defaultAzureCredential"


def _entra_settings(values: Mapping[str, Any], method: str) -> EntraSettings:
    def get(key: str) -> Any:
        return values.get(f"eventhubs.entra.{key.lower()}")

    secret, path, pem = get("clientSecret"), get("certificatePath"), get("certificate")
    if method == "servicePrincipal":
        missing = [f"eventhubs.entra.{k}" for k in ("tenantId", "clientId") if not get(k)]
        if missing:
            raise OptionError(
                f"eventhubs.auth=servicePrincipal needs {' and '.join(missing)}, e.g. "
                ".option('eventhubs.entra.tenantId', 'TENANT_ID').option('eventhubs.entra.clientId', 'CLIENT_ID')"
            )
        if sum(1 for v in (secret, path, pem) if v) != 1:
            raise OptionError(
                "eventhubs.auth=servicePrincipal needs exactly one of eventhubs.entra.clientSecret, "
                "eventhubs.entra.certificatePath and eventhubs.entra.certificate, e.g. "
                ".option('eventhubs.entra.clientSecret', dbutils.secrets.get('scope', 'sp-secret'))"
            )
    else:
        extra = [f"eventhubs.entra.{k}" for k, v in (("clientSecret", secret), ("certificatePath", path),
                                                     ("certificate", pem)) if v]  # fmt: skip
        if extra:
            raise OptionError(
                f"{', '.join(extra)} belong to a service principal, but eventhubs.auth is {method}: set "
                ".option('eventhubs.auth', 'servicePrincipal'), or drop them"
            )
        if method == "managedIdentity" and (get("tenantId") or get("federatedTokenFile")):
            raise OptionError(
                "eventhubs.auth=managedIdentity takes only eventhubs.entra.clientId (a user-assigned identity); "
                "drop eventhubs.entra.tenantId and eventhubs.entra.federatedTokenFile, e.g. "
                ".option('eventhubs.entra.clientId', 'CLIENT_ID')"
            )
    if get("certificatePassword") and not (path or pem):
        raise OptionError(
            "eventhubs.entra.certificatePassword goes with eventhubs.entra.certificatePath or "
            "eventhubs.entra.certificate, e.g. .option('eventhubs.entra.certificatePath', '/Volumes/main/certs/sp.pfx')"
        )
    if get("federatedTokenFile") and method not in ("workloadIdentity", "defaultAzureCredential"):
        raise OptionError(
            "eventhubs.entra.federatedTokenFile belongs to a workload identity: set "
            ".option('eventhubs.auth', 'workloadIdentity')"
        )
    return EntraSettings(
        method=method,
        tenant_id=get("tenantId"),
        client_id=get("clientId"),
        client_secret=secret,
        certificate_path=path,
        certificate=pem,
        certificate_password=get("certificatePassword"),
        federated_token_file=get("federatedTokenFile"),
        authority_host=get("authorityHost"),
        disable_instance_discovery=bool(values.get("eventhubs.entra.disableinstancediscovery")),
    )


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
        default = "this or `eventhubs.namespace`" if required else "" if spec.default is None else str(spec.default)
        if isinstance(spec.default, bool):
            default = str(spec.default).lower()
        modes = ", ".join(where[m] for m in (STREAM, BATCH, WRITE) if m in spec.modes)
        rows.append(f"| `{spec.key}` | {default} | {modes} | {spec.doc} | `{spec.example}` |")
    return "\n".join(rows)
