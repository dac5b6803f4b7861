"""Every Python process a test starts (its apps, Spark's Python workers, receiver services, an emulator) dumps its
threads' stacks on SIGUSR1 into a file of its own, so a test that hangs says where, in each process it started.

Loaded by Python at start-up because ``tests/conftest.py`` puts this folder first on ``PYTHONPATH`` (Spark passes it
on to its Python workers) and names a folder in ``EVENTHUBS_TESTS_DUMPS``; the test run's deadline hook signals every
process that registered there (``tests/conftest.py``, ``_dump_everything``). Elsewhere it does nothing.
"""

from __future__ import annotations

import faulthandler
import os
import signal

_FOLDER = os.environ.get("EVENTHUBS_TESTS_DUMPS")


def _register() -> None:
    """This process's dump file, ``<folder>/<pid>.txt`` (its command line first), written on SIGUSR1."""
    try:
        path = os.path.join(_FOLDER or "", f"{os.getpid()}.txt")
        file = open(path, "w", encoding="utf-8")  # noqa: SIM115 (kept open: faulthandler writes to it at any time)
        with open(f"/proc/{os.getpid()}/cmdline", "rb") as cmdline:
            file.write(_command_line(cmdline.read()) + "\n")
        file.flush()
        faulthandler.register(signal.SIGUSR1, file=file, all_threads=True)
        _FILES.append(file)
    except Exception:  # never in the way of the process itself
        pass


def _command_line(raw: bytes) -> str:
    """A process's command line on one line (as the deadline hook compares it before it signals the process)."""
    return raw.replace(b"\0", b" ").replace(b"\n", b" ").decode("utf-8", "replace")[:500]


_FILES: list[object] = []
if _FOLDER and os.path.isdir(_FOLDER) and hasattr(signal, "SIGUSR1"):
    _register()
    # a forked child (Spark's Python workers fork from its daemon) registers a file of its own
    os.register_at_fork(after_in_child=_register)
