"""Every option the connector takes, in one table: key, default, parser, one-line doc, example.

Keys are case-insensitive and carry the azure-event-hubs-spark names, so a migration is a package
change. An unknown key, a value that does not parse, or an option that does not apply to the mode
(reading a stream, reading a batch, writing) is an :class:`OptionError` that names the option and
shows a valid example. Nothing is silently ignored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from eventhubs_spark import defaults
from eventhubs_spark.auth.network import WEBSOCKETS, HttpProxy, NetworkSettings
from eventhubs_spark.auth.secret import Secret
from eventhubs_spark.auth.settings import ConnectionSettings, host_and_port
from eventhubs_spark.auth.sign_in import resolve_sign_in
from eventhubs_spark.auth.storage import local_path
from eventhubs_spark.common.retry import RetryPolicy
from eventhubs_spark.errors import OptionError
from eventhubs_spark.positions.event_positions import Earliest, Latest, Position, parse_position, parse_positions

if TYPE_CHECKING:
    from eventhubs_spark.capture.store import CaptureSource

_LOG = logging.getLogger("eventhubs_spark")

STREAM, BATCH, WRITE = "stream", "batch", "write"
READ = frozenset({STREAM, BATCH})
ALL = frozenset({STREAM, BATCH, WRITE})


def parse_bool(option: str, value: str) -> bool:
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    example = f".option({option!r}, 'true')"
    raise OptionError(f"{option}: expected true or false, got {value!r}. Example: {example}", example)


def _int(minimum: int) -> Callable[[str, str], int]:
    def parse(option: str, value: str) -> int:
        try:
            number = int(str(value).strip())
        except ValueError:
            number = None
        if number is None or number < minimum:
            example = f".option({option!r}, '1000')"
            raise OptionError(
                f"{option}: expected a whole number >= {minimum}, got {value!r}. Example: {example}", example
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
    example = f".option({option!r}, '60s')"
    raise OptionError(
        f"{option}: expected a duration such as '60s', '500ms', '15m' or 'PT1M', got {value!r}. Example: {example}",
        example,
    )


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|kb|k|kib|mb|m|mib|gb|g|gib)?\s*$", re.I)
_UNITS = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_size(option: str, value: str) -> int:
    """Bytes from ``"1048576"``, ``"512KB"``, ``"8MB"`` or ``"1g"`` (units of 1024)."""
    match = _SIZE.match(str(value))
    if not match or float(match.group(1)) < 1:
        example = f".option({option!r}, '8MB')"
        raise OptionError(f"{option}: expected a size such as '8MB', '512KB' or '1048576', got {value!r}. "
                          f"Example: {example}", example)  # fmt: skip
    unit = (match.group(2) or "b").lower()[0]
    return int(float(match.group(1)) * _UNITS[unit])


def _fraction(option: str, value: str) -> float:
    try:
        number = float(str(value).strip())
    except ValueError:
        number = -1.0
    if not 0.0 <= number <= 1.0:
        example = f".option({option!r}, '0.2')"
        raise OptionError(f"{option}: expected a fraction from 0 to 1, got {value!r}. Example: {example}", example)
    return number


def _ports(option: str, value: str) -> str:
    text = str(value).strip()
    low, dash, high = text.partition("-")
    try:
        first, last = int(low), int(high) if dash else int(low)
    except ValueError:
        first, last = -1, -1
    if not (0 <= first <= last <= 65535) or (dash and first == 0):
        example = f".option({option!r}, '20000-20099')"
        raise OptionError(f"{option}: expected a port or a range such as 20000-20099 (0: any free port), got "
                          f"{value!r}. Example: {example}", example)  # fmt: skip
    return f"{first}-{last}" if dash else str(first)


def _switch(option: str, value: str) -> bool | None:
    """on/true, off/false, or auto (None: the mode decides)."""
    text = str(value).strip().lower()
    if text in ("on", "true"):
        return True
    if text in ("off", "false"):
        return False
    if text == "auto":
        return None
    example = f".option({option!r}, 'off')"
    raise OptionError(f"{option}: expected on, off or auto (or true, false), got {value!r}. Example: {example}",
                      example)  # fmt: skip


def _address(option: str, value: str) -> str:
    """An address to listen on: an IP address (0.0.0.0: all of the host's) or a host name."""
    import ipaddress

    text = str(value).strip()
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(text))
    if re.fullmatch(r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}"
                    r"[A-Za-z0-9])?)*", text):  # fmt: skip
        return text
    example = f".option({option!r}, '0.0.0.0')"
    raise OptionError(f"{option}: expected an IP address or a host name to listen on (0.0.0.0: every address), got "
                      f"{value!r}. Example: {example}", example)  # fmt: skip


def _local_location(option: str, value: str) -> str:
    """A checkpoint location the driver's Python process can write to (see :func:`auth.storage.local_path`)."""
    text = _text(option, value).strip()
    try:
        local_path(text)
    except ValueError as exc:
        example = f".option({option!r}, '/dbfs/checkpoints/telemetry')"
        raise OptionError(f"{option}: {exc}. Example: {example}", example) from None
    return text


def _choice(*allowed: str) -> Callable[[str, str], str]:
    def parse(option: str, value: str) -> str:
        text = str(value).strip().lower()
        if text not in allowed:
            example = f".option({option!r}, {allowed[0]!r})"
            raise OptionError(
                f"{option}: expected one of {', '.join(allowed)}, got {value!r}. Example: {example}", example
            )
        return text

    return parse


def _upper_choice(*allowed: str) -> Callable[[str, str], str]:
    """One of ``allowed`` in any case, given back as spelt there (Spark's reader modes are upper case)."""
    lower = _choice(*(a.lower() for a in allowed))
    by_lower = {a.lower(): a for a in allowed}

    def parse(option: str, value: str) -> str:
        return by_lower[lower(option, value)]

    return parse


def _auth_method(option: str, value: str) -> str:
    from eventhubs_spark.auth.settings import AUTH_METHODS

    by_lower = {m.lower(): m for m in AUTH_METHODS}
    text = str(value).strip().lower()
    if text not in by_lower:
        example = f".option({option!r}, 'servicePrincipal')"
        raise OptionError(
            f"{option}: expected one of {', '.join(AUTH_METHODS)}, got {value!r}. Example: {example}", example
        )
    return by_lower[text]


def _namespace(option: str, value: str) -> str:
    """``NAMESPACE.servicebus.windows.net`` (host[:port]); a pasted ``sb://.../`` endpoint is accepted."""
    namespace = host_and_port(str(value).strip(), allow_path=False)
    if namespace is None:
        example = f".option({option!r}, 'NAMESPACE.servicebus.windows.net')"
        raise OptionError(f"{option}: expected a fully qualified namespace, got {value!r}. Example: {example}", example)
    return namespace


