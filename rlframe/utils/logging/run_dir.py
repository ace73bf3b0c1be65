"""Run directories: where a run's files go, and claiming one for a run.

``get_log_dir`` names an experiment's dated directory under the data root
(``$RLFRAME_DATA_DIR``, else ``./data`` in the current working directory);
``_claim_run_dir`` creates a run directory and claims it atomically, so that two
runs started at once never share one.
"""
from __future__ import annotations

import datetime
import os

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

