"""``logger_context``: a run's directory and logger for the duration of a ``with`` block.

``logger_context`` creates ``<root>/local/<YYYYMMDD>/<HHMMSS>/<log_dir>/run_<run_ID>/``
with ``params.json``, ``progress.csv`` and ``debug.log`` and gives the run a
logger of its own: a fresh ``logger.Logger`` writing to that directory is the
current logger for the ``with`` block (a runner that trains inside reaches it as
``runner.logger``), and on exit its outputs are closed and the previously
current logger is restored. ``<root>`` is ``$RLFRAME_DATA_DIR`` when set, else
``./data`` in the current working directory.

The parts: ``run_dir.py`` names and claims run directories, ``params.py`` writes
``params.json`` and compares it on resume, ``progress.py`` repairs ``progress.csv``
for a resumed run; their names stay importable from here.
"""
from __future__ import annotations

import contextlib
import csv  # noqa: F401
import datetime  # noqa: F401
import io  # noqa: F401
import json  # noqa: F401
import math  # noqa: F401
import os
import pickle  # noqa: F401
import re  # noqa: F401
import warnings
from typing import Any, Callable, Iterator, Sequence  # noqa: F401

import numpy as np  # noqa: F401
import torch  # noqa: F401

from rlframe.utils.checkpoint import find_snapshot, snapshot_itr
from rlframe.utils.distributed import torchrun_rank
from rlframe.utils.files import atomic_write_bytes, write_json_atomic  # noqa: F401
from rlframe.utils.logging import logger  # noqa: F401
from rlframe.utils.logging.current import quiet_logger, use_logger
from rlframe.utils.logging.params import (_ADDRESS, _MAX_ARRAY_SIZE, _MAX_REPR,  # noqa: F401
                                          _jsonable, _pickle_params, _read_params,
                                          _same_param, add_exp_param, check_same_params)
from rlframe.utils.logging.progress import (_complete_part, _cut_incomplete_rows,  # noqa: F401
                                            _drop_rows_after, _row_itr, check_progress)
from rlframe.utils.logging.run_dir import (DATA_DIR_ENV_VAR, IF_EXISTS, LOG_DIR,  # noqa: F401
                                           _RUN_FILES, _claim_run_dir, _data_root,
                                           _holds_run_besides, _is_within, _relative_part,
                                           get_log_dir)
from rlframe.utils.logging.run_logger import Logger
from rlframe.utils.logging.tracking import RunTracking, check_outputs
from rlframe.utils.logging.tracking import read_state as read_tracking_state
from rlframe.utils.snapshot_files import check_snapshot_mode