def _sas_token(option: str, value: str) -> str:
    """A ``SharedAccessSignature sr=..&sig=..&se=..&skn=..`` token; the prefix may be left out. An
    expired token is refused here, not after a minute of failed connection attempts."""
    import time
    import urllib.parse

    text = str(value).strip()
    body = text.removeprefix("SharedAccessSignature").strip()
    fields = dict(urllib.parse.parse_qsl(body, keep_blank_values=True))
    token = "SharedAccessSignature sr=NAMESPACE.servicebus.windows.net%2Fhub&sig=SIG&se=1900000000&skn=listen"
    example = f".option({option!r}, {token!r})"
    missing = [f for f in ("sr", "sig", "se") if not fields.get(f)]
    if missing:
        raise OptionError(
            f"{option}: the token lacks {', '.join(missing)} (the token is not shown). Example: {example}", example
        )
    try:
        expiry = int(fields["se"])
    except ValueError:
        raise OptionError(f"{option}: se= must be a Unix time in seconds. Example: {example}", example) from None
    if expiry <= time.time():
        import datetime as dt

        when = dt.datetime.fromtimestamp(expiry, tz=dt.timezone.utc).isoformat()
        raise OptionError(
            f"{option}: the token expired at {when} (se={expiry}); issue one that outlives the query, or sign in "
            f"with Microsoft Entra ID, e.g. .option('eventhubs.auth', 'managedIdentity')",
            ".option('eventhubs.auth', 'managedIdentity')",
        )
    return "SharedAccessSignature " + body


def _authority(option: str, value: str) -> str:
    text = str(value).strip().rstrip("/")
    if "://" in text and not text.startswith("https://"):
        example = f".option({option!r}, 'https://login.microsoftonline.us')"
        raise OptionError(f"{option}: the authority must be https, got {value!r}. Example: {example}", example)
    return text


def _text(option: str, value: str) -> str:
    if not str(value).strip():
        raise OptionError(f"{option}: must not be empty")
    return str(value)


def _transport(option: str, value: str) -> str:
    from eventhubs_spark.auth.network import TRANSPORTS

    by_lower = {t.lower(): t for t in TRANSPORTS}
    text = str(value).strip().lower()
    if text not in by_lower:
        example = f".option({option!r}, 'amqpWebSockets')"
        raise OptionError(f"{option}: expected amqp or amqpWebSockets, got {value!r}. Example: {example}", example)
    return by_lower[text]


def _host(option: str, value: str) -> str:
    text = str(value).strip()
    host = host_and_port(text, allow_path=False)
    if host is None or ":" in host:
        example = f".option({option!r}, 'proxy.example.com')"
        raise OptionError(f"{option}: expected a host name or address without a port, got {value!r}. "
                          f"Example: {example}", example)  # fmt: skip
    return host


def _port(option: str, value: str) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        number = 0
    if not 0 < number < 65536:
        example = f".option({option!r}, '3128')"
        raise OptionError(f"{option}: expected a port from 1 to 65535, got {value!r}. Example: {example}", example)
    return number


def _endpoint(option: str, value: str) -> str:
    """``sb://host[:port]`` from that, ``host[:port]``, or an amqps://, wss:// or https:// address."""
    text = str(value).strip().rstrip("/")
    address = host_and_port(text.split("://", 1)[1] if "://" in text else text, allow_path=False)
    if address is None:
        example = f".option({option!r}, 'sb://eventhubs-gateway.internal.example.com:443')"
        raise OptionError(f"{option}: expected sb://host[:port], got {value!r}. Example: {example}", example)
    return f"sb://{address}"


def _ca_file(option: str, value: str) -> str:
    import os

    path = str(value).strip()
    if not os.path.isfile(path):
        example = f".option({option!r}, '/Volumes/main/certs/company-ca.pem')"
        raise OptionError(f"{option}: no file {path!r} here; it must be a PEM bundle present on every node, e.g. "
                          f"{example}", example)  # fmt: skip
    return path


_NO_POSITIONS: Mapping[str, Position] = MappingProxyType({})


