"""rlpyt's logger module: ``logger.log``, ``logger.record_tabular``, ``logger.dump_tabular``, ...

Each run logs through its own :class:`Logger` (``run_logger.py``), which
composes text output (``text.py``: prefixes, timestamps, stdout and
``debug.log``), tabular output (``tabular.py``: the pending row, ``progress.csv``
with its schema rewrite, the printed table, TensorBoard scalars) and the
snapshot policy (:mod:`rlframe.utils.snapshot_files`). The functions below keep
rlpyt's names and act on the *current* logger (``current.py``), so every
component logs with ``from rlframe.utils.logging import logger`` and
``logger.log(...)`` without passing a logger object around. A runner reaches the
logger of the run it trains in as ``runner.logger``.

``logger_context`` (``context.py``) makes a fresh ``Logger`` current for the
duration of its ``with`` block and restores the previous one on exit, also
after an exception, so nothing of one run reaches the next run in the same
process. Outside of any run the current logger is a process-wide default that
writes text to stdout only. ``use_logger`` makes any ``Logger`` current for a
block. The current logger is per process, not per thread (forked worker
processes inherit it): run one ``logger_context`` at a time in a process.

Per training iteration the runner typically does::

    logger.record_tabular("Iteration", itr)
    logger.record_tabular_misc_stat("Return", returns)   # ReturnAverage, ReturnStd, ...
    logger.dump_tabular(with_prefix=False)               # table to stdout, row to progress.csv
    logger.save_itr_params(itr, snapshot_dict)           # honours the snapshot mode

Tabular values may be Python numbers, strings, ``None``, numpy scalars or
one-element arrays/tensors (converted with ``.item()``).
"""
from __future__ import annotations

# Modules and helpers this module held before its parts moved out stay importable
# from here (``# noqa: F401``): code written against the single-file logger keeps working.
import contextlib
import csv  # noqa: F401
import datetime  # noqa: F401
import io  # noqa: F401
import math  # noqa: F401
import numbers  # noqa: F401
import os  # noqa: F401
import sys  # noqa: F401
import tempfile  # noqa: F401
import types  # noqa: F401
from typing import IO, Any, Iterator, Mapping  # noqa: F401

import numpy as np  # noqa: F401
import torch  # noqa: F401

from rlframe.utils.checkpoint import write_error  # noqa: F401
from rlframe.utils.files import atomic_write_bytes  # noqa: F401
from rlframe.utils.logging.current import (_loggers, current_logger,  # noqa: F401
                                           quiet_logger, use_logger)
from rlframe.utils.logging.run_logger import Logger
from rlframe.utils.logging.tabular import (SummaryWriterLike, TabularValue,  # noqa: F401
                                           TabularValues, _as_scalar, _csv_cell,
                                           _format_cell, _format_table)
from rlframe.utils.logging.text import (_COLOR_CODES, _colorize, _is_terminal,  # noqa: F401
                                        _open_output)
from rlframe.utils.snapshot_files import SNAPSHOT_MODES
from rlframe.utils.snapshot_files import check_snapshot_mode as _check_snapshot_mode  # noqa: F401


# ----------------------------------------------------------------------------- module front
# rlpyt's module API: each function forwards to the current logger's method of the same name.

def log(s: object, with_prefix: bool = True, with_timestamp: bool = True,
        color: str | None = None) -> None:
    """``Logger.log`` on the current logger: print a line and append it to the text outputs."""
    current_logger().log(s, with_prefix=with_prefix, with_timestamp=with_timestamp,
                         color=color)


def push_prefix(prefix: str) -> None:
    """``Logger.push_prefix`` on the current logger."""
    current_logger().push_prefix(prefix)


def pop_prefix() -> None:
    """``Logger.pop_prefix`` on the current logger."""
    current_logger().pop_prefix()


def prefix(key: str) -> contextlib.AbstractContextManager[None]:
    """``Logger.prefix`` on the current logger: push ``key`` for a ``with`` block."""
    # Bound now, so the pop reaches the same logger even if the current one changes inside.
    return current_logger().prefix(key)


def push_tabular_prefix(key: str) -> None:
    """``Logger.push_tabular_prefix`` on the current logger."""
    current_logger().push_tabular_prefix(key)


def pop_tabular_prefix() -> None:
    """``Logger.pop_tabular_prefix`` on the current logger."""
    current_logger().pop_tabular_prefix()


def tabular_prefix(key: str) -> contextlib.AbstractContextManager[None]:
    """``Logger.tabular_prefix`` on the current logger: push ``key`` for a ``with`` block."""
    return current_logger().tabular_prefix(key)


def add_text_output(file_name: str) -> None:
    """``Logger.add_text_output`` on the current logger."""
    current_logger().add_text_output(file_name)


