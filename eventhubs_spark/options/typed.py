"""The options of one read or write, parsed once into typed values: :class:`ReadOptions` and :class:`WriteOptions`.

An unknown key, a value that does not parse, or an option that does not apply to the mode (reading a stream,
reading a batch, writing) is an :class:`~eventhubs_spark.errors.OptionError` that names the option and shows a
valid example. Nothing is silently ignored.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eventhubs_spark import defaults
from eventhubs_spark.auth.network import WEBSOCKETS, HttpProxy, NetworkSettings
from eventhubs_spark.auth.secret import Secret
from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.auth.sign_in import resolve_sign_in
from eventhubs_spark.common.retry import RetryPolicy
from eventhubs_spark.errors import OptionError
from eventhubs_spark.options.checks import check_combinations, unknown_key_error
from eventhubs_spark.options.parsers import BATCH, READ, STREAM, WRITE
from eventhubs_spark.options.retired import ALIASES, RETIRED, retired_error
from eventhubs_spark.options.spec import example_of, parse_value
from eventhubs_spark.options.specs import BY_KEY, SPARK_OWNED, SPECS
from eventhubs_spark.positions.event_positions import Earliest, Latest, Position

_LOG = logging.getLogger(__name__)

if TYPE_CHECKING:
    from eventhubs_spark.capture.store import CaptureSource


@dataclass(frozen=True)
class StoreOptions:
    """The blob checkpoint store: a container, reached by a connection string or an account URL (with a
    SAS token, or signed in with the hub's Entra identity)."""

    container: str
    connection_string: Secret | None = None
    account_url: str | None = None
    sas_token: Secret | None = None


@dataclass(frozen=True)
class OwnershipOptions:
    """Ownership mode: this query's owner id (None: a random one per run) and the load balancer's settings."""

    owner_id: str | None
    strategy: str
    update_interval: float
    expiration: float
    max_partitions: int | None


@dataclass(frozen=True)
class ReadOptions:
    """Everything a stream or batch read takes, parsed and checked once (``spark.readStream`` or ``spark.read``)."""

    mode: str
    settings: ConnectionSettings
    consumer_group: str
    starting_position: Position | None
    starting_positions: Mapping[str, Position]
    ending_position: Position | None
    ending_positions: Mapping[str, Position]
    max_events_per_trigger: int | None
    trigger_available_now: bool
    min_events_per_trigger: int | None
    max_trigger_delay: float
    fail_on_data_loss: bool
    max_events_per_partition: int | None
    prefetch_count: int
    receiver_timeout: float
    operation_timeout: float
    use_exclusive_receiver: bool
    partition_discovery_interval: float
    receiver_service: bool
    partition_homes: bool
    executor_ports: str
    executor_bind_address: str
    driver_channel: bool
    driver_bind_address: str
    driver_ports: str
    checkpoint_location: str | None
    stalled_after_batches: int
    stalled_after: float
    lag_progress_partitions: int
    min_events_per_task: int
    max_partitions_per_task: int
    read_ahead_events: int
    read_ahead_bytes: int
    checkpoint_store: StoreOptions | None
    start_from_checkpoint_store: bool
    ownership: OwnershipOptions | None
    capture: CaptureSource | None
    avro_registry: str | None
    avro_schema: str | None
    avro_schema_id: str | None
    avro_mode: str
    avro_corrupt_column: str
    json_schema: str | None
    json_schema_location: str | None
    json_mode: str | None
    json_rescue_column: str
    json_sample_events: int
    json_keep_body: bool
    json_registry: str | None
    json_schema_id: str | None
    json_validate: bool

    @property
    def decodes_json(self) -> bool:
        """Whether the read decodes JSON bodies into columns (a fixed schema, a kept one, or the registry's)."""
        return bool(self.json_schema or self.json_schema_location or self.json_registry)

    @property
    def decodes_bodies(self) -> bool:
        """Whether the read decodes its bodies into columns at all (Avro or JSON): else its schema is the source's."""
        return bool(self.avro_registry) or self.decodes_json

    @property
    def default_start(self) -> Position:
        """``eventhubs.startingPosition``, else the end of the stream (streams) or its start (batch reads)."""
        if self.starting_position is not None:
            return self.starting_position
        return Latest() if self.mode == STREAM else Earliest()


@dataclass(frozen=True)
class WriteOptions:
    """What a write takes (``df.write`` and ``df.writeStream``)."""

    settings: ConnectionSettings
    operation_timeout: float
    avro_registry: str | None
    avro_schema: str | None
    avro_group: str | None
    avro_record_name: str
    avro_record_namespace: str | None
    json_registry: str | None
    json_schema_id: str | None
    json_validate: bool
    json_group: str | None
    json_schema_name: str | None
    consumer_group: str
    checkpoint_location: str | None
    exactly_once: bool
    write_id: str | None


def check_read_options(raw: Mapping[str, str]) -> ReadOptions:
    """Raise the first error that options would meet as a stream *and* as a batch read; else the options as
    the first of the two that takes them.

    Spark calls a source's ``schema()`` at ``.load()``, before it knows which of the two the user
    builds; an option that suits only one of them is left for the reader to judge.
    """
    try:
        return read_options(raw, STREAM)
    except OptionError:
        return read_options(raw, BATCH)  # fine as a batch read, or this error is the one to show


def shareable_options(raw: Mapping[str, str], namespace: str, hub: str, emulator: bool,
                      auth_method: str) -> dict[str, str]:  # fmt: skip
    """The options a query was started with, less every secret one (the options table marks them): the
    connection string gives way to its namespace and hub, which are not secret; its key stays with the user.
    ``_signIn`` says how it signed in (``connectionString``, ``sasToken``, an Entra method), so a command
    knows to ask for the key rather than try another identity."""
    known = {spec.key.lower(): spec for spec in SPECS}
    kept = {key: str(value) for key, value in raw.items()
            if key.lower() in known and not known[key.lower()].secret}  # fmt: skip
    kept.update({"eventhubs.namespace": namespace, "eventhubs.name": hub, "_signIn": auth_method})
    if emulator:
        kept["eventhubs.useDevelopmentEmulator"] = "true"
    return kept


def read_options(raw: Mapping[str, str], mode: str) -> ReadOptions:
    """The options of a stream (``mode="stream"``) or batch (``"batch"``) read, checked and typed."""
    if mode not in READ:
        raise ValueError(f"mode must be {STREAM!r} or {BATCH!r}, not {mode!r}")
    options = parse_options(raw, mode)
    assert isinstance(options, ReadOptions)
    return options


def write_options(raw: Mapping[str, str]) -> WriteOptions:
    """The options of a write, checked and typed (read options are ignored with one warning)."""
    options = parse_options(raw, WRITE)
    assert isinstance(options, WriteOptions)
    return options


def parse_options(raw: Mapping[str, str], mode: str) -> ReadOptions | WriteOptions:
    """Validate ``raw`` for ``mode``; returns the typed options, whose connection settings hold the secrets,
    wrapped in :class:`~eventhubs_spark.auth.credentials.Secret`.

    Every option with a ``field`` fills it, the same way for all of them (its value, else its default);
    the sign-in and network options make the connection settings."""
    values = _values(raw, mode)
    settings = resolve_sign_in(values, _ENTRA_KEYS)
    settings = dataclasses.replace(settings, network=_network(values), retry=_retry(values))
    check_combinations(values, mode)
    fields: dict[str, dict[str, Any]] = {"": {}, "store": {}, "ownership": {}, "capture": {}}
    for spec in SPECS:
        if spec.field is not None and (spec.modes & READ if mode != WRITE else WRITE in spec.modes):
            group, _, name = spec.field.rpartition(".")
            fields[group][name] = values.get(spec.key.lower(), spec.default)
    typed = fields[""]
    if mode == WRITE:
        return WriteOptions(settings=settings, **typed)
    store = StoreOptions(**fields["store"]) if fields["store"]["container"] else None
    capture = _capture_source(fields["capture"], settings)
    ownership = OwnershipOptions(**fields["ownership"]) if typed.pop("ownership") else None
    if typed["receiver_service"] is None:  # unset: streams read through it, batch reads do not
        typed["receiver_service"] = mode == STREAM
    return ReadOptions(mode=mode, settings=settings, checkpoint_store=store, ownership=ownership, capture=capture,
                       **typed)  # fmt: skip


def _values(raw: Mapping[str, str], mode: str) -> dict[str, Any]:
    """Every option of ``mode`` by lower-cased key (defaults filled in, secrets wrapped, the connection
    string among them); unknown, retired and misplaced keys and bad values fail here."""
    values: dict[str, Any] = {spec.key.lower(): spec.default for spec in SPECS if mode in spec.modes}
    ignored: list[str] = []
    for key, value in raw.items():
        lower = key.lower()
        if lower in ALIASES:
            if ALIASES[lower].lower() in {k.lower() for k in raw if k.lower() != lower}:
                example = example_of(BY_KEY[ALIASES[lower].lower()])
                raise OptionError(
                    f"{key} is another name for {ALIASES[lower]}: set one of them, e.g. {example}", example
                )
            lower = ALIASES[lower].lower()
        if lower in SPARK_OWNED:
            continue  # Spark's own option, consumed by Spark (it passes it on to sources and sinks too)
        if lower == "path":  # spark.read.load(path) passes it; we take no path
            example = "spark.read.format('eventhubs').option('eventhubs.connectionString', conn).load()"
            raise OptionError(
                f"the eventhubs source takes no path: pass eventhubs.connectionString instead, e.g. {example}", example
            )
        if lower in RETIRED:
            raise retired_error(key)
        spec = BY_KEY.get(lower)
        if spec is None:
            raise unknown_key_error(key, mode)
        if mode == WRITE and WRITE not in spec.modes:
            # The old connector took one EventHubsConf for reads and writes, so read options come along.
            parse_value(spec, value)  # a bad value is still an error: it would fail the reader too
            ignored.append(key)
            continue
        if mode not in spec.modes:
            where = {STREAM: "streaming reads", BATCH: "batch reads", WRITE: "writes"}
            api = {STREAM: "spark.readStream", BATCH: "spark.read", WRITE: "df.write"}[min(spec.modes)]
            example = f"{api}.format('eventhubs').option({spec.key!r}, {spec.example!r})"
            raise OptionError(
                f"{spec.key} applies to {' and '.join(where[m] for m in sorted(spec.modes))}, not to {where[mode]}, "
                f"e.g. {example}",
                example,
            )
        value = parse_value(spec, value)
        values[lower] = Secret(value) if spec.secret else value
    if ignored:
        _LOG.warning("eventhubs: %s only appl%s to reads; ignored on this write", ", ".join(sorted(ignored)),
                     "ies" if len(ignored) == 1 else "y")  # fmt: skip
    return values


def _network(values: Mapping[str, Any]) -> NetworkSettings:
    """Transport, proxy, custom endpoint and CA bundle, checked together."""
    host, port = values.get("eventhubs.httpproxy.hostname"), values.get("eventhubs.httpproxy.port")
    user, password = values.get("eventhubs.httpproxy.username"), values.get("eventhubs.httpproxy.password")
    transport = values.get("eventhubs.transporttype")
    proxy_example = (
        ".option('eventhubs.httpProxy.hostname', 'proxy.example.com').option('eventhubs.httpProxy.port', '3128')"
    )
    if bool(host) != bool(port) or ((user or password) and not host):
        raise OptionError(
            f"an HTTP proxy needs eventhubs.httpProxy.hostname and eventhubs.httpProxy.port, e.g. {proxy_example}",
            proxy_example,
        )
    if bool(user) != bool(password):
        example = (
            ".option('eventhubs.httpProxy.username', 'svc-spark').option('eventhubs.httpProxy.password', PASSWORD)"
        )
        raise OptionError(
            f"a proxy that asks for credentials needs eventhubs.httpProxy.username and eventhubs.httpProxy.password, "
            f"e.g. {example}",
            example,
        )
    proxy = None
    if host:
        if transport is not None and transport != WEBSOCKETS:
            example = ".option('eventhubs.transportType', 'amqpWebSockets')"
            raise OptionError(
                f"an HTTP proxy carries AMQP over WebSockets only (port 443), not eventhubs.transportType={transport}: "
                f"set it to amqpWebSockets or leave it out, e.g. {example}",
                example,
            )
        transport = WEBSOCKETS
        proxy = HttpProxy(str(host), int(port or 0), str(user) if user else None, password if password else None)
    return NetworkSettings(
        transport=transport or NetworkSettings.transport,
        proxy=proxy,
        custom_endpoint=values.get("eventhubs.customendpointaddress"),
        ca_file=values.get("eventhubs.connectionverify"),
        idle_timeout=float(values.get("eventhubs.connectionidletimeout", defaults.CONNECTION_IDLE_TIMEOUT)),
    )


def _retry(values: Mapping[str, Any]) -> RetryPolicy:
    """The query's retry policy from the eventhubs.retry.* options (each default where not given)."""
    spec = {s.key.lower(): s for s in SPECS}

    def get(key: str) -> Any:
        return values.get(key, spec[key].default)

    initial, longest = get("eventhubs.retry.initialdelay"), get("eventhubs.retry.maxdelay")
    if initial <= 0 or longest < initial:
        example = ".option('eventhubs.retry.initialDelay', '100ms').option('eventhubs.retry.maxDelay', '2s')"
        raise OptionError(
            f"eventhubs.retry.initialDelay ({initial:g} s) must be above 0 and at most eventhubs.retry.maxDelay "
            f"({longest:g} s). Example: {example}",
            example,
        )
    return RetryPolicy(
        max_attempts=get("eventhubs.retry.maxattempts"),
        initial_delay=initial,
        max_delay=longest,
        jitter=get("eventhubs.retry.jitter"),
    )


def _capture_source(fields: Mapping[str, Any], settings: ConnectionSettings) -> CaptureSource | None:
    """Where the hub's Capture writes, when eventhubs.capture.location says (None: the read is the hub's alone)."""
    from eventhubs_spark.capture.store import CaptureSource

    if not fields.get("location"):
        for key in ("connection_string", "sas_token", "namespace"):
            if fields.get(key) is not None:
                option = f"eventhubs.capture.{_camel(key)}"
                example = ".option('eventhubs.capture.location', 'abfss://capture@ACCOUNT.dfs.core.windows.net')"
                raise OptionError(f"{option} goes with eventhubs.capture.location, e.g. {example}", example)
        return None
    if fields.get("connection_string") is not None and fields.get("sas_token") is not None:
        example = ".option('eventhubs.capture.sasToken', 'sv=...&sig=...')"
        raise OptionError("set eventhubs.capture.connectionString or eventhubs.capture.sasToken, not both, e.g. "
                          f"{example}", example)  # fmt: skip
    namespace = fields.get("namespace") or settings.namespace.split(".")[0]
    return CaptureSource(location=fields["location"], name_format=fields["name_format"], namespace=namespace,
                         hub=settings.hub, connection_string=fields.get("connection_string"),
                         sas_token=fields.get("sas_token"), late_file_wait=fields["late_file_wait"])  # fmt: skip


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


# The identity options that name something (not the disableInstanceDiscovery switch), from the table above.
_ENTRA_KEYS = tuple(s.key for s in SPECS if s.key.startswith("eventhubs.entra.") and s.default is None)