@dataclass(frozen=True)
class Spec:
    key: str
    default: Any
    parse: Callable[[str, str], Any]
    doc: str
    example: str
    modes: frozenset[str] = ALL
    secret: bool = False
    # The typed field its value fills: a field of ReadOptions/WriteOptions, "store.<field>" of StoreOptions,
    # "ownership.<field>" of OwnershipOptions; None for the sign-in and network options (they make the
    # connection settings) and the aliases' targets checked elsewhere.
    field: str | None = None


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
        "databricks.serviceCredential",
        None,
        _text,
        "Databricks (Runtime 16.2+, 15.4 LTS in preview): sign in with this Unity Catalog service credential, the "
        "name Databricks' Kafka source takes too. No secret in any option: the driver and every executor get tokens "
        "from it (the Schema Registry, and an Entra-signed checkpoint store, too). With eventhubs.namespace and "
        "eventhubs.name; fails at load() off Databricks.",
        "eventhubs-reader",
        secret=True,
    ),
    Spec(
        "databricks.serviceCredential.scope",
        None,
        _text,
        "The scope Event Hubs tokens are asked for with databricks.serviceCredential (default: Event Hubs' own, "
        "https://eventhubs.azure.net/.default).",
        "https://eventhubs.azure.net/.default",
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
    Spec(
        "eventhubs.transportType",
        None,
        _transport,
        "amqp: AMQP over TLS on port 5671 (the default). amqpWebSockets: AMQP over WebSockets on port 443, for "
        "networks that allow only HTTPS; implied by eventhubs.httpProxy.hostname.",
        "amqpWebSockets",
    ),
    Spec(
        "eventhubs.httpProxy.hostname",
        None,
        _host,
        "HTTP proxy (CONNECT) to reach the namespace through, with eventhubs.httpProxy.port; carries AMQP over "
        "WebSockets only. The checkpoint store and Entra sign-in (service principal, workload identity) go "
        "through it too.",
        "proxy.example.com",
    ),
    Spec("eventhubs.httpProxy.port", None, _port, "Port of the HTTP proxy.", "3128"),
    Spec(
        "eventhubs.httpProxy.username",
        None,
        _text,
        "User name for a proxy that asks for credentials (basic authentication).",
        "svc-spark",
    ),
    Spec(
        "eventhubs.httpProxy.password",
        None,
        _text,
        "Password for the proxy, with eventhubs.httpProxy.username.",
        "PASSWORD",
        secret=True,
    ),
    Spec(
        "eventhubs.customEndpointAddress",
        None,
        _endpoint,
        "Connect to this address instead of the namespace's (a private endpoint or an application gateway), "
        "keeping the namespace for sign-in; the port defaults to the transport's (5671 or 443).",
        "sb://eventhubs-gateway.internal.example.com:443",
    ),
    Spec(
        "eventhubs.connectionVerify",
        None,
        _ca_file,
        "A CA bundle (PEM file on every node) to trust instead of the default ones, e.g. a TLS-inspecting "
        "proxy's company CA, or the local emulator's certificate; the checkpoint store and Entra sign-in "
        "(service principal, workload identity) trust it too.",
        "/Volumes/main/certs/company-ca.pem",
    ),
    Spec(
        "eventhubs.consumerGroup",
        defaults.CONSUMER_GROUP,
        _text,
        "Consumer group to read with.",
        "$Default",
        READ,
        field="consumer_group",
    ),
    Spec(
        "eventhubs.startingPosition",
        None,
        lambda o, v: parse_position(v, o),
        "Where to start when there is no Spark checkpoint, for every partition (stream default: end of "
        "stream; batch default: start of stream).",
        '{"offset": "-1"}',
        READ,
        field="starting_position",
    ),
    Spec(
        "eventhubs.startingPositions",
        _NO_POSITIONS,
        lambda o, v: parse_positions(v, o),
        "Per-partition starting positions; override eventhubs.startingPosition.",
        '{"0": {"seqNo": 100}}',
        READ,
        field="starting_positions",
    ),
    Spec(
        "eventhubs.endingPosition",
        None,
        lambda o, v: parse_position(v, o),
        "Batch reads: where to stop, for every partition (default: end of stream).",
        '{"offset": "@latest"}',
        frozenset({BATCH}),
        field="ending_position",
    ),
    Spec(
        "eventhubs.endingPositions",
        _NO_POSITIONS,
        lambda o, v: parse_positions(v, o),
        "Batch reads: per-partition ending positions.",
        '{"0": {"seqNo": 500}}',
        frozenset({BATCH}),
        field="ending_positions",
    ),
    Spec(
        "maxEventsPerTrigger",
        None,
        _int(1),
        "Most events per micro-batch, split across partitions by backlog (default on Spark 4.2+: 1000 per partition).",
        "10000",
        frozenset({STREAM}),
        field="max_events_per_trigger",
    ),
    Spec(
        "eventhubs.triggerAvailableNow",
        False,
        parse_bool,
        "Spark 4.0 and 4.1 only (4.2+ tells the source itself): the query runs with Trigger.AvailableNow. There "
        "Spark asks for the end of a run once, so the run reads every event available when it starts in one "
        "batch, not capped by maxEventsPerTrigger (which otherwise makes each run read one capped batch).",
        "true",
        frozenset({STREAM}),
        field="trigger_available_now",
    ),
    Spec(
        "minEventsPerTrigger",
        None,
        _int(1),
        "Skip a trigger until this many events are waiting, or maxTriggerDelay has passed.",
        "500",
        frozenset({STREAM}),
        field="min_events_per_trigger",
    ),
    Spec(
        "maxTriggerDelay",
        defaults.MAX_TRIGGER_DELAY,
        parse_duration,
        "With minEventsPerTrigger: the longest a trigger may be skipped.",
        "15m",
        frozenset({STREAM}),
        field="max_trigger_delay",
    ),
    Spec(
        "failOnDataLoss",
        True,
        parse_bool,
        "Fail when events the query had not read are gone (retention); false logs and goes on.",
        "true",
        READ,
        field="fail_on_data_loss",
    ),
    Spec(
        "maxEventsPerPartition",
        None,
        _int(1),
        "Split a partition's range into Spark tasks of at most this many events.",
        "50000",
        READ,
        field="max_events_per_partition",
    ),
    Spec(
        "eventhubs.prefetchCount",
        defaults.PREFETCH,
        _int(1),
        "Most events each receiver's link has in flight (its credit); fewer when events are large, so they never "
        "stand for more than eventhubs.readAhead.maxBytes.",
        "2000",
        READ,
        field="prefetch_count",
    ),
    Spec(
        "eventhubs.receiverTimeout",
        defaults.RECEIVER_TIMEOUT,
        parse_duration,
        "How long a receiver may wait for an event it knows exists before the task fails.",
        "60s",
        READ,
        field="receiver_timeout",
    ),
    Spec(
        "eventhubs.connectionIdleTimeout",
        defaults.CONNECTION_IDLE_TIMEOUT,
        parse_duration,
        "The receivers' connection, when it receives nothing for this long (the service sends heartbeats at least "
        "twice as often), is taken for dead and opened again: a network that drops packets without closing costs "
        "this long, not a failed task; keep it below eventhubs.receiverTimeout. 0 = never.",
        "30s",
    ),
    Spec(
        "eventhubs.operationTimeout",
        defaults.OPERATION_TIMEOUT,
        parse_duration,
        "Deadline for management calls and sends, retries included.",
        "300s",
        field="operation_timeout",
    ),
    Spec(
        "eventhubs.retry.maxAttempts",
        defaults.RETRY_MAX_ATTEMPTS,
        _int(0),
        "Most attempts of any one operation (a send, a management call, a position lookup, a receiver's reopens "
        "without progress); 0 = as many as its deadline (operationTimeout, receiverTimeout) allows.",
        "10",
    ),
    Spec(
        "eventhubs.retry.initialDelay",
        defaults.RETRY_INITIAL_DELAY,
        parse_duration,
        "The first wait before another attempt; each further wait doubles, up to eventhubs.retry.maxDelay.",
        "200ms",
    ),
    Spec(
        "eventhubs.retry.maxDelay",
        defaults.RETRY_MAX_DELAY,
        parse_duration,
        "The longest wait between two attempts.",
        "5s",
    ),
    Spec(
        "eventhubs.retry.jitter",
        defaults.RETRY_JITTER,
        _fraction,
        "Each wait is shortened at random by up to this fraction, so many tasks do not retry in step (0 to 1).",
        "0.5",
    ),
    Spec(
        "eventhubs.useExclusiveReceiver",
        defaults.EXCLUSIVE_RECEIVER,
        parse_bool,
        "Owner-level (epoch) receivers, so one reader per partition and consumer group.",
        "true",
        READ,
        field="use_exclusive_receiver",
    ),
    Spec(
        "eventhubs.minEventsPerTask",
        defaults.MIN_EVENTS_PER_TASK,
        _int(0),
        "0 (as the old connector): one Spark partition per Event Hubs partition. Above 0, ranges smaller than this "
        "share Spark tasks (in partition order, up to this many events each), so a quiet stream's micro-batch runs a "
        "few tasks instead of one per partition: lower latency, but a Spark partition may then hold several Event "
        "Hubs partitions.",
        "500",
        READ,
        field="min_events_per_task",
    ),
    Spec(
        "eventhubs.receiverService",
        None,
        _switch,
        "Read through one receiver service per executor, which keeps receivers (and what they read ahead) "
        "between micro-batches whichever Python worker runs the next task. auto (the default): streams do, batch "
        "reads do not (one range per partition: nothing to keep); on (or true): batch reads too; off (or false): "
        "each worker reads for itself and no process outlives a task. Where the service cannot start (a "
        "sandbox), tasks read in their worker, said once, and it is tried again in the background every minute.",
        "off",
        READ,
        field="receiver_service",
    ),
    Spec(
        "eventhubs.partitionHomes",
        defaults.PARTITION_HOMES,
        parse_bool,
        "Streams: each partition is read from Event Hubs by one executor's receiver service, its home (a balanced "
        "placement over the live executors), and a task Spark runs elsewhere reads its range from the home over "
        "an authenticated, encrypted connection; false: each executor's service reads the partitions whose tasks "
        "it gets (on several executors, the namespace then sends events more than once).",
        "false",
        frozenset({STREAM}),
        field="partition_homes",
    ),
    Spec(
        "eventhubs.executorPorts",
        defaults.EXECUTOR_PORTS,
        _ports,
        "Where a home's receiver service listens for other executors' tasks: a port or a range of them, below the "
        "ephemeral ports (32768-60999 on Linux), where other connections' ports may already be; 0: any free port "
        "(two services on one host never clash).",
        "20000-20099",
        frozenset({STREAM}),
        field="executor_ports",
    ),
    Spec(
        "eventhubs.executorBindAddress",
        defaults.BIND_ADDRESS,
        _address,
        "The address a home's receiver service listens on for other executors' tasks (and tells the driver); "
        "0.0.0.0: every address of the host. With eventhubs.partitionHomes=false no executor listens at all.",
        "10.0.0.5",
        frozenset({STREAM}),
        field="executor_bind_address",
    ),
    Spec(
        "eventhubs.driverChannel",
        defaults.DRIVER_CHANNEL,
        parse_bool,
        "Streams: the driver listens on a TCP port for what executors tell it (receiver services that serve the "
        "query, the lag figures' times, which partition's home a first batch's task has). false: the driver opens "
        "no port and no task connects to it: partitions get no home (eventhubs.partitionHomes needs the channel) "
        "and the lag figures have no seconds, only events. Where executors cannot reach the driver, each finds "
        "it out once (within 2 s) and asks no more, checking again every minute.",
        "false",
        frozenset({STREAM}),
        field="driver_channel",
    ),
    Spec(
        "eventhubs.driverChannel.bindAddress",
        defaults.BIND_ADDRESS,
        _address,
        "The address the driver's channel listens on (and tells the executors); 0.0.0.0: every address of the host.",
        "10.0.0.4",
        frozenset({STREAM}),
        field="driver_bind_address",
    ),
    Spec(
        "eventhubs.driverChannel.ports",
        defaults.EXECUTOR_PORTS,
        _ports,
        "The port, or a range of ports, the driver's channel listens on (a firewall's opening); 0: any free port.",
        "21000-21009",
        frozenset({STREAM}),
        field="driver_ports",
    ),
    Spec(
        "eventhubs.checkpointLocation",
        None,
        _local_location,
        "The query's own checkpoint location (writeStream's checkpointLocation, which Spark does not tell a "
        "Python source): the driver writes each trigger's lag figures under eventhubs-lag/ there, with the "
        "query's options less their secrets, for `eventhubs-spark lag --checkpoint-location` and the notebooks. "
        "A local path, file: or dbfs:/ (through /dbfs); unset: the figures go to the driver's log (and the "
        "progress's latestOffset on Spark 4.2+) only.",
        "/dbfs/checkpoints/telemetry",
        frozenset({STREAM}),
        field="checkpoint_location",
    ),
    Spec(
        "eventhubs.lag.stalledAfterBatches",
        defaults.STALLED_AFTER_BATCHES,
        _int(1),
        "A partition with events waiting that this many micro-batches in a row did not move is called stalled "
        "(by name, with the likely cause, in the driver's log and the lag figures).",
        "20",
        frozenset({STREAM}),
        field="stalled_after_batches",
    ),
    Spec(
        "eventhubs.lag.stalledAfter",
        defaults.STALLED_AFTER,
        parse_duration,
        "A partition with events waiting that has not moved for this long is called stalled, however few "
        "micro-batches ran meanwhile.",
        "10m",
        frozenset({STREAM}),
        field="stalled_after",
    ),
    Spec(
        "eventhubs.readAhead.maxEvents",
        defaults.READ_AHEAD_EVENTS,
        _int(1),
        "Most events a receiver reads ahead of its tasks, per partition (between micro-batches, in memory).",
        "2000",
        READ,
        field="read_ahead_events",
    ),
    Spec(
        "eventhubs.readAhead.maxBytes",
        defaults.READ_AHEAD_BYTES,
        parse_size,
        "Most bytes of event bodies a receiver reads ahead of its tasks, per partition.",
        "8MB",
        READ,
        field="read_ahead_bytes",
    ),
    Spec(
        "eventhubs.partitionDiscoveryInterval",
        defaults.PARTITION_DISCOVERY_INTERVAL,
        parse_duration,
        "How often a stream looks for partitions added to the hub.",
        "60s",
        frozenset({STREAM}),
        field="partition_discovery_interval",
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
        field="store.connection_string",
    ),
    Spec(
        "eventhubs.checkpointStore.accountUrl",
        None,
        _text,
        "Instead of the connection string: the storage account's blob URL, with eventhubs.checkpointStore.sasToken "
        "or, without one, Microsoft Entra ID: the eventhubs.entra.* identity, else DefaultAzureCredential.",
        "https://ACCOUNT.blob.core.windows.net",
        READ,
        field="store.account_url",
    ),
    Spec(
        "eventhubs.checkpointStore.sasToken",
        None,
        _text,
        "A SAS token for eventhubs.checkpointStore.accountUrl (read, write, list, create on the container).",
        "sv=2022-11-02&ss=b&srt=co&sp=rwlc&se=2030-01-01T00:00:00Z&sig=SIGNATURE",
        READ,
        secret=True,
        field="store.sas_token",
    ),
    Spec(
        "eventhubs.checkpointStore.container",
        None,
        _text,
        "Blob container of the checkpoint store (one per consumer group is usual).",
        "eventhubs-checkpoints",
        READ,
        field="store.container",
    ),
    Spec(
        "eventhubs.capture.location",
        None,
        lambda option, value: _capture_location(option, value),
        "Where the hub's Event Hubs Capture writes its Avro files (the container, or a local folder): a read starts "
        "there for events the hub no longer holds and goes on in the hub from its first retained event, each event "
        "once. Sign-in as the checkpoint store's.",
        "abfss://capture@ACCOUNT.dfs.core.windows.net",
        READ,
        field="capture.location",
    ),
    Spec(
        "eventhubs.capture.nameFormat",
        "{Namespace}/{EventHub}/{PartitionId}/{Year}/{Month}/{Day}/{Hour}/{Minute}/{Second}",
        lambda option, value: _capture_name_format(option, value),
        "The Capture's archiveNameFormat (all nine tokens); its files end in .avro.",
        "{Namespace}/{EventHub}/p{PartitionId}/{Year}-{Month}-{Day}/{Hour}-{Minute}-{Second}",
        READ,
        field="capture.name_format",
    ),
    Spec(
        "eventhubs.capture.namespace",
        None,
        _text,
        "The value of {Namespace} in the file names (default: the namespace's name, ns of ns.servicebus.windows.net).",
        "contoso-events",
        READ,
        field="capture.namespace",
    ),
    Spec(
        "eventhubs.capture.connectionString",
        None,
        _text,
        "Storage connection string for eventhubs.capture.location (else eventhubs.capture.sasToken, else the hub's "
        "Microsoft Entra identity).",
        "DefaultEndpointsProtocol=https;AccountName=ACCOUNT;AccountKey=KEY",
        READ,
        secret=True,
        field="capture.connection_string",
    ),
    Spec(
        "eventhubs.capture.sasToken",
        None,
        _text,
        "A SAS token for eventhubs.capture.location (read and list on the container).",
        "sv=2022-11-02&ss=b&srt=co&sp=rl&se=2030-01-01T00:00:00Z&sig=SIGNATURE",
        READ,
        secret=True,
        field="capture.sas_token",
    ),
    Spec(
        "eventhubs.capture.lateFileWait",
        60.0,
        parse_duration,
        "How long a read waits for a Capture file that fills a gap (written late, after a storage outage) before "
        "it calls the gap (failOnDataLoss decides what then).",
        "5m",
        READ,
        field="capture.late_file_wait",
    ),
    Spec(
        "eventhubs.startFromCheckpointStore",
        False,
        parse_bool,
        "With no Spark checkpoint yet, start each partition after its checkpoint in the store (partitions without "
        "one use eventhubs.startingPosition(s)).",
        "true",
        READ,
        field="start_from_checkpoint_store",
    ),
    Spec(
        "eventhubs.ownership",
        False,
        parse_bool,
        "Share the consumer group with other queries and processors: read only the partitions this query owns in "
        "the checkpoint store, balancing them with the other owners (needs the checkpoint store).",
        "true",
        frozenset({STREAM}),
        field="ownership",
    ),
    Spec(
        "eventhubs.ownerId",
        None,
        _text,
        "This query's owner id in the checkpoint store (default: random per run). A stable one lets a restarted "
        "query take its partitions back at once.",
        "orders-query-1",
        frozenset({STREAM}),
        field="ownership.owner_id",
    ),
    Spec(
        "eventhubs.loadBalancing.strategy",
        defaults.LOAD_BALANCING_STRATEGY,
        _choice("greedy", "balanced"),
        "greedy claims a fair share at once; balanced claims one partition per cycle (the SDKs' default).",
        "balanced",
        frozenset({STREAM}),
        field="ownership.strategy",
    ),
    Spec(
        "eventhubs.loadBalancing.updateInterval",
        defaults.LOAD_BALANCING_INTERVAL,
        parse_duration,
        "How often ownership is renewed and rebalanced.",
        "10s",
        frozenset({STREAM}),
        field="ownership.update_interval",
    ),
    Spec(
        "eventhubs.loadBalancing.ownershipExpiration",
        defaults.OWNERSHIP_EXPIRATION,
        parse_duration,
        "How long an ownership not renewed stays valid; a stopped query's partitions are taken over after it.",
        "60s",
        frozenset({STREAM}),
        field="ownership.expiration",
    ),
    Spec(
        "eventhubs.loadBalancing.maxPartitions",
        None,
        _int(1),
        "The most partitions this query owns at once.",
        "8",
        frozenset({STREAM}),
        field="ownership.max_partitions",
    ),
    Spec(
        "eventhubs.avro.schemaRegistry",
        None,
        _namespace,
        "Read or write Avro bodies through this namespace's Schema Registry (the official encoders' format: content "
        "type avro/binary+<schema id>). Reads add a struct column value; writes take one. The registry takes "
        "Microsoft Entra ID only (eventhubs.auth / eventhubs.entra.*), even when the hub uses a connection string.",
        "NAMESPACE.servicebus.windows.net",
        field="avro_registry",
    ),
    Spec(
        "eventhubs.avro.schema",
        None,
        _text,
        "Reads: the reader schema (Avro JSON): the value column's type, each event's writer schema resolved to it "
        "by Avro's rules. Writes: the schema to register and write with (default: made from the value column).",
        '{"type": "record", "name": "Reading", "fields": [{"name": "id", "type": "long"}]}',
        field="avro_schema",
    ),
    Spec(
        "eventhubs.avro.schemaId",
        None,
        _text,
        "Reads: the reader schema by its id in the registry, instead of eventhubs.avro.schema.",
        "0f5ebc3e0b0c4c2f8d0c1f7f1b0f9e41",
        READ,
        field="avro_schema_id",
    ),
    Spec(
        "eventhubs.avro.mode",
        defaults.AVRO_MODE,
        _upper_choice("FAILFAST", "PERMISSIVE"),
        "A body that cannot be read with the reader schema: FAILFAST fails the query naming the partition, sequence "
        "number and schema id; PERMISSIVE gives a null value and fills the corrupt-record column.",
        "PERMISSIVE",
        READ,
        field="avro_mode",
    ),
    Spec(
        "eventhubs.avro.corruptRecordColumn",
        defaults.AVRO_CORRUPT_COLUMN,
        _text,
        "PERMISSIVE reads: the column holding a bad record's body and error (struct<body binary, error string>).",
        "_bad_avro",
        READ,
        field="avro_corrupt_column",
    ),
    Spec(
        "eventhubs.avro.schemaGroup",
        None,
        _text,
        "Writes: the registry's schema group (format Avro) the value column's schema is registered in, once per query.",
        "telemetry-schemas",
        frozenset({WRITE}),
        field="avro_group",
    ),
    Spec(
        "eventhubs.avro.recordName",
        defaults.AVRO_RECORD_NAME,
        _text,
        "Writes: the record name (and the registry's schema name, with the namespace) of a schema made from the value "
        "column, as Spark's to_avro names it.",
        "Reading",
        frozenset({WRITE}),
        field="avro_record_name",
    ),
    Spec(
        "eventhubs.avro.recordNamespace",
        None,
        _text,
        "Writes: the namespace of a schema made from the value column.",
        "com.contoso.telemetry",
        frozenset({WRITE}),
        field="avro_record_namespace",
    ),
)

