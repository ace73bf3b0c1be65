"""The workers of ``rlframe tune``: each takes the tuning directory's next trial (or one
whose process is gone, to resume), runs its seeds with a callback that reports every
evaluation to Optuna and stops the run when the pruner says so, and tells Optuna the
trial's value.

``python -m rlframe.tune.trials SLOT_CODE OUT/workers WORKER_ID`` is one worker (what
:func:`rlframe.tune.study.run_workers` starts through the launcher).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import socket
import sys
import warnings
from typing import TYPE_CHECKING, Any, Iterator

from rlframe.tune.space import apply
from rlframe.tune.settings import TUNE_FILE, TuneSettings
from rlframe.tune.study import load_study
from rlframe.utils.files import write_json_atomic

TRIAL_FILE = "trial.json"
RUN_DONE_FILE = "run_done.json"
PRUNED_FILE = "pruned.json"

if TYPE_CHECKING:
    import optuna

    from rlframe.runners.minibatch_rl import MinibatchRlBase


@contextlib.contextmanager
def _claim_lock(out_dir: str) -> Iterator[None]:
    """One worker of this tuning directory at a time picks its next trial."""
    with open(os.path.join(out_dir, ".claim.lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _owner() -> dict[str, Any]:
    import psutil
    return dict(host=socket.gethostname(), pid=os.getpid(),
                started=psutil.Process().create_time())


def _owner_alive(owner: dict[str, Any]) -> bool:
    import psutil
    if owner.get("host") != socket.gethostname():
        return True  # Another machine's: never taken over from here.
    try:
        return psutil.Process(owner["pid"]).create_time() == owner["started"]
    except (psutil.NoSuchProcess, KeyError):
        return False


def trial_dirs(out_dir: str) -> list[str]:
    """This directory's trial folders, by trial number."""
    names = [n for n in os.listdir(out_dir) if n.startswith("trial_") and
             os.path.isfile(os.path.join(out_dir, n, TRIAL_FILE))]
    return [os.path.join(out_dir, n) for n in sorted(names, key=lambda n: int(n[6:]))]


def _read_json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def next_trial(study: optuna.Study, settings: TuneSettings,
               out_dir: str) -> tuple[int, str] | None:
    """Claim the next trial for this worker: one of this directory's whose process is
    gone while Optuna still has it running (to resume), else a new one while fewer
    than ``settings.trials`` were started here. Returns ``(trial_id, trial_dir)``."""
    from optuna.trial import TrialState
    with _claim_lock(out_dir):
        folders = trial_dirs(out_dir)
        for folder in folders:
            record = _read_json(os.path.join(folder, TRIAL_FILE))
            state = study._storage.get_trial(record["trial_id"]).state
            if state == TrialState.RUNNING and not _owner_alive(record["owner"]):
                write_json_atomic(os.path.join(folder, TRIAL_FILE), dict(record, owner=_owner()))
                return record["trial_id"], folder
        if len(folders) >= settings.trials:
            return None
        trial = study.ask()
        folder = os.path.join(out_dir, f"trial_{trial.number}")
        os.makedirs(folder, exist_ok=True)
        write_json_atomic(os.path.join(folder, TRIAL_FILE),
                    dict(trial_id=trial._trial_id, number=trial.number, owner=_owner()))
        return trial._trial_id, folder


class ReportToTrial:
    """Runner callback: each evaluation row's return goes to the Optuna trial, and the
    run stops (after its snapshot) when the pruner says so."""

    def __init__(self, trial: optuna.trial.Trial, offset: int, folder: str) -> None:
        self.trial, self.offset, self.folder = trial, offset, folder
        self.pruned = False

    def on_log(self, runner: MinibatchRlBase, itr: int, diagnostics: dict[str, Any]) -> bool:
        value = diagnostics.get("ReturnAverage")
        steps = diagnostics.get("Diagnostics/CumSteps")
        if (value is None or steps is None or not math.isfinite(float(value))
                or int(steps) == 0):  # The untrained agent's row says nothing of the trial.
            return True
        step = self.offset + int(steps)
        with warnings.catch_warnings():  # A resumed run may report a step again.
            warnings.simplefilter("ignore")
            self.trial.report(float(value), step)
        if self.trial.should_prune():
            self.pruned = True
            write_json_atomic(os.path.join(self.folder, PRUNED_FILE), dict(step=step))
            return False
        return True


