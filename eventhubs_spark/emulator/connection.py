"""The old import path of :mod:`eventhubs_emulator.connection` (the same module object), kept for one release."""

import sys

import eventhubs_emulator.connection

sys.modules[__name__] = eventhubs_emulator.connection