# Every key of azure-event-hubs-spark 2.3.x's EventHubsConf (its key constants) that this connector
# does not take as it is gets an answer: an alias, or an error that names what replaces it.
ALIASES = {
    "eventhubs.maxeventspertrigger": "maxEventsPerTrigger",
}

# Each retired key: (why, an example of what to do instead, what the example does).
_AAD = (
    "sign in with Microsoft Entra ID through eventhubs.auth and the eventhubs.entra.* options instead of a JVM "
    "callback class",
    ".option('eventhubs.auth', 'servicePrincipal').option('eventhubs.entra.tenantId', 'TENANT')"
    ".option('eventhubs.entra.clientId', 'CLIENT').option('eventhubs.entra.clientSecret', SECRET)",
    "",
)
_SLOW = (
    "slow-partition adjustment is replaced by rate limits that follow each partition's backlog",
    ".option('maxEventsPerTrigger', '10000')",
    "is split across partitions by backlog",
)
_PER_PARTITION_RATE = (
    "per-partition caps are replaced by maxEventsPerTrigger, a budget per micro-batch split across partitions in "
    "proportion to their backlog",
    ".option('maxEventsPerTrigger', '8000')",
    "for maxRatePerPartition=1000 on 8 partitions",
)
RETIRED: dict[str, tuple[str, str, str]] = {
    "eventhubs.maxsilenttime": (
        "receivers are recreated on error and after eventhubs.receiverTimeout",
        ".option('eventhubs.receiverTimeout', '60s')",
        "bounds the wait instead",
    ),
    "eventhubs.slowpartitionadjustment": _SLOW,
    "eventhubs.maxacceptablebatchreceivetime": _SLOW,
    "eventhubs.maxbatchreceivetime": _SLOW,
    "eventhubs.throttlingstatusplugin": _SLOW,
    "eventhubs.dynamicpartitiondiscovery": (
        "partitions added at runtime are always picked up",
        ".option('eventhubs.partitionDiscoveryInterval', '60s')",
        "sets how often",
    ),
    "eventhubs.threadpoolsize": (
        "not needed: partitions are read by Spark tasks",
        ".option('eventhubs.prefetchCount', '500')",
        "tunes each task's receiver",
    ),
    "eventhubs.maxrateperpartition": _PER_PARTITION_RATE,
    "eventhubs.maxratesperpartition": _PER_PARTITION_RATE,
    "eventhubs.metricplugin": (
        "a JVM plugin class cannot load into a Python source; each task logs its counts and the driver the events "
        "behind latest per trigger",
        "spark.executorEnv.EVENTHUBS_SPARK_LOG_LEVEL=INFO",
        "shows the task counts in the executor logs",
    ),
    "eventhubs.useaadauth": _AAD,
    "eventhubs.aadauthcallback": _AAD,
    "eventhubs.aadauthcallbackparams": _AAD,
    "partitionpreferredlocationstrategy": (
        "Spark lets no Python source ask for task placement; receivers are kept per executor instead and a move "
        "costs one link attach",
        "drop .option('partitionPreferredLocationStrategy', 'Hash')",
        "",
    ),
    "usesimulatedclient": (
        "the old connector's test switch; test against the local emulator instead (python -m eventhubs_emulator)",
        ".option('eventhubs.connectionString', 'Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=k;"
        "SharedAccessKey=s;EntityPath=hub;UseDevelopmentEmulator=true')",
        "",
    ),
}


