"""Run directories: where an experiment's logs, parameters and snapshots go.

``logger_context`` creates ``<root>/local/<YYYYMMDD>/<HHMMSS>/<log_dir>/run_<run_ID>/``
with ``params.json``, ``progress.csv`` and ``debug.log`` and gives the run a
logger of its own: a fresh ``logger.Logger`` writing to that directory is the
current logger for the ``with`` block, and on exit its outputs are closed and
the previously current logger is restored. ``<root>`` is ``$RLFRAME_DATA_DIR``
when set, else ``./data`` in the current working directory.
"""
from __future__ import annotations

import contextlib
import csv
import datetime
import io
import json
import math
import os
import pickle
import re
import warnings
from typing import Any, Callable, Iterator

import numpy as np
import torch

from rlframe.utils.checkpoint import find_snapshot, snapshot_itr
from rlframe.utils.distributed import torchrun_rank
from rlframe.utils.files import atomic_write_bytes, write_json_atomic
from rlframe.utils.logging import logger

DATA_DIR_ENV_VAR = "RLFRAME_DATA_DIR"


def _data_root() -> str:
    """The log root, evaluated now (the env var and the working directory may change)."""
    root = os.environ.get(DATA_DIR_ENV_VAR)
    if root:
        return os.path.abspath(os.path.expanduser(root))
    return os.path.abspath(os.path.join(os.getcwd(), "data"))


# Root at import time; the functions below recompute it on every call.
LOG_DIR = _data_root()


def _relative_part(path: str) -> str:
    """``path`` without its drive and leading separators, so it nests under a root."""
    _, tail = os.path.splitdrive(path)
    return tail.lstrip("/\\")


def _is_within(path: str, root: str) -> bool:
    path, root = os.path.realpath(path), os.path.realpath(root)
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # different drives
        return False


def get_log_dir(experiment_name: str, root_log_dir: str | None = None,
                date: bool = True) -> str:
    """Directory for a new experiment: ``<root>/local/<YYYYMMDD>/<HHMMSS>/<experiment_name>``.

    Args:
        experiment_name: relative path inside the dated folder (a leading
            separator is dropped so the result always lies under the root).
        root_log_dir: root to use instead of ``$RLFRAME_DATA_DIR`` / ``./data``.
        date: ``False`` leaves out the ``<YYYYMMDD>/<HHMMSS>`` levels.
    """
    root = os.path.abspath(root_log_dir) if root_log_dir else _data_root()
    parts = [root, "local"]
    if date:
        now = datetime.datetime.now()
        parts += [now.strftime("%Y%m%d"), now.strftime("%H%M%S")]
    return os.path.join(*parts, _relative_part(experiment_name))


