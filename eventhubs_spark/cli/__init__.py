"""The ``eventhubs-spark`` command: ``demo``, ``emulator``, ``send``, ``checkpoints`` and ``lag``.

``demo`` is the README's first command: it starts the embedded emulator, produces sample events and runs a Spark
streaming query on them, showing a live per-partition table of events read, rate and lag. Connection strings can
come from the environment (``EVENTHUBS_CONNECTION_STRING``, ``CHECKPOINT_STORE_CONNECTION_STRING``) so they stay
out of shell history; they are never printed.
"""

from __future__ import annotations

from eventhubs_spark.checkpoints.report import checkpoints_report
from eventhubs_spark.cli.main import main
from eventhubs_spark.lag.report import checkpoint_folder, lag_report

# The reports were importable from here before the package was arranged by folder (the notebooks showed
# ``from eventhubs_spark.cli import lag_report``): they still are.
__all__ = ["checkpoint_folder", "checkpoints_report", "lag_report", "main"]
