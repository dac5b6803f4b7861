"""Where the suite's time goes: ``python -m tests.durations build/junit-*.xml`` sums each test file's time (setup,
call and teardown, as pytest's JUnit XML counts them) per run, biggest first, as the README's "Tests and CI" table
shows it (``./dev test`` and ``./dev test-compat`` write those files).

``python -m tests.durations --weights build/junit-main-*.xml`` writes each file's minutes in the main suite to
``tests/file_minutes.json``, by which ``./dev test`` deals the files to its side-by-side pytest processes
(``--shard``, tests/conftest.py): run it when files were added or grew, so the processes end about together."""

from __future__ import annotations

import collections
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def by_file(path: str) -> tuple[float, dict[str, tuple[float, int]]]:
    """A JUnit file's wall time, and each test file's summed time and test count."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    wall = sum(float(s.get("time", 0)) for s in suites)
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for case in root.iter("testcase"):
        name = (case.get("classname") or "").replace(".", "/") + ".py"
        files[name][0] += float(case.get("time", 0))
        files[name][1] += 1
    return wall, {k: (v[0], int(v[1])) for k, v in files.items()}


def main(paths: list[str], top: int = 12) -> None:
    for path in paths:
        wall, files = by_file(path)
        print(f"\n{Path(path).name}: {wall / 60:.1f} min, {sum(n for _, n in files.values())} tests")
        print("| file | tests | minutes |\n|---|---|---|")
        for name, (seconds, count) in sorted(files.items(), key=lambda kv: -kv[1][0])[:top]:
            print(f"| `{name}` | {count} | {seconds / 60:.1f} |")


WEIGHTS = Path(__file__).with_name("file_minutes.json")


def write_weights(paths: list[str]) -> None:
    """Each test file's minutes over the main suite's JUnit files, to :data:`WEIGHTS`."""
    import json

    minutes: dict[str, float] = collections.defaultdict(float)
    for path in paths:
        for name, (seconds, _) in by_file(path)[1].items():
            minutes[name] += seconds / 60
    WEIGHTS.write_text(json.dumps({k: round(v, 2) for k, v in sorted(minutes.items())}, indent=0) + "\n")
    print(f"{WEIGHTS}: {len(minutes)} files, {sum(minutes.values()):.1f} minutes")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--weights"]:
        write_weights(sys.argv[2:])
    else:
        main(sys.argv[1:])
