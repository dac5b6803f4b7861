"""Unit tests of :mod:`eventhubs_spark.executor.service_files`."""

from __future__ import annotations

import os
import stat

import pytest

from eventhubs_spark.executor import service_files
from eventhubs_spark.interprocess import service_framing


def test_the_socket_path_is_short_private_and_one_per_executor_directory(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 100) / ("e" * 100) / "blockmgr-0f3c"
    deep.mkdir(parents=True)
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{deep},{tmp_path}")
    where = service_files.place()
    assert where is not None and len(where.socket_path.encode()) < 100
    assert where.local_dir == str(deep) and where.lock_path.startswith(str(deep))
    assert stat.S_IMODE(os.stat(os.path.dirname(where.socket_path)).st_mode) == 0o700
    other = tmp_path / "blockmgr-other"
    other.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(other))
    assert service_files.place().socket_path != where.socket_path  # type: ignore[union-attr]
    now = service_files.place().socket_path  # type: ignore[union-attr]
    # an upgrade in a running executor
    monkeypatch.setattr(service_files, "WIRE_VERSION", service_framing.WIRE_VERSION + 1)
    assert service_files.place().socket_path != now, "workers of another wire format never reach this service"  # type: ignore[union-attr]
    monkeypatch.delenv("SPARK_LOCAL_DIRS")
    assert service_files.place() is None, "outside an executor there is no service"


def test_a_symlinked_socket_directory_is_refused_not_followed(tmp_path, monkeypatch):
    """Whoever plants ``<tmp>/ehs-<uid>`` as a link would choose where the sockets go: even a link to a
    directory of this user's with mode 0700 is refused (os.stat would have followed it)."""
    import tempfile

    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    os.chmod(target, 0o700)
    (tmp_path / f"ehs-{os.getuid()}").symlink_to(target, target_is_directory=True)
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    local = tmp_path / "blockmgr-l"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(local))
    with pytest.raises(PermissionError, match="not a symbolic link"):
        service_files.place()
    assert list(target.iterdir()) == []
