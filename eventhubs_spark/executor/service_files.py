"""Where an executor's receiver service lives: its key, its socket, its lock and log files.

Workers of one executor share ``SPARK_LOCAL_DIRS`` (the executor's block manager directories). The
first of them keys the service: a lock file there serializes its start, and the Unix socket lives in a
private directory of the user's (``<tmp>/ehs-<uid>``, mode 0700, not a symbolic link, the socket 0600),
named after a hash of that directory and the wire version (socket paths are limited to about 108 bytes,
and YARN's directories are long).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import socket
import stat
import tempfile

from eventhubs_spark.interprocess.service_framing import WIRE_VERSION


@dataclasses.dataclass(frozen=True)
class Place:
    """Where an executor's service lives."""

    local_dir: str  # the executor's first local directory (the key, and the lock file)
    socket_path: str

    @property
    def lock_path(self) -> str:
        return os.path.join(self.local_dir, "eventhubs-receiver-service.lock")

    @property
    def log_path(self) -> str:
        return os.path.join(self.local_dir, "eventhubs-receiver-service.log")


def place() -> Place | None:
    """This executor's service place, or None outside a Spark executor (no ``SPARK_LOCAL_DIRS``)."""
    dirs = os.environ.get("SPARK_LOCAL_DIRS", "")
    local_dir = dirs.split(",")[0].strip()
    if not local_dir or not os.path.isdir(local_dir):
        return None
    private = private_directory()
    # the wire format's version is part of the name: after an upgrade in a running executor (a notebook's
    # %pip install), new workers start a service of their own instead of talking to the old one
    key = f"{os.path.realpath(local_dir)}\0{WIRE_VERSION}"
    name = hashlib.sha256(key.encode()).hexdigest()[:20]
    return Place(local_dir, os.path.join(private, f"{name}.sock"))


def executor_pid() -> int | None:
    """The executor's JVM: the nearest ``java`` process above this worker (Linux ``/proc``), or None."""
    pid = os.getppid()
    for _ in range(8):
        try:
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        if name == "java":
            return pid
        if parent <= 1:
            return None
        pid = parent
    return None


def jvm_name(pid: int | None) -> str | None:
    """A JVM as services and the driver name it to each other, ``host:pid`` (None when not known)."""
    return f"{socket.gethostname()}:{pid}" if pid is not None else None


def private_directory(parent: str | None = None) -> str:
    """``<tmp>/ehs-<uid>``, made if missing: a real directory (a symbolic link there is refused, not
    followed, since whoever planted it would choose where the sockets go), this user's, mode 0700."""
    private = os.path.join(parent or tempfile.gettempdir(), f"ehs-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(private, mode=0o700)
    info = os.lstat(private)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise PermissionError(f"{private} must be a directory of this user's, not a symbolic link or a file")
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{private} must belong to this user alone (mode 0700)")
    return private
