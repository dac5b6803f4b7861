"""Connection settings parsed from a connection string, with the secret kept out of every repr.

These travel to executors inside input partitions (plain, picklable data): each process builds its
own clients from them, never a pickled client or credential.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

from ..errors import OptionError

CONNECTION_EXAMPLE = (
    "Endpoint=sb://NAMESPACE.servicebus.windows.net/;SharedAccessKeyName=NAME;SharedAccessKey=KEY;EntityPath=HUB"
)


class Secret:
    """A string that never shows itself in repr, str, logs or Spark plans."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:
        return (Secret, (self._value,))


@dataclass(frozen=True)
class ConnectionSettings:
    """Where the hub is and how to authenticate; ``namespace`` is host[:port] as the SDKs derive it."""

    namespace: str
    hub: str
    connection_string: Secret

    @property
    def fully_qualified_namespace(self) -> str:
        return self.namespace

    def pool_key(self) -> tuple[str, str, int]:
        """Identifies the credentials without holding them (a hash), for pool keys."""
        return (self.namespace, self.hub, hash(self.connection_string))


def parse_connection_string(text: str, option: str = "eventhubs.connectionString") -> ConnectionSettings:
    """Validate a connection string; errors name the missing part and never echo the string."""
    parts: dict[str, str] = {}
    for piece in text.strip().split(";"):
        if not piece.strip():
            continue
        key, sep, value = piece.partition("=")
        if not sep:
            raise OptionError(
                f"{option}: every part must be Key=Value (the string is not shown). Example: {CONNECTION_EXAMPLE}"
            )
        parts[key.strip().lower()] = value.strip()
    endpoint = parts.get("endpoint")
    if not endpoint:
        raise OptionError(f"{option}: Endpoint=sb://... is missing. Example: {CONNECTION_EXAMPLE}")
    parsed = urlparse(endpoint if "://" in endpoint else "sb://" + endpoint)
    if not parsed.hostname:
        raise OptionError(f"{option}: Endpoint has no host. Example: {CONNECTION_EXAMPLE}")
    namespace = parsed.hostname + (f":{parsed.port}" if parsed.port else "")
    hub = parts.get("entitypath", "")
    if not hub:
        raise OptionError(f"{option}: EntityPath=<event hub name> is missing. Example: {CONNECTION_EXAMPLE}")
    has_key = "sharedaccesskeyname" in parts and "sharedaccesskey" in parts
    if not has_key and "sharedaccesssignature" not in parts:
        raise OptionError(
            f"{option}: needs SharedAccessKeyName and SharedAccessKey, or SharedAccessSignature. "
            f"Example: {CONNECTION_EXAMPLE}"
        )
    return ConnectionSettings(namespace=namespace, hub=hub, connection_string=Secret(text.strip()))