def _jsonable(value: Any, lossy: list | None = None) -> Any:
    """JSON-ready copy: containers kept, numpy/torch scalars and small arrays unwrapped,
    callables by their qualified name, other objects by a (shortened) repr.

    Args:
        value: the value to convert.
        lossy: when given, receives one entry per value that JSON could not hold.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, (bool, int, float, str)) else k:
                _jsonable(v, lossy) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, lossy) for v in value]
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if (isinstance(value, np.ndarray) and value.size <= _MAX_ARRAY_SIZE
            and value.dtype.kind in "biuf"):
        return value.tolist()
    if lossy is not None:
        lossy.append(value)
    if isinstance(value, type) or callable(value):
        module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
        if name is not None:
            kind = "class" if isinstance(value, type) else "function"
            return f"<{kind} {module}.{name}>" if module else f"<{kind} {name}>"
    text = repr(value)
    return text if len(text) <= _MAX_REPR else text[:_MAX_REPR - 3] + "..."


_MAX_ARRAY_SIZE = 1000  # Larger arrays are shortened to a repr in params.json.
_MAX_REPR = 300


IF_EXISTS = ("error", "suffix")
# Files that mark a directory as holding a run.
_RUN_FILES = ("params.json", "progress.csv", "debug.log", "params.pkl")


def _claim_run_dir(exp_dir: str, if_exists: str) -> str:
    """Create ``exp_dir`` and claim it for this run, atomically.

    The claim is the exclusive creation of its ``params.json``: of two processes
    starting the same run at once, exactly one gets the directory. A directory
    that already holds a run is an error, or with ``if_exists="suffix"`` the
    first free ``<exp_dir>-1``, ``<exp_dir>-2``, ... is claimed instead.
    """
    candidate, k = exp_dir, 0
    while True:
        os.makedirs(candidate, exist_ok=True)
        claim = os.path.join(candidate, "params.json")
        try:
            os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            if not _holds_run_besides(candidate, "params.json"):
                return candidate
            os.unlink(claim)  # Files of an earlier run without params.json: not ours.
        if if_exists == "error":
            raise FileExistsError(
                f"logger_context: the run directory {candidate} already holds a run; "
                "choose another log_dir or run_ID, or pass if_exists='suffix' to write to "
                f"{exp_dir}-1 (or the next free suffix) instead.")
        k += 1
        candidate = f"{exp_dir}-{k}"


def _holds_run_besides(directory: str, own: str) -> bool:
    return any(name != own and (name in _RUN_FILES
                                or (name.startswith("itr_") and name.endswith(".pkl")))
               for name in os.listdir(directory))


@contextlib.contextmanager
def logger_context(log_dir: str, run_ID: int, name: str, log_params: dict | None = None,
                   snapshot_mode: str = "none", override_prefix: bool = False,
                   use_summary_writer: bool = False, if_exists: str = "error",
                   resume: bool = False) -> Iterator[str | None]:
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

    Under torchrun (``RANK`` > 0 in a job of several processes) only rank 0
    writes: the other ranks get a silent logger, no directory, and ``None``.

    Yields:
        The absolute run directory (None on torchrun ranks other than 0).

    Raises:
        TypeError: ``log_params`` is not a dict (before anything is written).
        ValueError: a setting is not allowed, or ``resume`` finds a run made with
            other ``log_params`` or an unreadable snapshot (``SnapshotError``).
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
                              use_summary_writer, if_exists, resume) as path:
        yield path


@contextlib.contextmanager
def logger_context_at(run_dir: str, run_ID: int | str, name: str,
                      log_params: dict | None = None, snapshot_mode: str = "none",
                      use_summary_writer: bool = False, if_exists: str = "error",
                      resume: bool = False) -> Iterator[str | None]:
    """:func:`logger_context` in the run directory ``run_dir`` exactly as given, whatever
    its name: e.g. to resume a run whose ``run_<ID>`` directory was renamed.

    Args:
        run_dir: the run directory (created if missing; never nested under the root).
        run_ID: the run number recorded in ``params.json`` and the log prefix.
        name, log_params, snapshot_mode, use_summary_writer, if_exists, resume: as for
            :func:`logger_context`.

    Yields:
        The absolute run directory (None on torchrun ranks other than 0).
    """
    with _checked_run_logging(lambda: (os.path.abspath(run_dir), if_exists, None), run_ID,
                              name, log_params, snapshot_mode, use_summary_writer, if_exists,
                              resume) as path:
        yield path


@contextlib.contextmanager
def _checked_run_logging(locate: Callable[[], tuple[str, str, str | None]], run_ID: int | str,
                         name: str, log_params: dict | None, snapshot_mode: str,
                         use_summary_writer: bool, if_exists: str, resume: bool
                         ) -> Iterator[str | None]:
    """Check the settings, then log to the directory ``locate()`` gives as
    ``(run directory, if_exists, note)``; a silent logger on torchrun ranks above 0."""
    _check_log_params(log_params)
    if torchrun_rank() > 0:
        with _quiet_logger():
            yield None
        return
    _check_settings(snapshot_mode, if_exists)
    exp_dir, if_exists, note = locate()
    with _run_logging(exp_dir, run_ID, name, log_params, snapshot_mode, use_summary_writer,
                      if_exists, resume, note) as path:
        yield path


def _check_log_params(log_params: Any) -> None:
    if log_params is not None and not isinstance(log_params, dict):
        raise TypeError(f"logger_context: log_params must be a dict of hyperparameters (or "
                        f"None), got a {type(log_params).__name__}: {_short(log_params)}.")


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _check_settings(snapshot_mode: str, if_exists: str) -> None:
    """The run's settings, checked before anything is created."""
    logger.Logger().set_snapshot_mode(snapshot_mode)
    if if_exists not in IF_EXISTS:
        raise ValueError(f"if_exists must be one of {list(IF_EXISTS)}, got {if_exists!r}.")


