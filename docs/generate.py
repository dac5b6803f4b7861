"""The documentation's generated parts, from their one source: the options table (``eventhubs_spark.options``) and
the benchmarks' figures (``bench/results.json``). ``./dev docs`` and every bench run write them;
``python docs/generate.py --check`` (and a unit test) fails when a page has drifted from its source, so no figure
or option is ever copied by hand."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "pages"
RESULTS = ROOT / "bench" / "results.json"

# each benchmark's heading on the Performance page, in the page's order (a benchmark missing here comes last)
BENCHES = {
    "read_vs_sdk": "Reading, whole query, against the SDK (bench `read`)",
    "read_ab": "A read-path change against the code before it (bench `ab_read`)",
    "read_ab_emulator": "The emulator's sending against the code before it, same reader (bench `ab_read`)",
    "read_ab_tree": "The whole package against an earlier tree, after a reorganisation (bench `ab_read`, paths `*`)",
    "jvm": "Reading, whole query, against the old Scala connector and Spark's Kafka source (bench `jvm`)",
    "jvm_sink": "Writing, against the old Scala connector's sink (bench `jvm`)",
    "ceiling": "Reading inside the micro-batch, against Spark's own ceiling for a Python source (bench `ceiling`)",
    "read_profile": "CPU per event in the read loop, one process (bench `read_profile`)",
    "sink_vs_sdk": "Writing, against the SDK (bench `sink`)",
    "sink_exactly_once": "Writing exactly once, against at least once (bench `sink`)",
    "json": "JSON bodies into columns, against Spark's from_json (bench `json`)",
    "json_registry": "JSON Schema from the registry, against from_json with the same schema (bench `json_registry`)",
    "avro": "Avro with the Schema Registry, read and written (bench `avro`)",
    "capture": "History from Capture files, against the hub (bench `capture`)",
    "capture_slices": "A rate-limited stream through one large Capture file (bench `capture_slices`)",
    "cluster": "Partition homes on a cluster (bench `cluster`)",
    "cluster_kill": "Executors killed mid-stream (bench `cluster_kill`)",
    "receivers": "Receivers kept between micro-batches (bench `receivers`)",
    "memory": "Read-ahead memory (bench `memory`)",
    "sandbox": "Where it runs: firewalls and sandboxes (bench `sandbox`)",
    "latency": "Latency (bench `latency`)",
    "task_cost": "What a small task costs (bench `task_cost`)",
    "load": "The first .load() in a fresh process (bench `load`)",
    "partitions": "Big hubs: 4 to 1,024 partitions beside Spark's floor (bench `partitions`)",
    "start_lookups": "Big hubs: where a stream starts by enqueued time (bench `start_lookups`)",
    "checkpoint_mirror": "Big hubs: triggers with the checkpoint store on (bench `checkpoint_mirror`)",
    "planning": "Planning a trigger (bench `planning`)",
    "planning_lag": "Planning with lag figures (bench `planning`)",
    "networks": "TLS and WebSockets (bench `networks`)",
    "pushback": "Ten minutes of the service pushing back (bench `pushback`)",
    "soak": "Ten minutes of steady load (bench `soak`)",
    "emulator_sdk": "The emulator and the plain SDK, for reference (bench `emulator_sdk`)",
}


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.2f}".rstrip("0").rstrip(".") if value < 1000 else f"{value:,.0f}"
    return str(value).replace("|", "\\|")


def _met(summary: dict[str, Any]) -> str:
    flags = [v for k, v in summary.items() if isinstance(v, bool) and ("met" in k or "once" in k or "reached" in k)]
    return "" if not flags else "yes" if all(flags) else "**not all**"


def performance(doc: dict[str, Any]) -> str:
    """The Performance page's figures: a table of every benchmark's target and whether it was met, then each
    benchmark's recorded summary as it stands in ``bench/results.json``."""
    names = sorted(doc, key=lambda n: (list(BENCHES).index(n) if n in BENCHES else len(BENCHES), n))
    out = ["| benchmark | target | met | measured |", "|---|---|---|---|"]
    for name in names:
        summary = doc[name]["summary"]
        target = next((str(v) for k, v in summary.items() if k == "target" or "goal" in k), "")
        out.append(f"| [{name}](#{name.replace('_', '-')}) | {_value(target)} | {_met(summary)} | "
                   f"{doc[name]['measured_at'][:10]} |")  # fmt: skip
    for name in names:
        entry = doc[name]
        out += ["", f"### {BENCHES.get(name, name)} {{#{name.replace('_', '-')}}}", "",
                f"Measured {entry['measured_at']} on {entry['machine']}.", "",
                "| figure | value |", "|---|---|"]  # fmt: skip
        out += [f"| {_value(k)} | {_value(v)} |" for k, v in entry["summary"].items()]
        if entry.get("notes"):
            out += ["", str(entry["notes"])]
    return "\n".join(out)


def _habits() -> str:
    from eventhubs_spark.options import HABITS

    rows = ["| what you wrote (Spark's Kafka source) | here | how |", "|---|---|---|"]
    rows += [f"| `{key}` | `{ours}` | {how} |" for key, (ours, how) in HABITS.items()]
    return "\n".join(rows)


def _options() -> str:
    from eventhubs_spark.options import options_table

    return options_table()


def generated() -> dict[tuple[str, str], str]:
    """(page, block) -> the block's text now."""
    doc = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    return {
        ("options.md", "options"): _options(),
        ("options.md", "habits"): _habits(),
        ("performance.md", "bench"): performance(doc),
    }


def _fill(text: str, block: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- generated:{block} [^\n]*?-->\n)(?:.*?\n)?(<!-- end:{block} -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"no <!-- generated:{block} ... --> ... <!-- end:{block} --> markers")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def pages_now() -> dict[str, tuple[str, str]]:
    """page -> (its text on disk, its text with every generated block filled from its source)."""
    out: dict[str, tuple[str, str]] = {}
    for (page, block), body in generated().items():
        old = out[page][0] if page in out else (PAGES / page).read_text()
        new = out[page][1] if page in out else old
        out[page] = (old, _fill(new, block, body))
    return out


def main(argv: list[str]) -> int:
    drifted = [page for page, (old, new) in pages_now().items() if old != new]
    if "--check" in argv:
        if drifted:
            print(f"docs drifted from their sources: {', '.join(drifted)} (run ./dev docs)", file=sys.stderr)
        return 1 if drifted else 0
    for page, (_, new) in pages_now().items():
        (PAGES / page).write_text(new)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
