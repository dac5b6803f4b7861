"""The old connector's keys this one does not take as they are: aliases, and retired keys with what replaces them.

Every key of azure-event-hubs-spark 2.3.x's ``EventHubsConf`` gets an answer, so a migration never meets a
silently ignored option.
"""

from __future__ import annotations

from eventhubs_spark.errors import OptionError

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


def retired_error(key: str) -> OptionError:
    why, example, after = RETIRED[key.lower()]
    return OptionError(
        f"{key}: not supported by eventhubs-spark: {why}; remove it (e.g. {example}{' ' + after if after else ''})",
        example,
    )
