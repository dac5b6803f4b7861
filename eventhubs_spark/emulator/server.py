"""The old import path of :mod:`eventhubs_emulator.server` (the same module object), kept for one release."""

import sys

import eventhubs_emulator.server

sys.modules[__name__] = eventhubs_emulator.server