@contextlib.contextmanager
def _quiet_logger() -> Iterator[None]:
    """A silent current logger (torchrun ranks other than 0 write nothing)."""
    quiet = logger.Logger()
    quiet.disable()
    with logger.use_logger(quiet):
        yield


@contextlib.contextmanager
def _run_logging(exp_dir: str, run_ID: int | str, name: str, log_params: dict | None,
                 snapshot_mode: str, use_summary_writer: bool, if_exists: str, resume: bool,
                 note: str | None) -> Iterator[str]:
    """The body of :func:`logger_context` once the absolute run directory is known."""
    summary_writer_cls = None
    if use_summary_writer:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ImportError("use_summary_writer=True needs TensorBoard: "
                              "pip install rlframe[tensorboard]") from err
        summary_writer_cls = SummaryWriter
    run_logger = logger.Logger()
    run_logger.set_snapshot_mode(snapshot_mode)
    run_logger.set_log_tabular_only(False)
    if log_params is None:
        log_params = {}
    log_params["name"] = name
    log_params["run_ID"] = run_ID
    lossy: list = []
    params_json = _jsonable(log_params, lossy)
    resume_from, resume_itr, warnings_found = None, None, []
    if resume and os.path.isdir(exp_dir) and _holds_run_besides(exp_dir, ""):
        resume_from, resume_itr, warnings_found = _prepare_resume(exp_dir, params_json)
    else:
        exp_dir = _claim_run_dir(exp_dir, if_exists)
    params_path = os.path.join(exp_dir, "params.json")

    try:
        with logger.use_logger(run_logger):
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
                run_logger.set_resume_snapshot(resume_from)
                run_logger.log(f"Resuming the run from {os.path.basename(resume_from)} "
                               f"(iteration {resume_itr}).")
            yield exp_dir
    finally:
        run_logger.close()  # the summary writer too


def _prepare_resume(exp_dir: str, params_json: dict) -> tuple[str, int, list[str]]:
    """Check that the run in ``exp_dir`` can be continued with ``params_json``; cut an
    incomplete last row off ``progress.csv`` (with a warning) and drop the rows written
    after its newest snapshot.

    Returns:
        That snapshot's path and iteration, and the warnings given.
    """
    snapshot = find_snapshot(exp_dir)
    if snapshot is None:
        raise FileExistsError(
            f"logger_context(resume=True): {exp_dir} holds a run but no snapshot to resume "
            f"from (files: {sorted(os.listdir(exp_dir))}); it was run with "
            "snapshot_mode='none', or stopped before its first snapshot. It is left as it "
            "is: choose another run_ID to start afresh.")
    itr = snapshot_itr(snapshot)  # Also checks that it is a readable snapshot.
    params_path = os.path.join(exp_dir, "params.json")
    if os.path.exists(params_path):
        saved = _read_params(params_path)
        now = json.loads(json.dumps(params_json))  # As params.json holds it.
        changed = sorted(k for k in set(saved) | set(now) if k != "run_ID"
                         and not _same_param(saved.get(k, "<absent>"), now.get(k, "<absent>")))
        if changed:
            details = "; ".join(f"{k}: {saved.get(k, '<absent>')!r} in the run, "
                                f"{now.get(k, '<absent>')!r} now" for k in changed[:5])
            raise ValueError(
                f"logger_context(resume=True): the run in {exp_dir} was made by a different "
                f"setting ({details}). Resume it with its own settings, or choose another "
                "run_ID for the new setting.")
    progress_path = os.path.join(exp_dir, "progress.csv")
    found = []
    cut = _cut_incomplete_rows(progress_path)
    if cut is not None:
        warnings.warn(cut, stacklevel=2)
        found.append(cut)
    _drop_rows_after(progress_path, itr)
    return snapshot, itr, found