@contextlib.contextmanager
def logger_context(log_dir: str, run_ID: int, name: str, log_params: dict | None = None,
                   snapshot_mode: str = "none", override_prefix: bool = False,
                   use_summary_writer: bool = False, if_exists: str = "error",
                   resume: bool = False, outputs: Sequence[str] | None = None,
                   tracking_group: str | None = None) -> Iterator[str | None]:
    """Log a run to its own directory through a fresh logger for the ``with`` block.

    The directory is ``<root>/local/<YYYYMMDD>/<HHMMSS>/<log_dir>/run_<run_ID>``,
    or ``<log_dir>/run_<run_ID>`` as given when ``override_prefix`` is set or
    ``log_dir`` already lies inside the root. It receives ``params.json``
    (``log_params`` plus ``name`` and ``run_ID``), ``progress.csv`` (one row per
    ``dump_tabular``), ``debug.log`` (every ``log`` line), snapshots, and
    TensorBoard events when ``use_summary_writer`` is set.

    Inside the block the module functions (``logger.log``, ``logger.record_tabular``,
    ...) act on a new ``logger.Logger`` with the ``"<name>_<run_ID> "`` log prefix
    and default settings, so settings such as ``logger.set_snapshot_gap`` belong
    inside the block. On exit, also after an exception, its outputs are closed
    and the previously current logger is current again: prefixes, a pending
    tabular row or snapshot settings left by this run never reach the next one.

    Args:
        log_dir: experiment folder (relative paths nest under the root).
        run_ID: run number; the run folder is ``run_<run_ID>``.
        name: experiment name, used in the log prefix and ``params.json``.
        log_params: hyperparameters to record; this dict is updated in place
            with ``name`` and ``run_ID``. Values JSON cannot hold are written as a
            readable name or repr, and the whole dict is pickled to
            ``log_params.pkl`` beside ``params.json`` when it pickles.
        snapshot_mode: one of ``logger.SNAPSHOT_MODES``.
        override_prefix: use ``log_dir`` as given instead of nesting it under the
            root; without it, a relative ``log_dir`` that would lead out of the
            root (``..``) is an error.
        use_summary_writer: also write TensorBoard scalars (needs ``tensorboard``).
        if_exists: what to do when the run directory already holds a run:
            ``"error"`` (raise before writing anything) or ``"suffix"`` (use
            ``run_<run_ID>-1``, ``-2``, ...). Directories are claimed atomically,
            so runs started at once never share one. Under the dated folder made
            for a relative ``log_dir``, a run started in the same second may hold the
            directory: that one always gets a suffix.
        resume: continue the run in the run directory if it holds one: the runner's
            ``train()`` starts from the newest snapshot (see ``MinibatchRlBase``),
            ``progress.csv`` and ``debug.log`` are appended to (an incomplete last
            row, left by a run stopped mid-write, is cut off with a warning, and rows
            after the snapshot's iteration are dropped), and the run ends at the same
            ``n_steps`` as an uninterrupted one. ``log_params`` must match the
            directory's ``params.json`` (as JSON holds them: NaN equals NaN, objects
            shown by their default repr compare by class). A directory without a run
            starts afresh; one holding a run without a snapshot is an error (and is
            left as it is). To resume a run directory not named ``run_<ID>``, see
            :func:`logger_context_at`.
        outputs: experiment trackers that also receive the config, every progress row
            and, at the end, the run's files and status: ``"mlflow"`` and/or ``"wandb"``
            (see :mod:`rlframe.utils.logging.tracking`; each needs its extra). ``None``:
            none for a new run, and the run's own (``tracking.json``) for a resumed one.
        tracking_group: the trackers' MLflow experiment / W&B group (default ``name``).

    Under torchrun (``RANK`` > 0 in a job of several processes) only rank 0
    writes: the other ranks get a silent logger, no directory, and ``None``.

    Yields:
        The absolute run directory (None on torchrun ranks other than 0).

    Raises:
        TypeError: ``log_params`` is not a dict (before anything is written).
        ValueError: a setting is not allowed, or ``resume`` finds a run made with
            other ``log_params`` or an unreadable snapshot (``SnapshotError``).
        ImportError: a tracker in ``outputs`` is not installed (naming its extra).
        FileExistsError: the run directory holds a run (and ``if_exists="error"``), or
            ``resume`` finds one without a snapshot.
    """
    if not isinstance(log_dir, (str, os.PathLike)):
        raise TypeError(f"logger_context: log_dir must be a path (str), got "
                        f"{type(log_dir).__name__}: {log_dir!r}.")

    def locate() -> tuple[str, str, str | None]:
        run_dir = os.path.join(log_dir, f"run_{run_ID}")
        root = _data_root()
        exp_dir = os.path.abspath(run_dir)
        relocated = not override_prefix and not _is_within(exp_dir, root)
        if not relocated:
            return exp_dir, if_exists, None
        exp_dir = os.path.normpath(get_log_dir(run_dir, root_log_dir=root))
        if not _is_within(exp_dir, root):
            raise ValueError(f"log_dir={log_dir!r} leads out of the data directory {root} "
                             f"(to {exp_dir}); remove the '..' parts, or pass an absolute "
                             "path with override_prefix=True to write there.")
        note = None
        if os.path.isabs(log_dir):
            note = (f"log_dir {log_dir!r} is outside the data root {root}, so it was nested "
                    "under it; pass override_prefix=True to write to it as is.")
        # A dated directory made here is not the user's choice: a run started in the same
        # second (a launcher's grid) may hold it, and a suffix keeps both.
        return exp_dir, "suffix", note

    with _checked_run_logging(locate, run_ID, name, log_params, snapshot_mode,
                              use_summary_writer, if_exists, resume,
                              (outputs, tracking_group)) as path:
        yield path


