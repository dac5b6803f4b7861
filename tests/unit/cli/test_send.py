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
    count, bodies = _bodies(argparse.Namespace(file=None, count=3, size=200))
    texts = list(bodies)
    made = [json.loads(b) for b in texts]
    assert count == 3 and [m["id"] for m in made] == [0, 1, 2]
    # readings as the example pipeline parses them (device, temperature, ts), about --size bytes each
    assert [m["device"] for m in made] == ["device-0", "device-1", "device-2"]
    assert all(isinstance(m["temperature"], float) and m["ts"].endswith("Z") for m in made)
    assert all(190 <= len(t) <= 210 for t in texts), [len(t) for t in texts]


def test_progress_is_a_bar_when_the_total_is_known_else_a_count():
    out = io.StringIO()
    _progress(15, 30, out)
    _progress(7, None, out)
    assert out.getvalue() == "\r[" + "#" * 15 + "." * 15 + "] 15/30\r7 events"
