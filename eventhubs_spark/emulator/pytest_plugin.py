"""The old import path of :mod:`eventhubs_emulator.pytest_plugin` (the same module object), kept for one release."""

import sys

import eventhubs_emulator.pytest_plugin

sys.modules[__name__] = eventhubs_emulator.pytest_plugin