@contextlib.contextmanager
def logger_context_at(run_dir: str, run_ID: int | str, name: str,
                      log_params: dict | None = None, snapshot_mode: str = "none",
                      use_summary_writer: bool = False, if_exists: str = "error",
                      resume: bool = False, outputs: Sequence[str] | None = None,
                      tracking_group: str | None = None) -> Iterator[str | None]:
    """:func:`logger_context` in the run directory ``run_dir`` exactly as given, whatever
    its name: e.g. to resume a run whose ``run_<ID>`` directory was renamed.

    Args:
        run_dir: the run directory (created if missing; never nested under the root).
        run_ID: the run number recorded in ``params.json`` and the log prefix.
        name, log_params, snapshot_mode, use_summary_writer, if_exists, resume, outputs,
            tracking_group: as for :func:`logger_context`.

    Yields:
        The absolute run directory (None on torchrun ranks other than 0).
    """
    with _checked_run_logging(lambda: (os.path.abspath(run_dir), if_exists, None), run_ID,
                              name, log_params, snapshot_mode, use_summary_writer, if_exists,
                              resume, (outputs, tracking_group)) as path:
        yield path


@contextlib.contextmanager
def _checked_run_logging(locate: Callable[[], tuple[str, str, str | None]], run_ID: int | str,
                         name: str, log_params: dict | None, snapshot_mode: str,
                         use_summary_writer: bool, if_exists: str, resume: bool,
                         tracking: tuple[Sequence[str] | None, str | None]
                         ) -> Iterator[str | None]:
    """Check the settings, then log to the directory ``locate()`` gives as
    ``(run directory, if_exists, note)``; a silent logger on torchrun ranks above 0.
    ``tracking`` is ``(outputs, tracking_group)``."""
    _check_log_params(log_params)
    outputs, tracking_group = tracking
    if outputs is not None:
        outputs = check_outputs(outputs)
    if torchrun_rank() > 0:
        with _quiet_logger():
            yield None
        return
    _check_settings(snapshot_mode, if_exists)
    exp_dir, if_exists, note = locate()
    with _run_logging(exp_dir, run_ID, name, log_params, snapshot_mode, use_summary_writer,
                      if_exists, resume, note, outputs, tracking_group) as path:
        yield path


def _check_log_params(log_params: object) -> None:
    if log_params is not None and not isinstance(log_params, dict):
        raise TypeError(f"logger_context: log_params must be a dict of hyperparameters (or "
                        f"None), got a {type(log_params).__name__}: {_short(log_params)}.")


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _check_settings(snapshot_mode: str, if_exists: str) -> None:
    """The run's settings, checked before anything is created."""
    check_snapshot_mode(snapshot_mode)
    if if_exists not in IF_EXISTS:
        raise ValueError(f"if_exists must be one of {list(IF_EXISTS)}, got {if_exists!r}.")


@contextlib.contextmanager
def _quiet_logger() -> Iterator[None]:
    """A silent current logger (torchrun ranks other than 0 write nothing)."""
    with use_logger(quiet_logger()):
        yield


