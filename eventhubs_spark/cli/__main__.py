"""``python -m eventhubs_spark.cli``: the ``eventhubs-spark`` command (the demo starts its child this way)."""

import sys

from eventhubs_spark.cli.main import main

sys.exit(main())
