"""Code run in a fresh Python process that must not import pandas.

``pa.array()`` and ``pa.scalar()`` (which ``pyarrow.compute`` calls on a Python argument) import pandas on their
first call in a process (0.3-0.6 s); Spark starts fresh Python workers at a query's start and after a minute
idle, so what runs in a task makes its arrays from buffers (``eventhubs_spark.codec.arrays``). A test passes its
code and arguments here and gets what it printed; on a failure, the stack that imported pandas is in the message.
"""

from __future__ import annotations

import os
import subprocess
import sys

# notes each import of pandas with the stack that asked for it (and lets it go on: pyarrow takes an ImportError
# to mean "no pandas here" and carries on, so refusing it would hide the import); checked at the end
_GUARD = """
import sys, traceback
_ASKED = []
class _NoPandas:
    def find_spec(self, name, path=None, target=None):
        if name == "pandas":
            _ASKED.append("".join(traceback.format_stack(limit=16)))
        return None
sys.meta_path.insert(0, _NoPandas())
"""
_CHECK = """
assert not _ASKED and "pandas" not in sys.modules, "pandas was imported:\\n" + "\\n".join(_ASKED)
"""


def without_pandas(code: str, *args: str, show: str = "") -> str:
    """Run ``code`` with ``args`` (``sys.argv[1:]``) in a fresh ``python``; fail if it raised or tried to import
    pandas; then ``show`` (code that prints what the test checks: ``to_pylist`` of a timestamp imports pandas);
    return the standard output."""
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_DIRS"}
    command = [sys.executable, "-c", _GUARD + code + _CHECK + show, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
