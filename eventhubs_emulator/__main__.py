"""``python -m eventhubs_emulator``: run the emulator until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from . import DEFAULT_KEY, DEFAULT_KEY_NAME, Emulator, EmulatorConfig, load_official_config, parse_hub_flag
from .capture import DEFAULT_NAME_FORMAT, CaptureSettings


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
    parser.add_argument(
        "--tls-port",
        type=int,
        metavar="PORT",
        help="also serve AMQPS (AMQP over TLS), as the service does on 5671 (0 picks a free port)",
    )
    parser.add_argument(
        "--websocket-port",
        type=int,
        metavar="PORT",
        help="also serve AMQP over WebSockets with TLS at /$servicebus/websocket, as the service does on 443 "
        "(0 picks a free port)",
    )
    parser.add_argument(
        "--cert",
        metavar="CERT_FILE",
        help="the TLS certificate (PEM, with its chain) for --tls-port and --websocket-port; default: one "
        "generated at start for the listening address, 127.0.0.1, localhost and this machine's name",
    )
    parser.add_argument("--cert-key", metavar="KEY_FILE", help="the private key (PEM) of --cert")
    parser.add_argument(
        "--schema-registry-port", type=int, metavar="PORT",
        help="also serve the namespace's Schema Registry over HTTPS (the REST API the official SDKs call; Entra ID "
        "tokens only, checked with --entra) (0 picks a free port)",
    )  # fmt: skip
    parser.add_argument(
        "--schema-group", action="append", default=[], metavar="NAME:FORMAT",
        help="a schema group of the Schema Registry holding Avro, Json or Custom schemas, e.g. --schema-group "
        "orders:Avro (repeatable)",
    )  # fmt: skip
    parser.add_argument("--config", help="the official Event Hubs emulator's Config.json")
    parser.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="NAME=KEY",
        help="check SAS tokens against this policy key (repeatable); without it any key is accepted",
    )
    parser.add_argument(
        "--entra",
        action="store_true",
        help="also run a local Microsoft Entra ID token service (needs cryptography, from eventhubs-spark[aad]) "
        "and accept its tokens; prints a client ID and secret to sign in with",
    )
    parser.add_argument(
        "--max-message-size", type=int, default=1024 * 1024, help="largest event or batch in bytes (default 1 MiB)"
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="close a connection that sends nothing for this long, advertised in OPEN (default 120, as the "
        "service; 0 = never)",
    )
    parser.add_argument(
        "--link-idle-timeout",
        type=float,
        default=1800.0,
        metavar="SECONDS",
        help="force-detach a consumer link with no delivery and no credit for this long (default 1800, as the "
        "service; 0 = never)",
    )
    parser.add_argument(
        "--throughput-units",
        type=int,
        metavar="N",
        help="meter the namespace as a Standard one with N throughput units: sends past 1 MB/s or 1,000 events/s "
        "per unit are refused with com.microsoft:server-busy, deliveries wait past 2 MB/s or 4,096 events/s "
        "(default: unmetered)",
    )
    parser.add_argument(
        "--burst-seconds", type=float, default=1.0, metavar="SECONDS",
        help="with --throughput-units: how many seconds of allowance may be used at once (default 1)",
    )  # fmt: skip
    parser.add_argument(
        "--detach-every", type=float, metavar="SECONDS",
        help="detach every sending and receiving link of events this often, as the service does when it moves a "
        "partition (default: never)",
    )  # fmt: skip
    parser.add_argument(
        "--detach-condition", default="amqp:link:detach-forced",
        choices=["amqp:link:detach-forced", "com.microsoft:timeout"],
        help="the error the --detach-every detaches carry (default amqp:link:detach-forced)",
    )  # fmt: skip
    parser.add_argument(
        "--black-hole-every", type=float, metavar="SECONDS",
        help="this often, every open connection stops answering (no frames, no close) for --black-hole-seconds "
        "(default: never)",
    )  # fmt: skip
    parser.add_argument(
        "--black-hole-seconds", type=float, default=20.0, metavar="SECONDS",
        help="how long each --black-hole-every lasts (default 20)",
    )  # fmt: skip
    parser.add_argument(
        "--geo-replicated", action="store_true",
        help="every hub is geo-replicated (Premium/Dedicated): offsets become opaque 'segment:offset' strings, "
        "events carry their replication segment, and Emulator.promote begins a new segment",
    )  # fmt: skip
    parser.add_argument(
        "--promote-every", type=float, metavar="SECONDS",
        help="with --geo-replicated: promote the secondary region this often (a new replication segment in every "
        "partition, every link detached) (default: never)",
    )  # fmt: skip
    parser.add_argument(
        "--promote-lose", type=int, default=0, metavar="N",
        help="with --promote-every: each promotion loses every partition's last N events, as a forced one loses "
        "what was not yet replicated (default 0)",
    )  # fmt: skip
    parser.add_argument(
        "--capture", metavar="FOLDER|blob:CONTAINER",
        help="Event Hubs Capture: each partition's events in Avro files as the service writes them, into a local "
        "folder, or blob:CONTAINER with --capture-connection-string (e.g. Azurite's) (default: off)",
    )  # fmt: skip
    parser.add_argument("--capture-connection-string", metavar="CONNECTION_STRING",
                        help="with --capture blob:CONTAINER: the storage account's (default: "
                        "$AZURE_STORAGE_CONNECTION_STRING)")  # fmt: skip
    parser.add_argument("--capture-window", type=float, default=300.0, metavar="SECONDS",
                        help="a file per partition at least this often (the time window; default 300)")  # fmt: skip
    parser.add_argument(
        "--capture-size",
        type=int,
        default=300 * 1024 * 1024,
        metavar="BYTES",
        help="or once a window holds this many bytes of events (the size window; default 300 MiB)",
    )
    parser.add_argument(
        "--capture-codec",
        choices=("null", "deflate"),
        default="null",
        help="the Avro codec (the service's Avro is null, AvroDeflate deflate; default null)",
    )
    parser.add_argument("--capture-name-format", default=DEFAULT_NAME_FORMAT, metavar="FORMAT",
                        help="archiveNameFormat: all nine tokens, e.g. the default " + DEFAULT_NAME_FORMAT.replace(
                            "{", "{{").replace("}", "}}"))  # fmt: skip
    parser.add_argument(
        "--capture-namespace",
        default="emulator",
        metavar="NAME",
        help="the {Namespace} of the file names (default emulator)",
    )
    parser.add_argument(
        "--capture-skip-empty",
        action="store_true",
        help="no file for a window without events (skipEmptyArchives; default: an empty file)",
    )


def _capture(args: argparse.Namespace) -> CaptureSettings | None:
    """--capture and its settings (checked by CaptureSettings, whose errors name the setting)."""
    where = getattr(args, "capture", None)
    if not where:
        return None
    common: dict[str, Any] = {"window_seconds": args.capture_window, "window_bytes": args.capture_size,
                              "codec": args.capture_codec, "name_format": args.capture_name_format,
                              "namespace": args.capture_namespace, "skip_empty": args.capture_skip_empty}  # fmt: skip
    if where.startswith("blob:"):
        connection = args.capture_connection_string or os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
        if not connection:
            raise ValueError("--capture blob:CONTAINER needs --capture-connection-string (or "
                             "$AZURE_STORAGE_CONNECTION_STRING), e.g. Azurite's")  # fmt: skip
        return CaptureSettings(destination="blob", connection_string=connection, container=where[5:], **common)
    return CaptureSettings(destination=where, **common)


def build(args: argparse.Namespace) -> Emulator:
    config = load_official_config(args.config) if args.config else EmulatorConfig()
    config.hubs.extend(parse_hub_flag(text) for text in args.hub)
    for text in args.key:
        name, sep, key = text.partition("=")
        if not sep or not name or not key:
            raise ValueError(f"--key {text!r}: expected NAME=KEY, e.g. --key RootManageSharedAccessKey=secret")
        config.keys[name] = key
    if getattr(args, "geo_replicated", False):
        config.hubs = [dataclasses.replace(hub, geo_replicated=True) for hub in config.hubs]
    elif getattr(args, "promote_every", None) is not None:
        raise ValueError("--promote-every needs --geo-replicated: only a geo-replicated hub can be promoted, e.g. "
                         "--geo-replicated --promote-every 60")  # fmt: skip
    if getattr(args, "promote_lose", 0) < 0:
        raise ValueError(f"--promote-lose {args.promote_lose}: expected 0 or more events, e.g. --promote-lose 5")
    if not config.hubs:
        raise ValueError("no event hub configured: add --hub NAME:PARTITIONS (e.g. --hub telemetry:4) or --config")
    config.max_message_size = args.max_message_size
    for name in ("idle_timeout", "link_idle_timeout"):
        value = getattr(args, name, None)
        if value is not None:
            if value < 0:
                raise ValueError(f"--{name.replace('_', '-')} {value:g}: expected seconds >= 0 (0 = never)")
            setattr(config, name, value)
    cert, key = getattr(args, "cert", None), getattr(args, "cert_key", None)
    if bool(cert) != bool(key):
        raise ValueError("--cert and --cert-key go together, e.g. --cert server.pem --cert-key server-key.pem")
    groups: dict[str, str] = {}
    for text in getattr(args, "schema_group", []):
        name, sep, schema_format = text.partition(":")
        if not sep or not name or schema_format.lower() not in ("avro", "json", "custom"):
            raise ValueError(f"--schema-group {text!r}: expected NAME:FORMAT with Avro, Json or Custom, e.g. "
                             "--schema-group orders:Avro")  # fmt: skip
        groups[name] = schema_format
    registry_port = getattr(args, "schema_registry_port", None)
    if groups and registry_port is None:
        raise ValueError("--schema-group needs --schema-registry-port, e.g. --schema-registry-port 0 "
                         "--schema-group orders:Avro")  # fmt: skip
    network: dict[str, Any] = {
        "schema_registry_port": registry_port,
        "schema_groups": groups,
        "tls_port": getattr(args, "tls_port", None),
        "websocket_port": getattr(args, "websocket_port", None),
        "certificate": (cert, key) if cert else None,
    }
    units = getattr(args, "throughput_units", None)
    if units is not None and units < 1:
        raise ValueError(f"--throughput-units {units}: expected 1 or more, e.g. --throughput-units 2")
    for name in ("burst_seconds", "detach_every", "black_hole_every", "black_hole_seconds", "promote_every"):
        value = getattr(args, name, None)
        if value is not None and value <= 0:
            raise ValueError(
                f"--{name.replace('_', '-')} {value:g}: expected seconds > 0, e.g. --{name.replace('_', '-')} 30"
            )
    network.update(
        throughput_units=units,
        burst_seconds=getattr(args, "burst_seconds", 1.0),
        detach_every=getattr(args, "detach_every", None),
        detach_condition=getattr(args, "detach_condition", "amqp:link:detach-forced"),
        black_hole_every=getattr(args, "black_hole_every", None),
        black_hole_seconds=getattr(args, "black_hole_seconds", 20.0),
        geo_replicated=getattr(args, "geo_replicated", False),
        promote_every=getattr(args, "promote_every", None),
        promote_lose=getattr(args, "promote_lose", 0),
    )
    network["capture"] = _capture(args)
    if not getattr(args, "entra", False):
        return Emulator(config=config, host=args.host, port=args.port, **network)
    import secrets

    from .entra import LocalEntra

    entra = LocalEntra().start()
    entra.add_secret_client("local-app", secrets.token_urlsafe(16))
    emulator = Emulator(config=config, host=args.host, port=args.port, token_verifier=entra.verify, **network)
    emulator.entra = entra  # type: ignore[attr-defined]
    return emulator


class SignalFlag:
    """A stop request set from a signal handler: a plain attribute, no lock.

    A ``threading.Event`` must not be set from a handler: Python runs the handler in the main thread
    between two bytecodes, and if that thread is inside ``Event.wait`` holding the event's own
    (non-reentrant) lock at that moment, ``set()`` waits for it forever. Under load that window is hit
    (a SIGTERM once left the emulator running for good). Waiting here is a sleep, which a signal
    interrupts and PEP 475 resumes.
    """

    def __init__(self) -> None:
        self.raised = False

    def set(self, *_: object) -> None:
        self.raised = True

    def is_set(self) -> bool:
        return self.raised

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.raised:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(0.05, left))
        return self.raised


def serve(emulator: Emulator) -> int:
    """Start, print the connection strings, block until SIGINT/SIGTERM, stop."""
    stop = SignalFlag()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop.set)
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
    server = emulator.server
    if server is not None and (server.tls_port is not None or server.websocket_port is not None):
        print(f"TLS certificate: {emulator.ca_file}; trust it with eventhubs.connectionVerify (the SDK's "
              "connection_verify), and use the connection string without UseDevelopmentEmulator:",
              flush=True)  # fmt: skip
        first = emulator.config.hubs[0].name
        print(f"  {emulator.connection_string(first, key_name=shown_name, key=shown_key, tls=True)}", flush=True)
        if server.tls_port is not None:
            print(f"  AMQPS on {emulator.host}:{server.tls_port}: eventhubs.customEndpointAddress="
                  f"{emulator.tls_endpoint}", flush=True)  # fmt: skip
        if server.websocket_port is not None:
            print(f"  AMQP over WebSockets on {emulator.host}:{server.websocket_port}: eventhubs.transportType="
                  f"amqpWebSockets eventhubs.customEndpointAddress={emulator.websocket_endpoint}",
                  flush=True)  # fmt: skip
    if emulator.registry_server is not None:
        print(f"Schema Registry on https://{emulator.schema_registry_namespace} (groups "
              f"{', '.join(emulator.schema_registry.groups()) or 'none'}): SchemaRegistryClient("
              f"fully_qualified_namespace={emulator.schema_registry_namespace!r}, credential), trusting "
              f"{emulator.ca_file}", flush=True)  # fmt: skip
    capturer = emulator.capturer
    if capturer is not None:
        where = capturer.settings
        target = f"container {where.container}" if where.destination == "blob" else where.destination
        print(f"Capture into {target}: a file per partition every {where.window_seconds:g} s or "
              f"{where.window_bytes} bytes, codec {where.codec}, named {where.name_format}.avro",
              flush=True)  # fmt: skip
    entra = getattr(emulator, "entra", None)
    if entra is not None:
        secret = entra.clients["local-app"].secret
        print(
            f"Local Entra ID on {entra.authority} (tenant {entra.tenant_id}); trust it with "
            f"REQUESTS_CA_BUNDLE={entra.ca_file}\n"
            f"  sign in with eventhubs.namespace={emulator.fully_qualified_namespace} "
            f"eventhubs.useDevelopmentEmulator=true eventhubs.entra.authorityHost={entra.authority} "
            f"eventhubs.entra.disableInstanceDiscovery=true eventhubs.entra.tenantId={entra.tenant_id} "
            f"eventhubs.entra.clientId=local-app eventhubs.entra.clientSecret={secret}\n"
            f"  managed identity: IDENTITY_ENDPOINT={entra.identity_endpoint} IDENTITY_HEADER={entra.identity_header}",
            flush=True,
        )
    while not stop.wait(0.5):
        pass
    emulator.stop()
    if entra is not None:
        entra.stop()
    print("emulator stopped", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eventhubs_emulator", description=__doc__)
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