def _retired(key: str) -> OptionError:
    why, example, after = RETIRED[key.lower()]
    return OptionError(
        f"{key}: not supported by eventhubs-spark: {why}; remove it (e.g. {example}{' ' + after if after else ''})",
        example,
    )


BY_KEY = {spec.key.lower(): spec for spec in SPECS}
SPARK_OWNED = {"checkpointlocation"}


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
    min_events_per_task: int
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
    _check_combinations(values, mode)
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
                example = _example(BY_KEY[ALIASES[lower].lower()])
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
            raise _retired(key)
        spec = BY_KEY.get(lower)
        if spec is None:
            raise _unknown(key, mode)
        if mode == WRITE and WRITE not in spec.modes:
            # The old connector took one EventHubsConf for reads and writes, so read options come along.
            _with_example(spec, value)  # a bad value is still an error: it would fail the reader too
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
        value = _with_example(spec, value)
        values[lower] = Secret(value) if spec.secret else value
    if ignored:
        _LOG.warning("eventhubs: %s only appl%s to reads; ignored on this write", ", ".join(sorted(ignored)),
                     "ies" if len(ignored) == 1 else "y")  # fmt: skip
    return values


# Habits from Spark's Kafka source (and so the Event Hubs Kafka endpoint): what each becomes here, with why.
HABITS: dict[str, tuple[str, str]] = {
    "startingoffsets": ("eventhubs.startingPosition", 'a position per hub or partition, e.g. {"offset": "-1"}'),
    "endingoffsets": ("eventhubs.endingPosition", "batch reads end there"),
    "startingtimestamp": ("eventhubs.startingPosition", 'e.g. {"enqueuedTime": "2024-05-01T00:00:00Z"}'),
    "startingoffsetsbytimestamp": ("eventhubs.startingPositions", "a position per partition"),
    "maxoffsetspertrigger": ("maxEventsPerTrigger", "events, not offsets, per micro-batch"),
    "minoffsetspertrigger": ("minEventsPerTrigger", "events, not offsets"),
    "maxrecordsperpartition": ("maxEventsPerPartition", "events per task"),
    "kafka.bootstrap.servers": (
        "eventhubs.connectionString",
        "the namespace and hub are in the connection string (or eventhubs.namespace with eventhubs.name)",
    ),
    "subscribe": (
        "eventhubs.name",
        "the hub (a Kafka topic), with eventhubs.namespace; or EntityPath in eventhubs.connectionString",
    ),
    "subscribepattern": ("eventhubs.name", "one hub per query: name it"),
    "assign": ("eventhubs.startingPositions", "every partition of the hub is read; positions per partition here"),
    "kafka.group.id": ("eventhubs.consumerGroup", "the hub's consumer group"),
    "groupidprefix": ("eventhubs.consumerGroup", "the hub's consumer group"),
    "kafka.sasl.jaas.config": (
        "eventhubs.connectionString",
        "a connection string, or eventhubs.auth with eventhubs.entra.*, signs in",
    ),
    "topic": ("eventhubs.name", "writes go to the hub of the connection string (EntityPath) or eventhubs.name"),
}


