"""Where Capture's files are: a local folder or a blob container, listed by prefix and read whole or in part.

A local folder is a path or ``file:``; a container is ``abfss://``, ``wasbs://``, ``https://`` or Azurite's
path-style ``http://``.

Storage sign-in is the checkpoint store's: a storage connection string (``eventhubs.capture.connectionString``),
a SAS token (``eventhubs.capture.sasToken``), else the hub's Microsoft Entra identity (its ``eventhubs.entra.*``
or service credential, else ``DefaultAzureCredential``). The driver lists and reads files' heads to plan; each
executor opens its own store (cached per process) to read the files its tasks were given.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from eventhubs_spark.auth.credentials import EntraSettings
from eventhubs_spark.auth.secret import Secret
from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.auth.storage import STORAGE_CLIENT_DEFAULTS, blob_location, local_path
from eventhubs_spark.capture.names import DEFAULT_FORMAT
from eventhubs_spark.errors import OptionError

EXAMPLE_LOCATION = "abfss://capture@ACCOUNT.dfs.core.windows.net"
_EXAMPLE = f".option('eventhubs.capture.location', '{EXAMPLE_LOCATION}')"


@dataclass(frozen=True)
class CaptureSource:
    """Where a hub's Capture writes and how its files are named: plain data, carried to executors in tasks.
    ``namespace``: the value of ``{Namespace}`` in the names (the namespace's name, ``ns`` of
    ``ns.servicebus.windows.net``); ``late_file_wait``: how long a reader waits for a file that fills a gap
    (back-filled after a storage outage) before it calls the gap."""

    location: str
    name_format: str = DEFAULT_FORMAT
    namespace: str = ""
    hub: str = ""
    connection_string: Secret | None = None
    sas_token: Secret | None = None
    late_file_wait: float = 60.0


class CaptureStore(Protocol):
    """What reading Capture needs of a storage: names under a prefix, a file's bytes (or ``length`` of them from
    ``offset``: its head, or the blocks of a range), and its size (a large file is mapped a window at a time,
    never held whole)."""

    where: str

    def names(self, prefix: str) -> list[str]: ...

    def read(self, name: str, length: int | None = None, offset: int = 0) -> bytes: ...

    def size(self, name: str) -> int: ...


class LocalStore:
    """Capture files in a local folder (as the emulator writes them, or a mounted container)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.where = root

    def names(self, prefix: str) -> list[str]:
        folder = os.path.join(self.root, *prefix.split("/")[:-1])
        out: list[str] = []
        for directory, _dirs, files in os.walk(folder):
            relative = os.path.relpath(directory, self.root).replace(os.sep, "/")
            for file in files:
                name = file if relative == "." else f"{relative}/{file}"
                if name.startswith(prefix) and name.endswith(".avro"):
                    out.append(name)
        return out

    def read(self, name: str, length: int | None = None, offset: int = 0) -> bytes:
        with open(os.path.join(self.root, *name.split("/")), "rb") as f:
            f.seek(offset)
            return f.read() if length is None else f.read(length)

    def size(self, name: str) -> int:
        return os.path.getsize(os.path.join(self.root, *name.split("/")))


class BlobStore:
    """Capture files in a blob container (under ``path``, where the location names one)."""

    def __init__(self, container: Any, path: str, where: str) -> None:
        self.container = container
        self.path = path.strip("/")
        self.where = where

    def _full(self, name: str) -> str:
        return f"{self.path}/{name}" if self.path else name

    def names(self, prefix: str) -> list[str]:
        cut = len(self.path) + 1 if self.path else 0
        return [n[cut:] for n in self.container.list_blob_names(name_starts_with=self._full(prefix))
                if n.endswith(".avro")]  # fmt: skip

    def read(self, name: str, length: int | None = None, offset: int = 0) -> bytes:
        from azure.core.exceptions import HttpResponseError

        try:  # a whole file in two ranges at once: about twice as fast as one stream (measured on Azurite)
            concurrency = 2 if length is None or length > (4 << 20) else 1
            blob = self.container.download_blob(self._full(name), offset=offset, length=length,
                                                max_concurrency=concurrency)  # fmt: skip
        except HttpResponseError as exc:  # a head past a short blob's end: the whole blob is the answer
            if length is None or offset or getattr(exc, "status_code", None) != 416:
                raise
            blob = self.container.download_blob(self._full(name))
        return bytes(blob.readall())

    def size(self, name: str) -> int:
        return int(self.container.get_blob_client(self._full(name)).get_blob_properties().size)


def local_root(location: str) -> str | None:
    """The folder a local location names (a path, a ``file:`` URI, ``dbfs:/`` through its mount); None for one in
    Azure Storage."""
    try:
        return local_path(location)
    except ValueError:
        return None


def check_location(location: str, option: str = "eventhubs.capture.location") -> str:
    """``location`` if it names a folder or a container this reader can list; else an OptionError with an
    example."""
    if local_root(location) is not None:
        return location
    try:
        blob_location(location)
    except ValueError:
        raise OptionError(f"{option} {location!r}: a local path, file:, or a container in Azure Storage "
                          f"(abfss://, wasbs://, https://), e.g. {_EXAMPLE}", _EXAMPLE) from None  # fmt: skip
    return location


def account_url(location: str) -> str:
    """The blob endpoint of an Azure Storage location (``abfss://c@acct.dfs.core.windows.net`` →
    ``https://acct.blob.core.windows.net``; path-style ``http://host:port/acct/c`` → ``http://host:port/acct``)."""
    parts = urlsplit(location)
    host = parts.hostname or ""
    if parts.scheme in ("abfss", "abfs", "wasbs", "wasb"):
        return f"https://{host.replace('.dfs.', '.blob.')}"
    path_style = host in ("localhost", "127.0.0.1", "::1") or host.replace(".", "").isdigit()
    base = f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"
    if path_style:
        return f"{base}/{next(p for p in parts.path.split('/') if p)}"
    return base


_STORES: dict[tuple[Any, ...], CaptureStore] = {}
_STORES_LOCK = threading.Lock()


def open_store(source: CaptureSource, settings: ConnectionSettings) -> CaptureStore:
    """The store of ``source`` in this process (one per location and sign-in, shared by its tasks)."""
    root = local_root(source.location)
    if root is not None:
        return LocalStore(root)
    key = (source.location, source.connection_string, source.sas_token, settings.entra, settings.network)
    with _STORES_LOCK:
        store = _STORES.get(key)
        if store is None:
            store = _STORES[key] = _blob_store(source, settings)
        return store


def _blob_store(source: CaptureSource, settings: ConnectionSettings) -> BlobStore:
    from azure.storage.blob import ContainerClient

    container, path = blob_location(source.location)
    kwargs = {**STORAGE_CLIENT_DEFAULTS, **settings.network.http_kwargs()}
    if source.connection_string is not None:
        client = ContainerClient.from_connection_string(source.connection_string.reveal(), container, **kwargs)
    else:
        sas = source.sas_token
        credential = sas.reveal() if sas else (settings.entra or EntraSettings()).credential(settings.network)
        client = ContainerClient(account_url(source.location), container, credential=credential, **kwargs)
    return BlobStore(client, path, source.location)


@dataclass(frozen=True)
class CaptureRead:
    """What a task reads from Capture for its range: the files the driver found for it (name and first sequence
    number, None for an empty file), in sequence order, and where they are."""

    source: CaptureSource
    files: tuple[tuple[str, int | None], ...]
