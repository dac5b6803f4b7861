"""Where things are in Azure Storage: a location's container and path, and the storage clients' retry settings.

Plain data, shared by the checkpoint store, the lag files' reader and Capture's files."""

from __future__ import annotations

from typing import Any

# The storage SDK's default retries wait 15 s, 18 s and 24 s: a minute per call while the service is
# down, and the connector calls the store while it plans a batch. Short retries keep the query going
# (a failed mirror write is caught up at the next commit); an ownership cycle simply runs again.
STORAGE_CLIENT_DEFAULTS: dict[str, Any] = {
    "retry_total": 2,
    "initial_backoff": 1,
    "increment_base": 2,
    "random_jitter_range": 1,
    "connection_timeout": 5,
    "read_timeout": 20,
}


def blob_location(location: str) -> tuple[str, str]:
    """The container and the path inside it of a location in Azure Storage: ``abfss://container@account.dfs.
    core.windows.net/path``, ``wasbs://container@account.blob.core.windows.net/path``, ``https://account.blob.
    core.windows.net/container/path``, or a path-style one (Azurite: ``http://127.0.0.1:10000/account/container/
    path``). Anything else raises ValueError with an example."""
    from urllib.parse import urlsplit

    example = "abfss://checkpoints@ACCOUNT.dfs.core.windows.net/orders"
    parts = urlsplit(location)
    path = [p for p in parts.path.split("/") if p]
    if parts.scheme in ("abfss", "abfs", "wasbs", "wasb") and parts.username and parts.hostname:
        return parts.username, "/".join(path)
    if parts.scheme in ("https", "http") and parts.hostname:
        host = parts.hostname
        path_style = host in ("localhost", "127.0.0.1", "::1") or host.replace(".", "").isdigit()
        if path_style:
            path = path[1:]  # the account comes first
        if path:
            return path[0], "/".join(path[1:])
    raise ValueError(f"{location!r} is not a checkpoint location this command can read: a local path, file:, "
                     f"dbfs:/, or one in Azure Storage, e.g. {example}")  # fmt: skip


def local_path(location: str) -> str:
    """A location as a path this process can open: a local path or ``file:`` URI as it is, and Databricks'
    ``dbfs:/x`` as its FUSE mount ``/dbfs/x``. Others (``abfss://``, ``s3://``) raise ValueError: a Python process
    has no Hadoop file system to reach them (the lag files' and Capture's, in Azure Storage, go through the blob
    API instead)."""
    if location.startswith("file://"):
        return location[len("file://") :]
    if location.startswith("file:"):
        return location[len("file:") :]
    if location.startswith("dbfs:/"):
        return "/dbfs/" + location[len("dbfs:/") :].lstrip("/")
    if "://" in location:
        raise ValueError(f"{location!r} is not a local path: the driver's Python process reaches local paths, "
                         "file: URIs and dbfs:/ (through /dbfs) only")  # fmt: skip
    return location
