"""Options checked together (combinations that cannot work) and keys not known (with a did-you-mean)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eventhubs_spark.errors import OptionError
from eventhubs_spark.options.parsers import WRITE, edit_distance
from eventhubs_spark.options.spec import example_of
from eventhubs_spark.options.specs import BY_KEY, SPECS

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


def unknown_key_error(key: str, mode: str) -> OptionError:
    habit = HABITS.get(key.lower())
    if habit is not None:
        ours, why = habit
        example = example_of(BY_KEY[ours.lower()])
        return OptionError(f"unknown option {key!r}: that is Spark's Kafka source; here it is {ours!r} ({why}), "
                           f"e.g. {example}", example)  # fmt: skip
    near = suggestion(key, mode)
    if near is not None:
        example = example_of(BY_KEY[near.lower()])
        return OptionError(f"unknown option {key!r}: did you mean {near!r}, e.g. {example}?", example)
    example = example_of(BY_KEY["eventhubs.consumergroup"])
    return OptionError(f"unknown option {key!r}: every option is on the documentation's Options page, "
                       f"docs/pages/options.md (e.g. {example})",
                       example)  # fmt: skip


def check_combinations(values: Mapping[str, Any], mode: str) -> None:
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
    check_avro(values, mode)
    check_json_registry(values, mode)
    if mode != WRITE:
        check_json(values, mode)
    if mode != WRITE and values.get("maxeventsperpartition") and values.get("eventhubs.useexclusivereceiver"):
        example = ".option('eventhubs.useExclusiveReceiver', 'false')"
        raise OptionError(
            "maxEventsPerPartition splits one partition over several concurrent tasks, and owner-level receivers "
            f"would take the partition from each other: also set eventhubs.useExclusiveReceiver=false, e.g. {example}",
            example,
        )


def check_avro(values: Mapping[str, Any], mode: str) -> None:
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


_JSON_REGISTRY_KEYS = ("eventhubs.json.schemaRegistry", "eventhubs.json.schemaId", "eventhubs.json.validate",
                       "eventhubs.json.schemaGroup", "eventhubs.json.schemaName")  # fmt: skip


def check_json_registry(values: Mapping[str, Any], mode: str) -> None:
    """JSON through the Schema Registry: the registry, and (reads) the schema the value column is typed from or
    (writes) a group to register one in or a registered schema's id; not with Avro, nor with a fixed schema."""
    registry = values.get("eventhubs.json.schemaregistry")
    example = ".option('eventhubs.json.schemaRegistry', 'NAMESPACE.servicebus.windows.net')"
    given = [key for key in _JSON_REGISTRY_KEYS[1:] if values.get(key.lower()) not in (None, False)]
    if not registry:
        if given:
            raise OptionError(f"{', '.join(given)} would be unused: JSON bodies are read and written with the "
                              f"Schema Registry's schemas once eventhubs.json.schemaRegistry names it, e.g. {example}",
                              example)  # fmt: skip
        return
    if values.get("eventhubs.avro.schemaregistry"):
        raise OptionError("bodies are Avro (eventhubs.avro.schemaRegistry) or JSON (eventhubs.json.schemaRegistry), "
                          f"not both, e.g. {example}", example)  # fmt: skip
    schema_id = values.get("eventhubs.json.schemaid")
    if mode == WRITE:
        group_example = ".option('eventhubs.json.schemaGroup', 'telemetry-schemas')"
        if not schema_id and not values.get("eventhubs.json.schemagroup"):
            raise OptionError("writing JSON through the Schema Registry needs the group to register the value "
                              "column's schema in (eventhubs.json.schemaGroup), or a registered schema's id "
                              f"(eventhubs.json.schemaId), e.g. {group_example}", group_example)  # fmt: skip
        return
    id_example = ".option('eventhubs.json.schemaId', '0f5ebc3e0b0c4c2f8d0c1f7f1b0f9e41')"
    if not schema_id:
        raise OptionError("reading JSON through the Schema Registry needs the registered schema the value column is "
                          f"typed from: eventhubs.json.schemaId, e.g. {id_example}", id_example)  # fmt: skip
    if values.get("eventhubs.json.schema"):
        raise OptionError("eventhubs.json.schema and eventhubs.json.schemaRegistry both type the value column: set "
                          f"one (the registry's schema by eventhubs.json.schemaId), e.g. {id_example}",
                          id_example)  # fmt: skip


def check_json(values: Mapping[str, Any], mode: str) -> None:
    """The eventhubs.json.* options go together: a fixed schema or a schema location (not Avro too), and a mode
    that suits it."""
    schema, location = values.get("eventhubs.json.schema"), values.get("eventhubs.json.schemalocation")
    registry = values.get("eventhubs.json.schemaregistry")
    location_example = ".option('eventhubs.json.schemaLocation', '/dbfs/checkpoints/telemetry/json-schema')"
    given = [s.key for s in SPECS if s.key.startswith("eventhubs.json.") and mode in s.modes
             and s.key not in ("eventhubs.json.schema", "eventhubs.json.schemaLocation", *_JSON_REGISTRY_KEYS)
             and values.get(s.key.lower()) not in (None, s.default)]  # fmt: skip
    if not schema and not location and not registry:
        if given:
            raise OptionError(f"{', '.join(given)} would be unused: JSON bodies are read into columns with "
                              f"eventhubs.json.schema or eventhubs.json.schemaLocation, e.g. {location_example}",
                              location_example)  # fmt: skip
        return
    if values.get("eventhubs.avro.schemaregistry"):
        raise OptionError("a read decodes its bodies as Avro (eventhubs.avro.*) or as JSON (eventhubs.json.*), not "
                          f"both, e.g. {location_example}", location_example)  # fmt: skip
    if schema and location:
        example = ".option('eventhubs.json.schema', 'id bigint, device string')"
        raise OptionError("set eventhubs.json.schema (a fixed schema) or eventhubs.json.schemaLocation (inferred and "
                          f"kept there), not both, e.g. {example}", example)  # fmt: skip
    if schema and values.get("eventhubs.json.schemaevolutionmode") == "addnewcolumns":
        raise OptionError("eventhubs.json.schemaEvolutionMode addNewColumns grows a schema kept at "
                          f"eventhubs.json.schemaLocation; a fixed eventhubs.json.schema does not grow, e.g. "
                          f"{location_example}", location_example)  # fmt: skip
