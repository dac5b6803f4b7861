"""Unit tests of :mod:`eventhubs_spark.options.docs_table`."""

from __future__ import annotations

from pathlib import Path

from eventhubs_spark.options import (
    SPECS,
    options_table,
)


def test_the_docs_generated_parts_are_in_step_with_their_sources():
    """The Options page's table (from the option specs) and the Performance page's figures (from
    bench/results.json) are what docs/generate.py makes of them now: no option or figure copied by hand."""
    import importlib.util

    path = Path(__file__).resolve().parents[3] / "docs" / "generate.py"
    spec = importlib.util.spec_from_file_location("docs_generate", path)
    assert spec is not None and spec.loader is not None
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    drifted = [page for page, (old, new) in generate.pages_now().items() if old != new]
    assert not drifted, f"{drifted} drifted from their sources: run ./dev docs"
    options = (path.parent / "pages" / "options.md").read_text()
    assert options_table() in options and all(f"\n### `{spec.key}`\n" in options for spec in SPECS)
    assert len(SPECS) >= 15
