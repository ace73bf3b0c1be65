"""Which ``Logger`` is current: the one rlpyt's module functions act on.

``logger_context`` (and ``use_logger``) make a logger current for a ``with``
block and restore the previous one on exit, also after an exception, so nothing
of one run reaches the next run in the same process. Outside of any run the
current logger is a process-wide default that writes text to stdout only. The
current logger is per process, not per thread (forked worker processes inherit
it): run one ``logger_context`` at a time in a process.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from rlframe.utils.logging.run_logger import Logger

# The only module-level state: the loggers made current by ``use_logger``, innermost
# last, above the process-wide default at index 0.
_loggers: list[Logger] = [Logger()]


def current_logger() -> Logger:
    """The logger the module functions act on.

    Inside ``logger_context`` (or ``use_logger``) it is that block's logger;
    outside of any, the process-wide default, which writes to stdout only.
    """
    return _loggers[-1]


@contextlib.contextmanager
def use_logger(run_logger: Logger) -> Iterator[Logger]:
    """Make ``run_logger`` the current logger for the duration of the ``with`` block.

    On exit, also after an exception, the logger that was current on entry is
    current again. The logger's outputs are left open (see ``Logger.close``).

    Args:
        run_logger: the logger to make current.

    Yields:
        ``run_logger``.
    """
    if not isinstance(run_logger, Logger):
        raise TypeError(f"run_logger must be a Logger, got {type(run_logger).__name__}.")
    depth = len(_loggers)
    _loggers.append(run_logger)
    try:
        yield run_logger
    finally:
        # Truncating (rather than popping one) also drops loggers of inner blocks
        # that were entered but never exited, so the entry state is restored exactly.
        if len(_loggers) > depth and _loggers[depth] is run_logger:
            del _loggers[depth:]


def quiet_logger() -> Logger:
    """A new, disabled logger: what ranks and child processes make current, so that
    only the main process of a run writes."""
    quiet = Logger()
    quiet.disable()
    return quiet