def _read_params(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"logger_context(resume=True): {path} cannot be read as JSON "
                         f"({error}); the run's settings are unknown, so it is not "
                         "resumed.") from None
    if not isinstance(saved, dict):
        raise ValueError(f"logger_context(resume=True): {path} holds a JSON "
                         f"{type(saved).__name__}, not the object of a run's settings; it is "
                         "not resumed.")
    return saved


# A default repr's address (`<foo.Bar object at 0x7f...>`) differs between processes.
_ADDRESS = re.compile(r"(<[\w.]+ object) at 0x[0-9a-fA-F]+>")


def _same_param(saved: Any, now: Any) -> bool:
    """Whether a value of params.json and one of the resumed run's settings (both as
    JSON holds them) are the same: NaN equals NaN, default reprs compare by class."""
    if isinstance(saved, dict) and isinstance(now, dict):
        return saved.keys() == now.keys() and all(_same_param(saved[k], now[k]) for k in saved)
    if isinstance(saved, list) and isinstance(now, list):
        return len(saved) == len(now) and all(map(_same_param, saved, now))
    if isinstance(saved, float) and isinstance(now, float) and math.isnan(saved):
        return math.isnan(now)
    if isinstance(saved, str) and isinstance(now, str):
        return _ADDRESS.sub(r"\1>", saved) == _ADDRESS.sub(r"\1>", now)
    return saved == now


def _cut_incomplete_rows(progress_path: str) -> str | None:
    """Cut ``progress.csv`` back to its last complete row: one ended by a line break,
    without NUL bytes, with as many fields as the header. A run stopped mid-write (a
    crash, a full disk) leaves half a row, and the file system may add NUL bytes.

    Returns:
        A warning saying what was dropped, or None if the file was whole.
    """
    if not os.path.exists(progress_path):
        return None
    with open(progress_path, "rb") as f:
        data = f.read()
    end = _complete_part(data)
    if end == len(data):
        return None
    dropped = data[end:]
    n_rows = sum(1 for line in dropped.split(b"\n") if line.strip(b"\x00\r\t "))
    nul = ", NUL bytes among them" if b"\x00" in dropped else ""
    atomic_write_bytes(progress_path, data[:end])
    what = "the header and " if end == 0 else ""
    n_rows -= 1 if end == 0 and n_rows else 0  # The header is not a row.
    return (f"{progress_path} ended in an incomplete row (the run stopped while writing "
            f"it): cut back to its last complete row, dropping {what}{n_rows} incomplete "
            f"row(s), {len(dropped)} bytes{nul}.")


def _complete_part(data: bytes) -> int:
    """The length of the leading part of CSV ``data`` made of whole records: the header,
    then each row until the first that is incomplete (0 if the header is)."""
    consumed = [0]

    def lines() -> Iterator[str]:
        position = 0
        while position < len(data):
            stop = data.find(b"\n", position)
            if stop < 0 or b"\x00" in data[position:stop]:
                return  # No line break, or NUL bytes: never a whole row.
            try:
                line = data[position:stop + 1].decode("utf-8")
            except UnicodeDecodeError:
                return
            position = consumed[0] = stop + 1
            yield line

    end, n_fields = 0, None
    try:
        for record in csv.reader(lines()):
            if n_fields is None:
                n_fields = len(record)
            elif len(record) != n_fields:
                break
            end = consumed[0]
    except csv.Error:  # A quoted field that never ends.
        pass
    return end


