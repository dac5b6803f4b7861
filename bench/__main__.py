"""``python -m bench [NAME ...]``: run the named benchmarks (all by default)."""

from __future__ import annotations

import argparse
import sys

from . import emulator_sdk, sink

BENCHMARKS = {"emulator_sdk": emulator_sdk.run, "sink": sink.run}


def main() -> int:
    parser = argparse.ArgumentParser(prog="./dev bench")
    parser.add_argument("names", nargs="*", choices=[*BENCHMARKS, []], help="benchmarks to run (default: all)")
    args = parser.parse_args()
    for name in args.names or list(BENCHMARKS):
        print(f"running {name} ...", flush=True)
        BENCHMARKS[name]()
    print("results in bench/results.json and bench/RESULTS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
