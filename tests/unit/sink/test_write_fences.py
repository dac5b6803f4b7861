"""Unit tests of :mod:`eventhubs_spark.sink.write_fences`."""

from __future__ import annotations

import pytest

from eventhubs_spark.sink.write_fences import FOLDER, WriteFences


def test_a_fence_is_the_latest_committed_batch_before_and_of_the_same_target(tmp_path):
    fences = WriteFences(str(tmp_path), "query-1", "ns/hub")
    assert fences.fence_before(0) is None, "the write's first batch has no fence"
    fences.write_fence(0, {"0": 10, "1": 4})
    fences.write_fence(1, {"0": 12, "1": 9})
    assert fences.fence_before(1) == {"0": 10, "1": 4}
    assert fences.fence_before(2) == {"0": 12, "1": 9}
    assert fences.fence_before(7) == {"0": 12, "1": 9}, "batches that wrote nothing commit no fence of their own"
    assert WriteFences(str(tmp_path), "query-1", "ns/other-hub").fence_before(2) is None, "the target changed"
    assert WriteFences(str(tmp_path), "query-2", "ns/hub").fence_before(2) is None, "another write's records"


def test_a_commit_drops_what_no_run_of_a_batch_reads_again_and_adds_up_the_figures(tmp_path):
    fences = WriteFences(str(tmp_path), "w", "ns/hub")
    root = tmp_path / FOLDER / "w"
    fences.write_mark(2, 0, {"0": 1})
    fences.write_mark(4, 1, None)
    assert fences.mark(2, 0) == {"0": 1} and fences.mark(4, 1) == {} and fences.mark(4, 0) is None
    for batch in (1, 2, 3):
        fences.write_fence(batch, {"0": batch}, {"settled": 1, "found stored": 2})
    names = sorted(p.name for p in root.iterdir())
    assert names == ["fence-2.json", "fence-3.json", "marks-4", "totals.json"], names  # marks before batch 3 gone
    assert fences.mark(2, 0) is None
    assert fences.fence_before(3) == {"0": 2}, "a re-run of the last batch still finds its fence"
    assert fences.totals() == {"settled": 3, "found stored": 6, "last batch": 3}
    assert not [p for p in root.rglob("*.tmp")], "written whole: no temporary file left behind"


def test_a_write_id_is_a_file_name_and_nothing_more(tmp_path):
    with pytest.raises(ValueError, match="a write id is letters, digits"):
        WriteFences(str(tmp_path), "../elsewhere", "ns/hub")
