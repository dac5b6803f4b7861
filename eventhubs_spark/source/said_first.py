"""The connector's errors raised to Spark message first, from the entry points Spark calls (see errors.said_first).

Spark calls a source from pyspark's own modules (the stream runner, the planner, the task worker); a call from
anywhere else (tests, the CLI) gets the error as itself, without the frames behind it.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, TypeVar

from eventhubs_spark.errors import EventHubsError, said_first

_LOG = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


def called_by_spark(frame: FrameType | None) -> bool:
    """Whether ``frame`` (the caller's) is pyspark's and Spark will show its whole traceback: pyspark's own
    processes that simplify a traceback (SPARK_SIMPLIFIED_TRACEBACK: the task and planning workers) drop a chained
    cause and keep only our frames, so there the error goes as itself (its message three lines below Spark's)."""
    if frame is None or os.environ.get("SPARK_SIMPLIFIED_TRACEBACK"):
        return False
    path = frame.f_code.co_filename.replace(os.sep, "/")
    return "/pyspark/" in path  # the stream runner runs as __main__: its module's name says nothing


def spark_facing(method: F) -> F:
    """An entry point Spark calls (``initialOffset``, ``latestOffset``, ``partitions``...): the connector's errors
    leave it message first (the chain behind each goes to the log at debug level)."""

    @functools.wraps(method)
    def entry(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except EventHubsError as exc:
            _LOG.debug("eventhubs: %s fails: %s", method.__name__, exc, exc_info=True)
            error = said_first(exc, called_by_spark(sys._getframe(1)))
            raise error from error.__cause__

    return entry  # type: ignore[return-value]


def batches_said_first(batches: Iterator[Any]) -> Iterator[Any]:
    """A task's ``batches``, the connector's errors leaving them message first (the whole chain goes to the
    executor's log): Spark puts a task's Python traceback, then the error's message, into the exception a user
    sees, so a deep traceback buried our one-line message at line 48 of 56 of a stream's failure. Anything else (a
    bug) keeps its whole traceback."""
    try:
        yield from batches
    except EventHubsError as exc:
        _LOG.info("eventhubs: the task fails: %s", exc, exc_info=True)
        error = said_first(exc, called_by_spark(sys._getframe(1)))
        raise error from error.__cause__
