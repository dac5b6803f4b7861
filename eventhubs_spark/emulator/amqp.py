"""The old import path of :mod:`eventhubs_emulator.amqp` (the same module object), kept for one release."""

import sys

import eventhubs_emulator.amqp

sys.modules[__name__] = eventhubs_emulator.amqp