def remove_text_output(file_name: str) -> None:
    """``Logger.remove_text_output`` on the current logger."""
    current_logger().remove_text_output(file_name)


def add_tabular_output(file_name: str, append: bool = False) -> None:
    """``Logger.add_tabular_output`` on the current logger."""
    current_logger().add_tabular_output(file_name, append=append)


def remove_tabular_output(file_name: str) -> None:
    """``Logger.remove_tabular_output`` on the current logger."""
    current_logger().remove_tabular_output(file_name)


def hold_tabular_output(file_name: str) -> None:
    """``Logger.hold_tabular_output`` on the current logger."""
    current_logger().hold_tabular_output(file_name)


def flush_all() -> None:
    """``Logger.flush_all`` on the current logger."""
    current_logger().flush_all()


def record_tabular(key: str, val: TabularValue) -> None:
    """``Logger.record_tabular`` on the current logger: add ``key: val`` to the pending row."""
    current_logger().record_tabular(key, val)


def record_tabular_misc_stat(key: str, values: TabularValues, placement: str = "back") -> None:
    """``Logger.record_tabular_misc_stat`` on the current logger."""
    current_logger().record_tabular_misc_stat(key, values, placement=placement)


def dump_tabular(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """``Logger.dump_tabular`` on the current logger; returns the row it wrote."""
    return current_logger().dump_tabular(*args, **kwargs)


def set_snapshot_dir(dir_name: str | None) -> None:
    """``Logger.set_snapshot_dir`` on the current logger."""
    current_logger().set_snapshot_dir(dir_name)


def get_resume_snapshot() -> str | None:
    """``Logger.get_resume_snapshot`` of the current logger: the snapshot to resume from."""
    return current_logger().get_resume_snapshot()


def get_snapshot_dir() -> str | None:
    """``Logger.get_snapshot_dir`` on the current logger."""
    return current_logger().get_snapshot_dir()


def set_snapshot_mode(mode: str) -> None:
    """``Logger.set_snapshot_mode`` on the current logger."""
    current_logger().set_snapshot_mode(mode)


def get_snapshot_mode() -> str:
    """``Logger.get_snapshot_mode`` on the current logger."""
    return current_logger().get_snapshot_mode()


def set_snapshot_gap(gap: int) -> None:
    """``Logger.set_snapshot_gap`` on the current logger."""
    current_logger().set_snapshot_gap(gap)


def get_snapshot_gap() -> int:
    """``Logger.get_snapshot_gap`` on the current logger."""
    return current_logger().get_snapshot_gap()


def save_itr_params(itr: int, params: object, final: bool = False) -> list[str]:
    """``Logger.save_itr_params`` on the current logger: snapshot per the snapshot mode."""
    return current_logger().save_itr_params(itr, params, final=final)


def writes_files() -> bool:
    """``Logger.writes_files`` of the current logger: False outside ``logger_context``."""
    return current_logger().writes_files()


def set_iteration(itr: int) -> None:
    """``Logger.set_iteration`` on the current logger."""
    current_logger().set_iteration(itr)


def set_log_tabular_only(log_tabular_only: bool) -> None:
    """``Logger.set_log_tabular_only`` on the current logger."""
    current_logger().set_log_tabular_only(log_tabular_only)


def get_log_tabular_only() -> bool:
    """``Logger.get_log_tabular_only`` on the current logger."""
    return current_logger().get_log_tabular_only()


def set_disable_prefix(disable_prefix: bool) -> None:
    """``Logger.set_disable_prefix`` on the current logger."""
    current_logger().set_disable_prefix(disable_prefix)


def disable() -> None:
    """``Logger.disable`` on the current logger."""
    current_logger().disable()


def enable() -> None:
    """``Logger.enable`` on the current logger."""
    current_logger().enable()


def disable_tabular() -> None:
    """``Logger.disable_tabular`` on the current logger."""
    current_logger().disable_tabular()


def enable_tabular() -> None:
    """``Logger.enable_tabular`` on the current logger."""
    current_logger().enable_tabular()


def set_tf_summary_writer(writer: SummaryWriterLike | None) -> None:
    """``Logger.set_tf_summary_writer`` on the current logger."""
    current_logger().set_tf_summary_writer(writer)


def get_tf_summary_writer() -> SummaryWriterLike | None:
    """``Logger.get_tf_summary_writer`` on the current logger."""
    return current_logger().get_tf_summary_writer()


def set_tf_summary_dir(dir_name: str | None) -> None:
    """``Logger.set_tf_summary_dir`` on the current logger."""
    current_logger().set_tf_summary_dir(dir_name)


def get_tf_summary_dir() -> str | None:
    """``Logger.get_tf_summary_dir`` on the current logger."""
    return current_logger().get_tf_summary_dir()