def edit_distance(a: str, b: str, limit: int = 3) -> int:
    """Damerau-Levenshtein distance (a swap of neighbours counts one), or ``limit`` + 1 once it is past ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    before: list[int] | None = None
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            current[j] = min(row[j] + 1, current[j - 1] + 1, row[j - 1] + (ca != cb))
            if before is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                current[j] = min(current[j], before[j - 2] + 1)
        if min(current) > limit:
            return limit + 1
        before, row = row, current
    return row[-1]


def suggestion(key: str, mode: str) -> str | None:
    """The option a mistyped ``key`` most likely means: the nearest by edit distance (at most 2, or 3 for long keys;
    the ``eventhubs.`` prefix may be left out), those of ``mode`` first; None when none is near."""
    lower = key.lower()
    best: tuple[int, int, str] | None = None
    for rank, spec in enumerate(sorted(SPECS, key=lambda s: mode not in s.modes)):
        name = spec.key.lower()
        names = [name, name.removeprefix("eventhubs.")] if name.startswith("eventhubs.") else [name]
        distance = min(edit_distance(lower, n) for n in names)
        if distance <= (3 if len(lower) >= 16 else 2) and (best is None or (distance, rank) < best[:2]):
            best = (distance, rank, spec.key)
    return best[2] if best is not None else None


def _unknown(key: str, mode: str) -> OptionError:
    habit = HABITS.get(key.lower())
    if habit is not None:
        ours, why = habit
        example = _example(BY_KEY[ours.lower()])
        return OptionError(f"unknown option {key!r}: that is Spark's Kafka source; here it is {ours!r} ({why}), "
                           f"e.g. {example}", example)  # fmt: skip
    near = suggestion(key, mode)
    if near is not None:
        example = _example(BY_KEY[near.lower()])
        return OptionError(f"unknown option {key!r}: did you mean {near!r}, e.g. {example}?", example)
    example = _example(BY_KEY["eventhubs.consumergroup"])
    return OptionError(f"unknown option {key!r}: every option is on the documentation's Options page, "
                       f"docs/pages/options.md (e.g. {example})",
                       example)  # fmt: skip


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


def _capture_location(option: str, value: str) -> str:
    from eventhubs_spark.capture.store import check_location

    return check_location(value.strip(), option)


def _capture_name_format(option: str, value: str) -> str:
    from eventhubs_spark.capture.names import NameFormat

    return NameFormat(value, option).text


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


def _check_combinations(values: Mapping[str, Any], mode: str) -> None:
    """Options that are fine one by one but not together."""
    store_conn = values.get("eventhubs.checkpointstore.connectionstring")
    store_url = values.get("eventhubs.checkpointstore.accounturl")
    url_example = ".option('eventhubs.checkpointStore.accountUrl', 'https://ACCOUNT.blob.core.windows.net')"
    container_example = ".option('eventhubs.checkpointStore.container', 'eventhubs-checkpoints')"
    if store_conn and store_url:
        raise OptionError(
            "set eventhubs.checkpointStore.connectionString or eventhubs.checkpointStore.accountUrl, not both, e.g. "
            f"{url_example}",
            url_example,
        )
    if values.get("eventhubs.checkpointstore.sastoken") and not store_url:
        raise OptionError(
            f"eventhubs.checkpointStore.sasToken goes with eventhubs.checkpointStore.accountUrl, e.g. {url_example}",
            url_example,
        )
    if bool(store_conn or store_url) != bool(values.get("eventhubs.checkpointstore.container")):
        raise OptionError(
            "the checkpoint store needs eventhubs.checkpointStore.container and either "
            "eventhubs.checkpointStore.connectionString or eventhubs.checkpointStore.accountUrl, e.g. "
            f"{container_example}",
            container_example,
        )
    for needs_store in ("eventhubs.startFromCheckpointStore", "eventhubs.ownership"):
        if values.get(needs_store.lower()) and not values.get("eventhubs.checkpointstore.container"):
            raise OptionError(
                f"{needs_store} works on the checkpoint store: also set eventhubs.checkpointStore.container and "
                "eventhubs.checkpointStore.connectionString (or eventhubs.checkpointStore.accountUrl), e.g. "
                f"{container_example}",
                container_example,
            )
    interval = values.get("eventhubs.loadbalancing.updateinterval")
    expiry = values.get("eventhubs.loadbalancing.ownershipexpiration")
    if interval is not None and expiry is not None and expiry <= 2 * interval:
        example = "updateInterval=10s with ownershipExpiration=60s"
        raise OptionError(
            f"eventhubs.loadBalancing.ownershipExpiration ({expiry:g}s) must be more than twice "
            f"eventhubs.loadBalancing.updateInterval ({interval:g}s), or ownership lapses between renewals, e.g. "
            f"{example}",
            example,
        )
    low, high = values.get("mineventspertrigger"), values.get("maxeventspertrigger")
    if low and high and low > high:
        example = "minEventsPerTrigger=1000 with maxEventsPerTrigger=10000"
        raise OptionError(
            f"minEventsPerTrigger ({low}) must not exceed maxEventsPerTrigger ({high}), e.g. {example}", example
        )
    _check_avro(values, mode)
    if mode != WRITE and values.get("maxeventsperpartition") and values.get("eventhubs.useexclusivereceiver"):
        example = ".option('eventhubs.useExclusiveReceiver', 'false')"
        raise OptionError(
            "maxEventsPerPartition splits one partition over several concurrent tasks, and owner-level receivers "
            f"would take the partition from each other: also set eventhubs.useExclusiveReceiver=false, e.g. {example}",
            example,
        )


def _check_avro(values: Mapping[str, Any], mode: str) -> None:
    """The eventhubs.avro.* options go together: a registry, and (reads) one reader schema or (writes) a group."""
    registry = values.get("eventhubs.avro.schemaregistry")
    registry_example = ".option('eventhubs.avro.schemaRegistry', 'NAMESPACE.servicebus.windows.net')"
    given = [s.key for s in SPECS if s.key.startswith("eventhubs.avro.") and s.key != "eventhubs.avro.schemaRegistry"
             and mode in s.modes and values.get(s.key.lower()) not in (None, s.default)]  # fmt: skip
    if not registry:
        if given:
            raise OptionError(f"{', '.join(given)} would be unused: Avro bodies are read and written through the "
                              f"Schema Registry, e.g. {registry_example}", registry_example)  # fmt: skip
        return
    schema, schema_id = values.get("eventhubs.avro.schema"), values.get("eventhubs.avro.schemaid")
    if mode == WRITE:
        example = ".option('eventhubs.avro.schemaGroup', 'telemetry-schemas')"
        if not values.get("eventhubs.avro.schemagroup"):
            raise OptionError(f"writing Avro through the Schema Registry needs the group to register the schema in: "
                              f"eventhubs.avro.schemaGroup, e.g. {example}", example)  # fmt: skip
        return
    example = '.option(\'eventhubs.avro.schema\', \'{"type": "record", "name": "Reading", "fields": [...]}\')'
    if schema and schema_id:
        raise OptionError(f"set eventhubs.avro.schema or eventhubs.avro.schemaId (the reader schema), not both, e.g. "
                          f"{example}", example)  # fmt: skip
    if not schema and not schema_id:
        raise OptionError("reading Avro through the Schema Registry needs the reader schema (the value column's type): "
                          f"eventhubs.avro.schema or eventhubs.avro.schemaId, e.g. {example}", example)  # fmt: skip


# The identity options that name something (not the disableInstanceDiscovery switch), from the table above.
_ENTRA_KEYS = tuple(s.key for s in SPECS if s.key.startswith("eventhubs.entra.") and s.default is None)


def _example(spec: Spec) -> str:
    return f".option({spec.key!r}, {spec.example!r})"


def _with_example(spec: Spec, value: str) -> Any:
    """Parse one value; an error without an example gets the option's own."""
    try:
        return spec.parse(spec.key, value)
    except OptionError as exc:
        if exc.example is None:
            raise OptionError(f"{exc}. Example: {_example(spec)}", _example(spec)) from None
        raise


