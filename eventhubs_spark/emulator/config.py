"""The old import path of :mod:`eventhubs_emulator.config` (the same module object), kept for one release."""

import sys

import eventhubs_emulator.config

sys.modules[__name__] = eventhubs_emulator.config
