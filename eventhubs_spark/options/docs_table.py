"""The Options page's table, generated from the specs by section (``docs/generate.py`` writes it)."""

from __future__ import annotations

from collections.abc import Callable

from eventhubs_spark.options.parsers import BATCH, STREAM, WRITE, parse_size
from eventhubs_spark.options.spec import Spec
from eventhubs_spark.options.specs import SPECS

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
                "eventhubs.maxPartitionsPerTask",
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
        "Writing",
        "The sink: exactly once into a hub (see Guarantees).",
        lambda k: k.startswith("eventhubs.sink."),
    ),
    (
        "Capture",
        "History older than the hub's retention, read from Capture files first.",
        lambda k: k.startswith("eventhubs.capture."),
    ),
    (
        "JSON",
        "JSON bodies read into columns: a fixed schema, or one inferred, kept and evolved.",
        lambda k: k.startswith("eventhubs.json."),
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