# The Options page's sections, in order: a title, a line on what the options do, and which keys belong (the first
# section whose test takes a key has it; a key no section takes fails the generator, so a new option needs a home).
_SECTIONS: tuple[tuple[str, str, Callable[[str], bool]], ...] = (
    (
        "Connection and sign-in",
        "Which namespace and hub, and how to sign in to it.",
        lambda k: (
            k
            in (
                "eventhubs.connectionString",
                "eventhubs.namespace",
                "eventhubs.name",
                "eventhubs.auth",
                "eventhubs.sasToken",
                "eventhubs.useDevelopmentEmulator",
                "eventhubs.consumerGroup",
            )
            or k.startswith(("databricks.", "eventhubs.entra."))
        ),
    ),
    (
        "Network",
        "How the namespace is reached: transport, proxy, custom endpoint, certificates, time-outs and retries.",
        lambda k: (
            k
            in (
                "eventhubs.transportType",
                "eventhubs.customEndpointAddress",
                "eventhubs.connectionVerify",
                "eventhubs.connectionIdleTimeout",
                "eventhubs.operationTimeout",
                "eventhubs.receiverTimeout",
            )
            or k.startswith(("eventhubs.httpProxy.", "eventhubs.retry."))
        ),
    ),
    (
        "Positions",
        "Where a query starts, and where a batch read ends.",
        lambda k: (
            k.startswith(("eventhubs.startingPosition", "eventhubs.endingPosition"))
            or k == "eventhubs.startFromCheckpointStore"
        ),
    ),
    (
        "Rate limits and micro-batches",
        "How much each micro-batch reads, and when a trigger runs.",
        lambda k: (
            k
            in (
                "maxEventsPerTrigger",
                "eventhubs.triggerAvailableNow",
                "minEventsPerTrigger",
                "maxTriggerDelay",
                "failOnDataLoss",
                "maxEventsPerPartition",
                "eventhubs.minEventsPerTask",
                "eventhubs.partitionDiscoveryInterval",
            )
        ),
    ),
    (
        "Receivers and read-ahead",
        "How partitions are read: links, credit, what is held between micro-batches.",
        lambda k: (
            k in ("eventhubs.prefetchCount", "eventhubs.useExclusiveReceiver") or k.startswith("eventhubs.readAhead.")
        ),
    ),
    (
        "Clusters: the receiver service, homes, the driver channel",
        "Per-executor processes and the connections between a query's processes (see Clusters and where it runs).",
        lambda k: (
            k
            in (
                "eventhubs.receiverService",
                "eventhubs.partitionHomes",
                "eventhubs.executorPorts",
                "eventhubs.executorBindAddress",
            )
            or k.startswith("eventhubs.driverChannel")
        ),
    ),
    (
        "Checkpoints, ownership and lag",
        "The blob checkpoint store, several readers sharing a consumer group, and lag.",
        lambda k: (
            k.startswith(("eventhubs.checkpointStore.", "eventhubs.loadBalancing.", "eventhubs.lag."))
            or k in ("eventhubs.checkpointLocation", "eventhubs.ownership", "eventhubs.ownerId")
        ),
    ),
    (
        "Capture",
        "History older than the hub's retention, read from Capture files first.",
        lambda k: k.startswith("eventhubs.capture."),
    ),
    (
        "Avro",
        "Avro bodies with the Schema Registry, read into columns and written back.",
        lambda k: k.startswith("eventhubs.avro."),
    ),
)