def final_return(run_dir: str) -> float:
    """The run's last evaluation return (NaN if it has none)."""
    from rlframe.utils.plotting import load_progress
    values = load_progress(run_dir).get("ReturnAverage")
    return float(values[-1]) if values is not None and len(values) else math.nan


def objective_value(finals: list[float], objective: str) -> float:
    """The trial's value from its seeds' final returns: IQM or mean."""
    import numpy as np
    scores = np.asarray(finals, dtype=float)
    if objective == "mean" or len(scores) < 4:
        return float(np.mean(scores))  # The IQM of fewer than 4 cuts nothing.
    from rlframe.utils.report.stats import iqm
    return float(iqm(scores))


def run_trial(study: optuna.Study, settings: TuneSettings, trial_id: int, folder: str) -> None:
    """Run (or resume) the trial's seeds, then tell Optuna its value or that it was
    pruned or failed."""
    import optuna
    from optuna.trial import TrialState
    from rlframe.presets import build_experiment
    from rlframe.runners.callbacks import check_callbacks
    from rlframe.utils.checkpoint import find_snapshot
    from rlframe.utils.logging.context import logger_context_at
    trial = optuna.trial.Trial(study, trial_id)
    number = trial.number
    if os.path.isfile(os.path.join(folder, PRUNED_FILE)):  # Pruned, then killed.
        study.tell(trial, state=TrialState.PRUNED)
        return
    values = {key: dist.suggest(trial) for key, dist in settings.dists().items()}
    config = apply(dict(settings.config, algo=settings.algo, env_id=settings.env_id,
                        n_steps=settings.n_steps), values)
    finals = []
    try:
        for index, seed in enumerate(settings.seeds):
            run_dir = os.path.join(folder, f"run_{seed}")
            if os.path.isfile(os.path.join(run_dir, RUN_DONE_FILE)):
                finals.append(_read_json(os.path.join(run_dir, RUN_DONE_FILE))["final"])
                continue
            runner, full = build_experiment(dict(config, seed=seed))
            report = ReportToTrial(trial, index * settings.n_steps, folder)
            runner.callbacks = check_callbacks([*runner.callbacks, report])
            resume = os.path.isdir(run_dir) and find_snapshot(run_dir) is not None
            name = f"{settings.study_name}_trial_{number}"
            with logger_context_at(run_dir, seed, name, full, snapshot_mode="last",
                                   resume=resume, if_exists="suffix" if not resume else "error",
                                   outputs=settings.track, tracking_group=settings.study_name):
                runner.train()
            if report.pruned:
                study.tell(trial, state=TrialState.PRUNED)
                return
            finals.append(final_return(run_dir))
            write_json_atomic(os.path.join(run_dir, RUN_DONE_FILE), dict(final=finals[-1]))
    except (ValueError, TypeError, FloatingPointError, RuntimeError) as error:
        print(f"Trial {number} failed: {type(error).__name__}: {error}", flush=True)
        trial.set_user_attr("error", f"{type(error).__name__}: {error}")
        study.tell(trial, state=TrialState.FAIL)
        return
    value = objective_value(finals, settings.objective)
    if not math.isfinite(value):
        trial.set_user_attr("error", "no finite evaluation return")
        study.tell(trial, state=TrialState.FAIL)
        return
    trial.set_user_attr("finals", finals)
    study.tell(trial, value)


def worker_main(argv: list[str]) -> None:
    """One worker: ``SLOT_CODE OUT WORKER_ID``; takes trials until none is left."""
    from rlframe.utils.processes import start_child
    start_child()
    out_dir = os.path.dirname(os.path.abspath(argv[1]))  # argv[1]: OUT/workers.
    settings = TuneSettings(**_read_json(os.path.join(out_dir, TUNE_FILE)))
    study = load_study(settings)
    while True:
        claimed = next_trial(study, settings, out_dir)
        if claimed is None:
            return
        run_trial(study, settings, *claimed)


if __name__ == "__main__":
    worker_main(sys.argv[1:])
