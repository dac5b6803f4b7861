"""The blob checkpoint store, on azure-storage-blob, in the layout every Event Hubs SDK shares.

Zero-byte block blobs ``<namespace>/<hub>/<consumer group>/{checkpoint,ownership}/<partition>``
(lower-cased), everything in metadata: ``sequencenumber`` and ``offset`` for checkpoints, ``ownerid``
for ownership. Reads tolerate what other SDKs write (``offset=""``, ``"no offset"``, camel-case keys);
writes put integers as decimal strings. Claims are conditional: ``If-Match`` on the listed etag, or
Put Blob with ``If-None-Match: *`` for a partition never owned (Set Metadata with ``If-None-Match``
is not enforced by the service, so two claimers could both win). Partitions are written
concurrently.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from eventhubs_spark.auth.storage import STORAGE_CLIENT_DEFAULTS, blob_location
from eventhubs_spark.checkpoints import Checkpoint, CheckpointStore, Ownership, blob_prefix

__all__ = ["BlobCheckpointStore", "BlobFolder", "blob_location", "describe_store_error"]

_LOG = logging.getLogger(__name__)
_WORKERS = 16


def _meta(metadata: dict[str, str] | None, key: str) -> str | None:
    """Case-insensitive metadata lookup (old SDKs wrote ``OwnerId``, ``SequenceNumber``, ``Offset``)."""
    for k, v in (metadata or {}).items():
        if k.lower() == key:
            return v
    return None


def _offset(value: str | None) -> str | None:
    if value is None or value == "" or value.lower() in ("no offset", "none"):
        return None
    return value


def _seconds(when: Any) -> float | None:
    if isinstance(when, dt.datetime):
        return when.timestamp()
    return None


_CLIENT_DEFAULTS = STORAGE_CLIENT_DEFAULTS


class BlobCheckpointStore(CheckpointStore):
    """Checkpoints and ownership in one blob container (one container per consumer group is usual)."""

    def __init__(self, container_client: Any) -> None:
        self._container = container_client

    @classmethod
    def from_connection_string(cls, connection_string: str, container: str, **kwargs: Any) -> BlobCheckpointStore:
        from azure.storage.blob import ContainerClient

        return cls(
            ContainerClient.from_connection_string(connection_string, container, **{**_CLIENT_DEFAULTS, **kwargs})
        )

    @classmethod
    def from_account_url(cls, account_url: str, container: str, credential: Any, **kwargs: Any) -> BlobCheckpointStore:
        from azure.storage.blob import ContainerClient

        return cls(ContainerClient(account_url, container, credential=credential, **{**_CLIENT_DEFAULTS, **kwargs}))

    def ensure_container(self) -> None:
        from azure.core.exceptions import ResourceExistsError

        with contextlib.suppress(ResourceExistsError):
            self._container.create_container()

    # -- ownership --
    def list_ownership(self, namespace: str, hub: str, consumer_group: str) -> list[Ownership]:
        prefix = blob_prefix(namespace, hub, consumer_group, "ownership")
        out = []
        for blob in self._container.list_blobs(name_starts_with=prefix, include=["metadata"]):
            out.append(
                Ownership(
                    fully_qualified_namespace=namespace,
                    eventhub_name=hub,
                    consumer_group=consumer_group,
                    partition_id=blob.name[len(prefix) :],
                    owner_id=_meta(blob.metadata, "ownerid") or "",
                    last_modified_time=_seconds(blob.last_modified),
                    etag=blob.etag,
                )
            )
        return out

    def claim_ownership(self, ownerships: Iterable[Ownership]) -> list[Ownership]:
        items = list(ownerships)
        if not items:
            return []
        with ThreadPoolExecutor(max_workers=min(_WORKERS, len(items))) as pool:
            results = list(pool.map(self._claim_one, items))
        return [r for r in results if r is not None]

    def _claim_one(self, o: Ownership) -> Ownership | None:
        from azure.core import MatchConditions
        from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceModifiedError

        name = blob_prefix(o.fully_qualified_namespace, o.eventhub_name, o.consumer_group, "ownership") + o.partition_id
        blob = self._container.get_blob_client(name)
        metadata = {"ownerid": o.owner_id}
        try:
            if o.etag:
                props = blob.set_blob_metadata(metadata, etag=o.etag, match_condition=MatchConditions.IfNotModified)
            else:
                props = blob.upload_blob(b"", metadata=metadata, overwrite=False)
        except (ResourceModifiedError, ResourceExistsError):
            _LOG.info("claim of partition %s for %s lost to another owner", o.partition_id, o.owner_id)
            return None
        except HttpResponseError as exc:
            if exc.status_code in (409, 412):
                return None
            raise
        return Ownership(
            fully_qualified_namespace=o.fully_qualified_namespace,
            eventhub_name=o.eventhub_name,
            consumer_group=o.consumer_group,
            partition_id=o.partition_id,
            owner_id=o.owner_id,
            last_modified_time=_seconds(props.get("last_modified")),
            etag=props.get("etag"),
        )

    # -- checkpoints --
    def list_checkpoints(self, namespace: str, hub: str, consumer_group: str) -> list[Checkpoint]:
        prefix = blob_prefix(namespace, hub, consumer_group, "checkpoint")
        out = []
        for blob in self._container.list_blobs(name_starts_with=prefix, include=["metadata"]):
            seq = _meta(blob.metadata, "sequencenumber")
            out.append(
                Checkpoint(
                    fully_qualified_namespace=namespace,
                    eventhub_name=hub,
                    consumer_group=consumer_group,
                    partition_id=blob.name[len(prefix) :],
                    sequence_number=int(seq) if seq not in (None, "") else None,
                    offset=_offset(_meta(blob.metadata, "offset")),
                    released_by=_meta(blob.metadata, "releasedby") or None,
                    last_modified_time=_seconds(blob.last_modified),
                )
            )
        return out

    def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        c = checkpoint
        name = (
            blob_prefix(c.fully_qualified_namespace, c.eventhub_name, c.consumer_group, "checkpoint") + c.partition_id
        )
        metadata = {
            "sequencenumber": "" if c.sequence_number is None else str(int(c.sequence_number)),
            "offset": "" if c.offset is None else str(c.offset),
        }
        if c.released_by:
            metadata["releasedby"] = c.released_by
        blob = self._container.get_blob_client(name)
        try:
            blob.set_blob_metadata(metadata)
        except ResourceNotFoundError:
            blob.upload_blob(b"", metadata=metadata, overwrite=True)

    def update_checkpoints(self, checkpoints: Iterable[Checkpoint]) -> None:
        items = list(checkpoints)
        if not items:
            return
        with ThreadPoolExecutor(max_workers=min(_WORKERS, len(items))) as pool:
            list(pool.map(self.update_checkpoint, items))


class BlobFolder:
    """A checkpoint location in Azure Storage, read blob by blob (``lag.Folder``): Spark keeps a checkpoint's
    files as blobs named by their paths, on ADLS Gen2 (``abfss://``) as on plain blob storage."""

    def __init__(self, container: Any, prefix: str, where: str) -> None:
        self.container = container
        self.prefix = prefix.strip("/")
        self.where = where

    @classmethod
    def from_connection_string(cls, connection_string: str, container: str, prefix: str, where: str) -> BlobFolder:
        from azure.storage.blob import ContainerClient

        client = ContainerClient.from_connection_string(connection_string, container, **_CLIENT_DEFAULTS)
        return cls(client, prefix, where)

    def _name(self, path: str) -> str:
        return "/".join(p for p in (self.prefix, path.strip("/")) if p)

    def names(self, sub: str) -> list[str]:
        from azure.core.exceptions import ResourceNotFoundError

        folder = self._name(sub)
        start = f"{folder}/" if folder else ""
        try:
            return [b.name[len(start) :] for b in self.container.walk_blobs(name_starts_with=start, delimiter="/")
                    if not b.name.endswith("/")]  # fmt: skip
        except ResourceNotFoundError:
            return []

    def folders(self, sub: str) -> list[str]:
        from azure.core.exceptions import ResourceNotFoundError

        folder = self._name(sub)
        start = f"{folder}/" if folder else ""
        try:  # a prefix walked with a delimiter comes back as a name ending in '/'
            return [b.name[len(start) : -1] for b in self.container.walk_blobs(name_starts_with=start, delimiter="/")
                    if b.name.endswith("/")]  # fmt: skip
        except ResourceNotFoundError:
            return []

    def text(self, path: str) -> str:
        from azure.core.exceptions import AzureError

        try:
            return bytes(self.container.download_blob(self._name(path)).readall()).decode("utf-8")
        except AzureError as exc:
            raise OSError(f"{self.where}: {path}: {exc}") from exc

    def modified(self, path: str) -> dt.datetime:
        when = self.container.get_blob_client(self._name(path)).get_blob_properties().last_modified
        return when if isinstance(when, dt.datetime) else dt.datetime.now(dt.timezone.utc)


def describe_store_error(exc: BaseException, container: str | None = None) -> str:
    """A failure of the blob service in one line, with its fix where it is known: the storage SDK's own message
    runs to a dozen lines (request id, time, the XML body), printed every trigger by a mirror that retries.

    - Azurite refusing the storage SDK's API version (Azurite older than the SDK): start it with
      ``--skipApiVersionCheck`` (``./dev azurite`` does).
    - A container that does not exist: create it, or check its name.
    """
    text = str(exc)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    code = str(getattr(exc, "error_code", "") or "")
    status = getattr(exc, "status_code", None)
    if "not supported by Azurite" in text:
        version = first.split("The API version ", 1)[-1].split(" ", 1)[0] if "The API version " in first else "?"
        return (f"Azurite refuses the storage SDK's API version {version}: start it with --skipApiVersionCheck "
                "(./dev azurite does), or upgrade Azurite")  # fmt: skip
    if "ContainerNotFound" in code or "ContainerNotFound" in text:
        name = f" {container!r}" if container else ""
        return (f"the container{name} does not exist in that storage account: create it (the portal, or "
                f"az storage container create --name {container or 'NAME'}), or check its name")  # fmt: skip
    prefix = f"{type(exc).__name__}" + (f" {status}" if status else "")
    return f"{prefix}: {first}"
