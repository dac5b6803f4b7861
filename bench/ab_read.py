"""An A/B of a read-path change: the connector as it is (B) against the same tree with some files as they were at an
earlier commit (A), alternating runs on one emulator and one set of events, medians; so a gain is not an hour's
noise (issue 50).

``python -m bench ab_read`` compares ``codec/layout.py`` before issue 50's first change (commit 062aa17: a map every
event shares made text per row) with today's; ``EVENTHUBS_AB_BEFORE`` and ``EVENTHUBS_AB_PATHS`` (comma-separated,
relative to the repository; ``*`` for the whole tree) name another commit and other files. Each run is a Spark
``local[2]`` of its own (two warm-up reads of 200,000 events, then one read of every event of the hub: 4 partitions,
200 B), in a process whose ``PYTHONPATH`` puts that variant's tree first, for its executors and receiver services
too. When the files compared include the emulator's (``eventhubs_emulator/...``), each variant reads from its own
tree's emulator, filled with the same events, and the result is recorded as ``read_ab_emulator``: the emulator
shares the machine's two cores with the reader.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .emulator_sdk import start_emulator
from .read import fill
from .results import record

ROOT = Path(__file__).resolve().parents[1]
BEFORE = os.environ.get("EVENTHUBS_AB_BEFORE", "062aa17")
PATHS = [p for p in os.environ.get("EVENTHUBS_AB_PATHS", "eventhubs_spark/codec/layout.py").split(",") if p]
EVENTS = int(os.environ.get("EVENTHUBS_AB_EVENTS", "1000000"))
ROUNDS = int(os.environ.get("EVENTHUBS_AB_ROUNDS", "3"))


def one(conn: str, warm: str, events: int) -> None:
    """One run (in the variant's process): prints its figures as JSON."""
    import eventhubs_spark

    from .read import connector_drain, executor_python_cpu, local_spark

    spark = local_spark()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(2):
            connector_drain(spark, warm, 200_000, f"{tmp}/warm-{i}")
        before, service_before = executor_python_cpu(), executor_python_cpu("service")
        whole, batch = connector_drain(spark, conn, events, f"{tmp}/measured")
        cpu, service = executor_python_cpu() - before, executor_python_cpu("service") - service_before
    spark.stop()
    print(json.dumps({"tree": str(Path(eventhubs_spark.__file__).resolve().parents[1]), "whole": whole,
                      "batch": batch, "cpu_us": cpu / events * 1e6, "service_us": service / events * 1e6}))  # fmt: skip


def worktrees(where: Path, before: str = BEFORE, paths: list[str] = PATHS) -> dict[str, Path]:
    """A (HEAD with ``paths`` as at ``before``) and B (HEAD), as worktrees under ``where`` (see remove_worktrees).
    ``paths`` of ``["*"]``: A is the whole tree as at ``before`` (a change that moved files, as issue 66's)."""
    trees = {"A": where / "A", "B": where / "B"}
    for name, tree in trees.items():
        commit = before if name == "A" and paths == ["*"] else "HEAD"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(tree), commit], check=True,
                       capture_output=True)  # fmt: skip
    for path in [] if paths == ["*"] else paths:
        old = subprocess.run(["git", "-C", str(ROOT), "show", f"{before}:{path}"], check=True, capture_output=True)
        (trees["A"] / path).write_bytes(old.stdout)
    return trees


def remove_worktrees(trees: dict[str, Path]) -> None:
    for tree in trees.values():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)


def run() -> None:
    where = Path(tempfile.mkdtemp(prefix="eventhubs-ab-"))
    trees = worktrees(where)
    # A change to the emulator is compared with each variant's own emulator (same events, filled in each);
    # otherwise one emulator, this tree's, serves both.
    own = any(p.startswith("eventhubs_emulator/") for p in PATHS)
    variants = ("A", "B") if own else ("A",)
    emulators = {v: start_emulator({"ab": 4, "warm": 4}, tree=str(trees[v]) if own else None) for v in variants}
    procs = [proc for proc, _ in emulators.values()]
    runs: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    try:
        for _, conns in emulators.values():
            fill(conns["ab"], EVENTS, 200)
            fill(conns["warm"], 200_000, 200)
        for r in range(ROUNDS):
            for variant in ("A", "B") if r % 2 == 0 else ("B", "A"):
                tree = trees[variant]
                conns = emulators[variant if own else "A"][1]
                env = {**os.environ, "PYTHONPATH": str(tree), "PYSPARK_PYTHON": sys.executable}
                done = subprocess.run([sys.executable, "-m", "bench.ab_read", "one", conns["ab"], conns["warm"],
                                       str(EVENTS)], cwd=tree, env=env, capture_output=True, text=True,
                                      timeout=1800)  # fmt: skip
                lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
                if not lines:
                    raise RuntimeError(f"the {variant} run failed: {done.stderr[-3000:]}")
                got = json.loads(lines[-1])
                if Path(got["tree"]) != tree.resolve():
                    raise RuntimeError(f"the {variant} run read with {got['tree']}, not {tree}")
                runs[variant].append(got)
                print(variant, got, flush=True)
    finally:
        for proc in procs:
            proc.terminate()
        remove_worktrees(trees)

    def median(variant: str, key: str) -> float:
        return statistics.median(x[key] for x in runs[variant])

    compared = "the whole tree" if PATHS == ["*"] else ", ".join(PATHS)
    rows = [{"code": f"A: {compared} as at {BEFORE}" if v == "A" else "B: as now", "events": EVENTS,
             "whole query (s)": round(median(v, "whole"), 3), "in the batch (s)": round(median(v, "batch"), 3),
             "executor Python CPU (µs/event)": round(median(v, "cpu_us"), 2),
             "of it, the receiver service's (µs/event)": round(median(v, "service_us"), 2),
             "runs, whole (s)": ", ".join(f"{x['whole']:.2f}" for x in runs[v])} for v in ("A", "B")]  # fmt: skip
    summary = {
        "B / A, whole query (time)": round(median("B", "whole") / median("A", "whole"), 3),
        "B / A, in the batch (time)": round(median("B", "batch") / median("A", "batch"), 3),
        "B / A, executor Python CPU per event": round(median("B", "cpu_us") / median("A", "cpu_us"), 3),
    }
    served = ("each variant's own emulator (its own process, from its tree), both filled with the same events"
              if own else "one emulator (its own process) and one set of events for all runs")  # fmt: skip
    notes = (f"{ROUNDS} rounds, A and B alternating (A first in even rounds), each run a Spark local[2] of its own: "
             f"two warm-up reads of 200,000 events, then one Trigger.AvailableNow read of every event into noop; "
             f"{served}; medians. The receiver service's CPU is its process's (its reading threads: socket reads, "
             f"cutting frames, sequence numbers; handing chunks to the workers); the rest is Spark's Python workers' "
             f"(decoding chunks into record batches, handing them to the JVM, the tasks' own cost) and their "
             f"daemon's.")  # fmt: skip
    # a whole tree compared (a reorganisation) is kept apart from the read-path change the page shows as read_ab
    if PATHS == ["*"]:
        notes = f"The whole tree as at {BEFORE} (A) against the tree now (B), {EVENTS:,} events. " + notes
    name = "read_ab_emulator" if own else "read_ab_tree" if PATHS == ["*"] else "read_ab"
    record(name, summary, rows, notes)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 4 and sys.argv[1] == "one":
        one(sys.argv[2], sys.argv[3], int(sys.argv[4]))
