"""The files of an experiment directory and the reports of a grid of runs: the dated
directory, ``experiments_tree.txt``, ``num_launched.txt``, each run's launch log, and
how a run ended (:class:`RunResult`) with the last lines of a failed run's log."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from rlframe.utils.logging.context import get_log_dir

LAUNCH_LOG = "launch.log"  # A run's stdout and stderr, in <variant dir>/run_<ID>/.
TAIL_LINES = 20  # Lines of a failed run's log shown in reports.


@dataclass(frozen=True)
class RunResult:
    """How one run ended.

    Attributes:
        log_dir: the run's variant directory (absolute; the run logs to ``run_<run_ID>`` in it).
        run_ID: the run's number within its variant.
        run_slot: the run slot it ran in.
        returncode: the process's exit status (negative: killed by that signal).
        launch_log: the file holding its stdout and stderr.
        seconds: wall-clock duration.
    """

    log_dir: str
    run_ID: int
    run_slot: int
    returncode: int
    launch_log: str
    seconds: float

    @property
    def ok(self) -> bool:
        """Whether the run exited with status 0."""
        return self.returncode == 0


def log_exps_tree(exp_dir: str, log_dirs: Sequence[str], runs_per_setting: int) -> None:
    """Write ``exp_dir/experiments_tree.txt``: launcher pid, counts, and every variant dir."""
    os.makedirs(exp_dir, exist_ok=True)
    with open(os.path.join(exp_dir, "experiments_tree.txt"), "w", encoding="utf-8") as f:
        f.write(f"Experiment manager process ID: {os.getpid()}.\n")
        f.write(f"Number of settings (experiments) to run: {len(log_dirs)}  "
                f"({runs_per_setting * len(log_dirs)} runs).\n\n")
        for log_dir in log_dirs:
            f.write(f"{log_dir}\n")


def log_num_launched(exp_dir: str, n: int, total: int) -> None:
    """Write ``exp_dir/num_launched.txt``: runs launched so far out of the total."""
    with open(os.path.join(exp_dir, "num_launched.txt"), "w", encoding="utf-8") as f:
        f.write(f"Experiments launched so far: {n} out of {total}.\n")


def _new_exp_dir(experiment_title: str) -> str:
    """Create the dated experiment directory; a second launch of the same title within
    the same second gets ``<title>-1`` (``-2``, ...) instead of sharing it."""
    base = get_log_dir(experiment_title)
    candidate, k = base, 0
    while True:
        try:
            os.makedirs(candidate)
            return candidate
        except FileExistsError:
            k += 1
            candidate = f"{base}-{k}"


def launch_log_path(log_dir: str, run_ID: int) -> str:
    """Where a run's stdout and stderr go: ``<log_dir>/run_<run_ID>/launch.log``."""
    return os.path.join(log_dir, f"run_{run_ID}", LAUNCH_LOG)


def _tail(path: str, n_lines: int = TAIL_LINES) -> str:
    """The last lines of a text file (read from its end, so big logs cost little)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            data = f.read()
    except OSError as err:
        return f"(cannot read {path}: {err})"
    lines = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[-n_lines:])


def _describe_failure(result: RunResult) -> str:
    how = (f"was killed by signal {-result.returncode}" if result.returncode < 0
           else f"exited with status {result.returncode}")
    tail = _tail(result.launch_log)
    indented = "\n".join("    " + line for line in tail.splitlines())
    return (f"Run FAILED: {result.log_dir} run_ID={result.run_ID} (slot {result.run_slot}) {how} "
            f"after {result.seconds:.1f} s.\n  log: {result.launch_log}\n"
            f"  last {TAIL_LINES} lines:\n{indented}")


def _report(results: list[RunResult], exp_dir: str) -> None:
    failed = [r for r in results if not r.ok]
    print(f"\nAll {len(results)} runs done in {exp_dir}: {len(results) - len(failed)} "
          f"succeeded, {len(failed)} failed.", flush=True)
    if failed:
        print("\n".join(["Failed runs:"] + [_describe_failure(r) for r in failed]), flush=True)
