"""``.load()`` in a fresh process (issue 87, item 3): the connector's against a trivial Python source's, with where
the connector's time goes.

Each sample is a process of its own (``python -m bench.load one ORDER``): a local[2] Spark is started (not timed),
then each source's first ``spark.readStream.format(...).load()`` is timed, in the order given (the two orders
alternate over the samples, so neither always pays the first Python worker's start). Spark answers ``.load()`` by
starting a Python worker that imports the source's module and calls its ``schema()``; the trivial source's module
is this one. The breakdown: the connector's imports in a fresh interpreter (``python -X importtime``, the package's
source module and what it pulls in), its option checks and schema (``schema()`` itself, measured in-process after
the imports). The SDK's opening, the sign-in and the first properties are not part of ``.load()``: a read asks the
hub nothing until its first micro-batch plans (bench ``defaults`` times that batch).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from .own_process import measure
from .results import record

SAMPLES = 6  # processes, the order alternating
CONN = "Endpoint=sb://localhost:1;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub;UseDevelopmentEmulator=true"


def _trivial() -> Any:
    from pyspark.sql.datasource import DataSource

    class Trivial(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_load_trivial"

        def schema(self) -> str:
            return "body binary, partition string, sequenceNumber long"

    return Trivial


def one(order: str) -> None:
    """One sample (in its own process): each source's first ``.load()``, in ``order``; prints ms as JSON."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(_trivial())
    spark.range(1).collect()  # the JVM warm: not the sources' part
    out: dict[str, float] = {}
    for side in order.split(","):
        reader = spark.readStream.format("eventhubs" if side == "ours" else "bench_load_trivial")
        if side == "ours":
            reader = reader.option("eventhubs.connectionString", CONN)
        started = time.perf_counter()
        reader.load()
        out[side] = (time.perf_counter() - started) * 1000
    spark.stop()
    print(json.dumps(out))


def _import_ms() -> tuple[float, list[tuple[str, float]]]:
    """The connector's source module's imports in a fresh interpreter: the total (ms) and where it goes, each
    module's own time summed by its top-level package (``-X importtime``'s self column)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import eventhubs_spark.source.provider"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    tops: dict[str, float] = {}
    for line in done.stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        parts = [p.strip() for p in line[len("import time:") :].split("|")]
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        top = parts[2].split(".")[0]
        tops[top] = tops.get(top, 0.0) + int(parts[0]) / 1000
    heaviest = sorted(tops.items(), key=lambda kv: -kv[1])[:6]
    return sum(tops.values()), heaviest


def _schema_ms() -> float:
    """``schema()`` itself, its imports already done (in a child: a fresh interpreter, imports first)."""
    code = ("import time, eventhubs_spark.source.provider as p\n"
            "s = p.EventHubsDataSource({'eventhubs.connectionString': " + repr(CONN) + "})\n"
            "t = time.perf_counter(); s.schema(); print((time.perf_counter() - t) * 1000)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def run() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    samples: list[dict[str, float]] = []
    for i in range(SAMPLES):
        order = "ours,trivial" if i % 2 == 0 else "trivial,ours"
        samples.append(measure("bench.load", "one", order))
        print(order, samples[-1], flush=True)

    def median(side: str, first: bool | None = None) -> float:
        picked = [s[side] for s in samples if first is None or (next(iter(s)) == side) == first]
        return statistics.median(picked)

    imports, heaviest = _import_ms()
    schema = statistics.median(_schema_ms() for _ in range(3))
    ours, trivial = median("ours"), median("trivial")
    record(
        "load",
        {
            "target": "the first .load() in a fresh process at most 1.2x a trivial Python source's (issue 87)",
            "first .load(), ours / trivial source (ms, medians)": f"{ours:.0f} / {trivial:.0f}",
            "ours / trivial": round(ours / trivial, 2),
            "target met": ours / trivial <= 1.2,
            "when first in the process, ours / trivial (ms)": f"{median('ours', True):.0f} / "
            f"{median('trivial', True):.0f}",
            "when second, ours / trivial (ms)": f"{median('ours', False):.0f} / {median('trivial', False):.0f}",
            "the connector's imports in a fresh interpreter (ms)": round(imports),
            "of them, the heaviest packages (ms)": ", ".join(f"{n} {ms:.0f}" for n, ms in heaviest),
            "schema() after the imports (ms)": round(schema, 1),
        },
        [{"sample": i, **{k: round(v) for k, v in s.items()}} for i, s in enumerate(samples)],
        notes=f"{SAMPLES} processes, each a local[2] Spark started and warmed (not timed), then each source's first "
        "spark.readStream.format(...).load() timed, the order alternating over the processes. Spark answers .load() "
        "in a Python worker of its own that imports the source's module and calls schema(): what the connector adds "
        "is its imports and schema() (option checks, no I/O); the hub is first asked at the first micro-batch.",
    )


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "one":
        one(sys.argv[2])
