"""Logs of distributed that oodsim says better in its own words, left to ``--debug``.

A failed task of oodsim's, a worker start its nanny gave up, a heartbeat that a stopped driver
did not answer: distributed logs each with a traceback, in the middle of the run's status
lines, while the run reports what it means in one line. Each such log is a
:class:`DroppedUnlessDebug` filter, installed once per logger (:func:`install`).
"""

from __future__ import annotations

import logging

from oodsim.environment import read
from oodsim.errors import DEBUG_ENV


class DroppedUnlessDebug(logging.Filter):
    """Drops the records that :meth:`drops` picks, unless ``--debug`` (``$OODSIM_DEBUG``)."""

    def drops(self, record: logging.LogRecord) -> bool:
        raise NotImplementedError

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.drops(record) or bool(read(DEBUG_ENV))


def install(logger_name: str, kind: type[DroppedUnlessDebug]) -> None:
    """A ``kind`` filter on this process's logger ``logger_name``, once."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, kind) for f in logger.filters):
        logger.addFilter(kind())