@contextlib.contextmanager
def _run_logging(exp_dir: str, run_ID: int | str, name: str, log_params: dict | None,
                 snapshot_mode: str, use_summary_writer: bool, if_exists: str, resume: bool,
                 note: str | None, outputs: tuple[str, ...] | None,
                 tracking_group: str | None) -> Iterator[str]:
    """The body of :func:`logger_context` once the absolute run directory is known."""
    summary_writer_cls = None
    if use_summary_writer:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ImportError("use_summary_writer=True needs TensorBoard: "
                              "pip install rlframe[tensorboard]") from err
        summary_writer_cls = SummaryWriter
    run_logger = Logger()
    run_logger.set_snapshot_mode(snapshot_mode)
    run_logger.set_log_tabular_only(False)
    if log_params is None:
        log_params = {}
    log_params["name"] = name
    log_params["run_ID"] = run_ID
    lossy: list = []
    params_json = _jsonable(log_params, lossy)
    resume_from, resume_itr, warnings_found, rows_through = None, None, [], None
    if resume and os.path.isdir(exp_dir) and _holds_run_besides(exp_dir, ""):
        resume_from, resume_itr, warnings_found, rows_through = _prepare_resume(exp_dir,
                                                                               params_json)
    else:
        exp_dir = _claim_run_dir(exp_dir, if_exists)
    params_path = os.path.join(exp_dir, "params.json")
    if outputs is None and resume_from is not None:  # The run's own trackers, if any.
        outputs = check_outputs(list(read_tracking_state(exp_dir)))
    tracking = RunTracking(exp_dir, outputs, resume_from is not None) if outputs else None
    status = "FINISHED"

    try:
        with use_logger(run_logger):
            run_logger.set_snapshot_dir(exp_dir)
            run_logger.add_text_output(os.path.join(exp_dir, "debug.log"))
            run_logger.add_tabular_output(os.path.join(exp_dir, "progress.csv"),
                                          append=resume_from is not None)
            run_logger.push_prefix(f"{name}_{run_ID} ")
            if summary_writer_cls is not None:
                run_logger.set_tf_summary_writer(summary_writer_cls(exp_dir))
                run_logger.set_tf_summary_dir(exp_dir)
            if resume_from is None:  # A resumed run keeps its params.json.
                write_json_atomic(params_path, params_json)
            if lossy and resume_from is None:
                _pickle_params(exp_dir, log_params, run_logger)
            if note is not None:
                run_logger.log(note)
            run_logger.log(f"Run directory: {exp_dir}")
            for warning in warnings_found:
                run_logger.log(f"WARNING: {warning}")
            if resume_from is not None:
                run_logger.set_resume_snapshot(resume_from, rows_through)
                run_logger.log(f"Resuming the run from {os.path.basename(resume_from)} "
                               f"(iteration {resume_itr}).")
            if tracking is not None:
                tracking.start(f"{name}_{run_ID}", tracking_group or name, params_json)
                run_logger.set_tracking(tracking)
                run_logger.log(f"Tracking the run with {', '.join(outputs)}.")
            yield exp_dir
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    except BaseException:
        status = "FAILED"
        raise
    finally:
        run_logger.set_tracking(None)
        run_logger.close()  # the summary writer too
        if tracking is not None:
            _finish_tracking(tracking, status)


def _finish_tracking(tracking: RunTracking, status: str) -> None:
    """End the tracked runs; a failure to do so is an error only when the run itself
    finished (otherwise a warning, so that the run's own exception is the one raised)."""
    try:
        tracking.finish(status)
    except Exception as error:
        if status == "FINISHED":
            raise
        warnings.warn(f"{error}", stacklevel=3)


def _prepare_resume(exp_dir: str, params_json: dict
                    ) -> tuple[str, int, list[str], float | None]:
    """Check that the run in ``exp_dir`` can be continued with ``params_json``; cut an
    incomplete last row off ``progress.csv`` (with a warning) and drop the rows written
    after its newest snapshot.

    Returns:
        That snapshot's path and iteration, the warnings given, and the ``Iteration``
        of the last row kept (None: no rows).
    """
    snapshot = find_snapshot(exp_dir)
    if snapshot is None:
        raise FileExistsError(
            f"logger_context(resume=True): {exp_dir} holds a run but no snapshot to resume "
            f"from (files: {sorted(os.listdir(exp_dir))}); it was run with "
            "snapshot_mode='none', or stopped before its first snapshot. It is left as it "
            "is: choose another run_ID to start afresh.")
    itr = snapshot_itr(snapshot)  # Also checks that it is a readable snapshot.
    check_same_params(exp_dir, params_json)
    progress_path = os.path.join(exp_dir, "progress.csv")
    found = []
    cut = _cut_incomplete_rows(progress_path)
    if cut is not None:
        warnings.warn(cut, stacklevel=2)
        found.append(cut)
    rows_through = _drop_rows_after(progress_path, itr)
    return snapshot, itr, found, rows_through
