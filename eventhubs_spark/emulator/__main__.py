"""``python -m eventhubs_spark.emulator``, the old name of ``python -m eventhubs_emulator``."""

import sys

from eventhubs_emulator.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
