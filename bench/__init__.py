"""Benchmarks: figures measured side by side in one run and written to bench/results.json and RESULTS.md."""
