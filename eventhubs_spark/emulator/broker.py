"""The old import path of :mod:`eventhubs_emulator.broker` (the same module object), kept for one release."""

import sys

import eventhubs_emulator.broker

sys.modules[__name__] = eventhubs_emulator.broker
