"""A secret as plain data: the string is kept, and never shows itself.

The floor of ``auth/``: connection strings, SAS tokens, client secrets and the proxy password are
wrapped in it as soon as an option is read, and only :meth:`Secret.reveal` (at the SDK's door) gets the
text back. It travels pickled inside input partitions, and as itself across the receiver service's
socket (:mod:`eventhubs_spark.interprocess.service_protocol`).
"""

from __future__ import annotations


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