def _section_of(key: str) -> str:
    for title, _, takes in _SECTIONS:
        if takes(key):
            return title
    raise ValueError(f"option {key} belongs to no section of the Options page: add it to options._SECTIONS")


def options_table() -> str:
    """The Options page's body (docs/pages/options.md), generated from :data:`SPECS` by docs/generate.py (a test
    keeps them in step): a section per group of options, each option a heading of its own (so the page's search
    and a browser's find both land on it) with its default, where it applies, its meaning and an example. It was
    one table 11,742 px tall whose option names broke mid-word and whose meaning and example ran off-screen."""
    where = {STREAM: "stream", BATCH: "batch", WRITE: "write"}
    by_section: dict[str, list[Spec]] = {title: [] for title, _, _ in _SECTIONS}
    for spec in SPECS:
        by_section[_section_of(spec.key)].append(spec)
    out = ["Sections: " + ", ".join(f"[{title}](#{_anchor(title)})" for title, _, _ in _SECTIONS) + "."]
    for title, what, _ in _SECTIONS:
        out += ["", f"## {title}", "", what]
        for spec in by_section[title]:
            required = spec.key == "eventhubs.connectionString"
            empty = spec.default is None or spec.default == {}
            default = "none: this or `eventhubs.namespace`" if required else "none" if empty else f"`{spec.default}`"
            if isinstance(spec.default, bool):
                default = f"`{str(spec.default).lower()}`"
            elif spec.parse is parse_size:
                default = f"`{spec.default // 1024**2}MB`"
            modes = ", ".join(where[m] for m in (STREAM, BATCH, WRITE) if m in spec.modes)
            out += ["", f"### `{spec.key}`", "", f"Default {default}; for {modes}.", "", spec.doc, "",
                    f"Example: `.option({spec.key!r}, {spec.example!r})`"]  # fmt: skip
    return "\n".join(out)


def _anchor(title: str) -> str:
    """The heading's anchor as the documentation site makes it (lower case, words joined by hyphens)."""
    words = "".join(c if c.isalnum() or c in " -" else " " for c in title.lower()).split()
    return "-".join(words)
