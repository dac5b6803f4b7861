"""The old import path of the emulator, now the package :mod:`eventhubs_emulator` (kept for one release).

``import eventhubs_spark.emulator`` and its submodules (``.amqp``, ``.server``, ``.pytest_plugin``...)
are the same module objects as ``eventhubs_emulator``'s, and ``python -m eventhubs_spark.emulator``
still runs it. New code imports :mod:`eventhubs_emulator`.
"""

from __future__ import annotations

import warnings

from eventhubs_emulator import *  # noqa: F403
from eventhubs_emulator import __all__ as __all__

warnings.warn(
    "eventhubs_spark.emulator is now the package eventhubs_emulator; the old name goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
