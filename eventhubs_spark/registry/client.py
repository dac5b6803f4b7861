"""The namespace's Schema Registry as Avro and JSON Schema reads and writes use it: schemas by id, ids in groups.

Calls go through the official ``azure-schemaregistry`` client (its REST contract, retries, proxy and TLS
settings), signed in with Microsoft Entra ID: the registry takes no SAS key. A schema's id names one
definition forever, so a writer schema is fetched once per executor and kept: in this process, and in a file
under the executor's own local directory (``SPARK_LOCAL_DIRS``, the one the receiver service keys on), so the
executor's other Python workers (Spark rotates tasks over them) find it without asking the registry again.
No registry call per event or per batch: :data:`FETCHES` counts the calls this process made, for the tests.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass
from typing import Any

from eventhubs_spark.auth.credentials import EntraSettings
from eventhubs_spark.auth.network import NetworkSettings
from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.errors import RegistryError

SCOPE = "https://eventhubs.azure.net/.default"
# Each format's content type as the official encoders send it, "+<schema id>" after it; JSON's read leniently (the
# spacing and case of its parameter), as producers other than the official encoder may write it
CONTENT_TYPES = {"Avro": "avro/binary", "Json": "application/json;serialization=Json"}
_SCHEMA_IDS = {
    "Avro": re.compile(r"^avro/binary\+([0-9A-Za-z-]{1,128})$"),
    "Json": re.compile(r"^application/json;\s*serialization=json\+([0-9A-Za-z-]{1,128})$", re.IGNORECASE),
}
FETCHES: dict[str, int] = {"schemas": 0, "ids": 0}  # registry calls made by this process


@dataclass(frozen=True)
class Registry:
    """Where the registry is and how to sign in: plain data that travels to executors inside the reader."""

    namespace: str  # NAMESPACE.servicebus.windows.net (host[:port] for the emulator)
    entra: EntraSettings
    network: NetworkSettings
    options: str = "eventhubs.avro"  # whose options these are (eventhubs.avro or eventhubs.json): errors name them

    @classmethod
    def of(cls, namespace: str, settings: ConnectionSettings, options: str = "eventhubs.avro") -> Registry:
        """The registry of ``namespace`` reached as the hub is (proxy, CA bundle), signed in with the options'
        Entra identity: the registry takes no SAS key, whatever signs in to the hub."""
        return cls(namespace, settings.entra or EntraSettings(), settings.network, options)

    def client(self) -> Any:
        """This process's registry client for these settings (built once: it holds an HTTP session)."""
        with _LOCK:
            client = _CLIENTS.get(self)
            if client is None:
                try:
                    from azure.schemaregistry import SchemaRegistryClient
                except ImportError:
                    extra = "avro" if self.options == "eventhubs.avro" else "registry"
                    raise RegistryError(
                        f"{self.options}.schemaRegistry needs the Schema Registry client: pip install "
                        f"'eventhubs-spark[{extra}]' (on Databricks: %pip install 'eventhubs-spark[{extra}]')",
                        retriable=False,
                    ) from None
                kwargs: dict[str, Any] = {}
                if self.network.ca_file:
                    kwargs["connection_verify"] = self.network.ca_file
                if self.network.proxy is not None:
                    url = self.network.proxy.url()
                    kwargs["proxies"] = {"https": url, "http": url}
                client = _CLIENTS[self] = SchemaRegistryClient(
                    self.namespace, self.entra.credential(self.network), **kwargs
                )
            return client

    def schema(self, schema_id: str, *, context: str = "") -> str:
        """The definition of schema ``schema_id``: from this process, else the executor's file, else the registry."""
        key = (self.namespace, schema_id)
        found = _SCHEMAS.get(key)
        if found is not None:
            return found
        path = _cache_path(self.namespace, schema_id)
        if path is not None:
            with contextlib.suppress(OSError):
                with open(path, encoding="utf-8") as f:
                    found = f.read()
                _SCHEMAS[key] = found
                return found
        found = self._fetch(schema_id, context)
        _SCHEMAS[key] = found
        if path is not None:
            with contextlib.suppress(OSError):  # a cache: when it cannot be written, the next worker asks again
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
                temporary = f"{path}.{os.getpid()}.{threading.get_ident()}"
                with open(temporary, "w", encoding="utf-8") as f:
                    f.write(found)
                os.replace(temporary, path)
        return found

    def _fetch(self, schema_id: str, context: str) -> str:
        from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ResourceNotFoundError

        where = f"the Schema Registry of {self.namespace}"
        try:
            FETCHES["schemas"] += 1
            schema = self.client().get_schema(schema_id)
        except ResourceNotFoundError:
            raise RegistryError(f"schema id {schema_id} is not in {where}{context}: the events name a schema the "
                                "registry does not have (another namespace's registry, or a deleted group?). Set "
                                f"{self.options}.schemaRegistry to the namespace the producers registered with",
                                retriable=False) from None  # fmt: skip
        except ClientAuthenticationError as exc:
            raise RegistryError(f"{where} refused the sign-in ({_short(exc)}): the registry takes Microsoft Entra ID "
                                "only, with the Schema Registry Reader role (eventhubs.auth / eventhubs.entra.*)",
                                retriable=False) from None  # fmt: skip
        except HttpResponseError as exc:
            status = getattr(exc, "status_code", None)
            if status in (401, 403):
                raise RegistryError(f"{where} refused the request (HTTP {status}): the identity needs the Schema "
                                    "Registry Reader role on the namespace", retriable=False) from None  # fmt: skip
            raise RegistryError(f"{where} answered HTTP {status} for schema id {schema_id}: {_short(exc)}") from None
        except RegistryError:
            raise
        except Exception as exc:  # ServiceRequestError and the like: nothing answered
            raise RegistryError(f"{where} could not be reached ({type(exc).__name__}: {_short(exc)}): check "
                                f"{self.options}.schemaRegistry and the network (proxy, firewall, private endpoint)",
                                retriable=True) from None  # fmt: skip
        return str(schema.definition)

    def register(self, group: str, name: str, definition: str, format: str = "Avro") -> str:
        """The id of ``definition`` (``format``: Avro or Json) in ``group`` under ``name``, registered if it is not
        there yet."""
        from azure.core.exceptions import HttpResponseError

        where = f"the Schema Registry of {self.namespace}"
        try:
            FETCHES["ids"] += 1
            return str(self.client().register_schema(group, name, definition, format).id)
        except HttpResponseError as exc:
            status = getattr(exc, "status_code", None)
            hint = {
                401: "the registry takes Microsoft Entra ID only (eventhubs.auth / eventhubs.entra.*)",
                403: "the identity needs the Schema Registry Contributor role on the namespace to register schemas",
                404: f"schema group {group!r} does not exist: create it in the namespace ({self.options}.schemaGroup)",
                415: f"schema group {group!r} is not a group of {format} schemas ({self.options}.schemaGroup)",
            }.get(status or 0, _short(exc))
            raise RegistryError(f"{where} did not register schema {name!r} in group {group!r} (HTTP {status}): "
                                f"{hint}", retriable=False) from None  # fmt: skip
        except RegistryError:
            raise
        except Exception as exc:
            raise RegistryError(f"{where} could not be reached ({type(exc).__name__}: {_short(exc)}): check "
                                f"{self.options}.schemaRegistry and the network", retriable=True) from None  # fmt: skip


def content_type(format: str, schema_id: str) -> str:
    """The content type of a body of ``format`` (Avro or Json) written with schema ``schema_id``."""
    return f"{CONTENT_TYPES[format]}+{schema_id}"


def schema_id(content_type: str | None, format: str = "Avro") -> str | None:
    """The schema id a ``format`` content type names (``avro/binary+<id>``,
    ``application/json;serialization=Json+<id>``: the official encoders'), else None."""
    match = _SCHEMA_IDS[format].match(content_type) if content_type else None
    return match.group(1) if match else None


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "message", None) or exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:300]


def _cache_path(namespace: str, schema_id: str) -> str | None:
    """Where this executor keeps schema ``schema_id`` (None outside an executor): its first local directory."""
    local = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0].strip()
    if not local or not os.path.isdir(local):
        return None
    space = hashlib.sha256(json.dumps(namespace).encode()).hexdigest()[:16]
    return os.path.join(local, "eventhubs-schemas", space, f"{schema_id}.schema")


_LOCK = threading.Lock()
_CLIENTS: dict[Registry, Any] = {}
_SCHEMAS: dict[tuple[str, str], str] = {}