def _drop_rows_after(progress_path: str, itr: int) -> None:
    """Keep the rows of ``progress.csv`` up to ``Iteration`` ``itr`` (a resumed run
    writes the later ones again)."""
    if not os.path.exists(progress_path):
        return
    with open(progress_path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        fieldnames, rows = reader.fieldnames, list(reader)
    kept = [row for row in rows if _row_itr(row) <= itr]
    if fieldnames is None or len(kept) == len(rows):
        return
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=fieldnames, lineterminator="\r\n")
    writer.writeheader()
    writer.writerows(kept)
    atomic_write_bytes(progress_path, text.getvalue().encode("utf-8"))


def _row_itr(row: dict) -> float:
    for key, value in row.items():
        if key == "Iteration" or key.endswith("/Iteration"):
            try:
                return float(value)
            except (TypeError, ValueError):
                return -math.inf
    return -math.inf


def _pickle_params(exp_dir: str, log_params: dict, run_logger: logger.Logger) -> None:
    """Keep ``log_params`` in full beside ``params.json``, which holds only reprs of
    values JSON cannot hold."""
    try:
        payload = pickle.dumps(log_params)
    except Exception as err:  # noqa: BLE001 - a lambda, an open file, ...: keep the reprs.
        run_logger.log(f"params.json holds reprs of values JSON cannot hold; they do not "
                       f"pickle either ({type(err).__name__}: {err}), so no log_params.pkl.")
        return
    atomic_write_bytes(os.path.join(exp_dir, "log_params.pkl"), payload)


def add_exp_param(param_name: str, param_val: Any, exp_dir: str | None = None,
                  overwrite: bool = False) -> list[str]:
    """Add a key to every ``params.json`` found under ``exp_dir`` (recursively).

    An existing key is left alone unless ``overwrite``; when both the existing
    and the new value are dicts, missing sub-keys are added either way (and
    existing sub-keys replaced only with ``overwrite``).

    Args:
        param_name: key to add.
        param_val: value (JSON-converted like ``log_params``).
        exp_dir: directory to search; default the current working directory.
        overwrite: replace an existing value.

    Returns:
        Paths of the files that changed.
    """
    search_dir = os.getcwd() if exp_dir is None else exp_dir
    if not os.path.isdir(search_dir):
        raise ValueError(f"exp_dir must be an existing directory, got {search_dir!r}.")
    new_val = _jsonable(param_val)
    changed = []
    for dir_path, _, file_names in os.walk(search_dir):
        if "params.json" not in file_names:
            continue
        path = os.path.join(dir_path, "params.json")
        with open(path, "r", encoding="utf-8") as f:
            params = json.load(f)
        old_val = params.get(param_name)
        if isinstance(old_val, dict) and isinstance(new_val, dict):
            merged = dict(old_val)
            for key, val in new_val.items():
                if overwrite or key not in merged:
                    merged[key] = val
            if merged == old_val:
                continue
            params[param_name] = merged
        elif param_name in params and not overwrite:
            logger.log(f"{path}: keeping existing {param_name}={old_val!r} (overwrite=False).")
            continue
        else:
            params[param_name] = new_val
        write_json_atomic(path, params)
        changed.append(path)
    return changed


def check_progress(exp_dir: str | None = None) -> dict[str, int]:
    """Count the data rows of every ``progress.csv`` under ``exp_dir`` and log them.

    Args:
        exp_dir: directory to search; default the current working directory.

    Returns:
        ``{path: number of rows after the header}``.
    """
    search_dir = os.getcwd() if exp_dir is None else exp_dir
    counts = {}
    for dir_path, _, file_names in sorted(os.walk(search_dir)):
        if "progress.csv" not in file_names:
            continue
        path = os.path.join(dir_path, "progress.csv")
        with open(path, "r", encoding="utf-8") as f:
            n_lines = sum(1 for _ in f)
        counts[path] = max(n_lines - 1, 0)
        logger.log(f"{path}: {counts[path]} rows", with_prefix=False)
    return counts
