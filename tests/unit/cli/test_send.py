"""Unit tests of :mod:`eventhubs_spark.cli.send` (sending to the emulator: ``connector/test_cli.py``)."""

from __future__ import annotations

import argparse
import io
import json

from eventhubs_spark.cli.send import _bodies, _progress


def test_bodies_come_from_a_file_line_by_line_blank_lines_left_out_or_are_generated_json(tmp_path):
    path = tmp_path / "events.txt"
    path.write_text('{"a": 1}\n\n{"a": 2}\n')
    count, bodies = _bodies(argparse.Namespace(file=str(path), count=0, size=0))
    assert count == 2 and list(bodies) == ['{"a": 1}', '{"a": 2}']
    count, bodies = _bodies(argparse.Namespace(file=None, count=3, size=100))
    made = [json.loads(b) for b in bodies]
    assert count == 3 and [m["id"] for m in made] == [0, 1, 2] and all(len(m["pad"]) == 60 for m in made)


def test_progress_is_a_bar_when_the_total_is_known_else_a_count():
    out = io.StringIO()
    _progress(15, 30, out)
    _progress(7, None, out)
    assert out.getvalue() == "\r[" + "#" * 15 + "." * 15 + "] 15/30\r7 events"
