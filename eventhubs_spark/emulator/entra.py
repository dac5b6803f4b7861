"""The old import path of :mod:`eventhubs_emulator.entra` (the same module object), kept for one release."""

import sys

import eventhubs_emulator.entra

sys.modules[__name__] = eventhubs_emulator.entra
